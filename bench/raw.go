package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The raw baseline is what a careful user writes with go-redis alone: SET
// NX with a random token, and a compare-and-delete script to release.
// Two round trips per cycle: the floor for any safe lock on this client.
var (
	rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
	// rawFencedAcquire is SET NX PX and, when it won, INCR of the fence
	// counter: still one round trip.
	rawFencedAcquire = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
)

// errRawHeld is returned by the raw baseline when the key is taken.
var errRawHeld = errors.New("raw baseline: lock held by someone else")

// loadRawScripts loads the baseline's scripts, so that every EVALSHA hits
// and no run pays the NOSCRIPT fallback.
func loadRawScripts(ctx context.Context, rdb redis.Scripter) error {
	for _, script := range []*redis.Script{rawRelease, rawFencedAcquire} {
		if err := script.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("loading the raw baseline's script: %w", err)
		}
	}
	return nil
}

// rawAcquire sends SET key token NX PX ttl (go-redis spells whole seconds
// as EX) and returns the token, or errRawHeld.
func rawAcquire(ctx context.Context, rdb redis.Cmdable, key string, ttl time.Duration) (string, error) {
	token := rand.Text()
	ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return "", err
	}
	if !ok {
		return "", errRawHeld
	}
	return token, nil
}

// rawFenced acquires with a fence in one round trip and returns the token
// and the fence, or errRawHeld.
func rawFenced(ctx context.Context, rdb redis.Scripter, key, fenceKey string, ttl time.Duration) (string, int64, error) {
	token := rand.Text()
	fence, err := rawFencedAcquire.EvalSha(ctx, rdb, []string{key, fenceKey}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return "", 0, err
	}
	if fence == 0 {
		return "", 0, errRawHeld
	}
	return token, fence, nil
}

// rawReleaseKey deletes key if it still holds token, with EVALSHA, and
// reports whether it did.
func rawReleaseKey(ctx context.Context, rdb redis.Scripter, key, token string) (bool, error) {
	n, err := rawRelease.EvalSha(ctx, rdb, []string{key}, token).Int64()
	return n == 1, err
}

// rawReleaseOwn releases key with rawReleaseKey and returns errNotOurs
// when it held another token or none.
func rawReleaseOwn(ctx context.Context, rdb redis.Scripter, key, token string) error {
	ok, err := rawReleaseKey(ctx, rdb, key, token)
	if err == nil && !ok {
		err = errNotOurs
	}
	return err
}
