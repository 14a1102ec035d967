package redislock_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// The fuzz targets run as plain tests on their seed corpus (f.Add and
// testdata/fuzz/<FuzzName>/) in every `go test`, and explore further with
//
//	go test -run '^$' -fuzz '^FuzzLockName$' -fuzztime 60s .
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 60s .
//
// Each shares one miniredis per target (per fuzzing worker) to keep an
// iteration cheap, and leaves nothing behind: the lock is released and its
// goroutines are gone before the next input.

// nonEmptyHashTag tells whether Redis Cluster hashes key by a non-empty
// {tag}: the bytes between the first '{' and the first '}' after it.
func nonEmptyHashTag(key string) bool {
	start := indexByte(key, '{')
	if start < 0 {
		return false
	}
	end := indexByte(key[start+1:], '}')
	return end > 0
}

// requireNoLockGoroutines waits until no goroutine of the library (a
// watchdog, a timer callback) is left running.
func requireNoLockGoroutines(t testing.TB) {
	t.Helper()
	var stacks string
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "github.com/redislock/redislock.(*") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of the library outlived its lock:\n%s", stacks)
		}
		time.Sleep(time.Millisecond) // polling interval while a goroutine exits
	}
}

// requireClearInvalid asserts that err is a rejection of bad input with a
// message that says more than the sentinel.
func requireClearInvalid(t testing.TB, err error, format string, args ...any) {
	t.Helper()
	require.ErrorIs(t, err, redislock.ErrInvalidArgument, append([]any{format}, args...)...)
	msg := strings.TrimSpace(strings.TrimPrefix(err.Error(), redislock.ErrInvalidArgument.Error()))
	require.NotEmpty(t, strings.Trim(msg, ": "), "the rejection says what is wrong: %q", err.Error())
}

func FuzzLockName(f *testing.F) {
	f.Add("job", "lock:")
	f.Add("settlement:2026-12-02", "")
	f.Add("", "lock:")
	f.Add("}", "lock:")
	f.Add("}job", "lock:")
	f.Add("x}y", "lock:")
	f.Add("{}", "lock:")
	f.Add("{a}", "{b}")
	f.Add("a", "x{}")
	f.Add("a", "x{")
	f.Add("a", "}{")
	f.Add("\x00\xff\xfe", "\x00")
	f.Add("é😀 with space", "app:")
	f.Add(strings.Repeat("n", 64<<10), "lock:")
	f.Add(strings.Repeat("{", 1000)+"}", strings.Repeat("}", 1000))

	mini := newMiniServer(f)
	rdb := newRedisClient(f, mini.Addr())
	ctx := context.Background()
	const ttl = time.Minute

	f.Fuzz(func(t *testing.T, name, prefix string) {
		c := redislock.New(rdb, quiet, redislock.WithTTL(ttl), redislock.WithKeyPrefix(prefix))
		l, err := c.Acquire(ctx, name, redislock.WithFencing())
		wantKey := prefix + "{" + name + "}"
		if name == "" || !nonEmptyHashTag(wantKey) {
			requireClearInvalid(t, err, "name %q prefix %q must be rejected", name, prefix)
			require.Nil(t, l)
			// The same rejection on every entry point, before any I/O.
			err = c.RunWithLock(ctx, name, func(context.Context) error {
				t.Fatal("fn ran for a rejected name")
				return nil
			})
			requireClearInvalid(t, err, "RunWithLock name %q prefix %q", name, prefix)
			return
		}
		require.NoError(t, err, "name %q prefix %q", name, prefix)
		require.Equal(t, wantKey, l.Key())
		require.Equal(t, name, l.Name())
		require.Equal(t, clusterSlot(l.Key()), clusterSlot(l.Key()+":fence"),
			"key %q and its fence counter must share a cluster slot", l.Key())
		require.GreaterOrEqual(t, l.Fence(), int64(1))
		held, err := mini.Get(l.Key()) // the key, byte for byte
		require.NoError(t, err)
		require.Equal(t, l.Token(), held)

		left, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Positive(t, left)
		require.LessOrEqual(t, left, ttl)
		require.NoError(t, l.Extend(ctx, ttl))

		_, err = c.Acquire(ctx, name)
		require.ErrorIs(t, err, redislock.ErrNotAcquired, "the same name is one lock")

		require.NoError(t, l.Release(ctx))
		require.False(t, mini.Exists(l.Key()), "release deleted the key")
		requireNoLockGoroutines(t)
	})
}

// retryKinds are the strategies FuzzOptions builds from its inputs.
const (
	retryNone uint8 = iota
	retryLinear
	retryExponential
	retryLimited
	retryNil
	retryCustom // a user strategy returning the fuzzed wait as is
	retryKindCount
)

// fuzzFlags are the on/off options of FuzzOptions, packed in one byte.
const (
	flagFencing uint8 = 1 << iota
	flagWatchdogOff
	flagAsDefaults // options given to New instead of per call
	flagHeld       // someone else holds the lock
)

func FuzzOptions(f *testing.F) {
	ms := int64(time.Millisecond)
	type seed struct {
		ttl, interval, maxHold int64
		kind                   uint8
		a, b                   int64
		attempts               int
		extendTTL              int64
		flags                  uint8
	}
	for _, s := range []seed{
		{int64(time.Minute), 0, 0, retryNone, 0, 0, 0, int64(time.Minute), 0},
		{ms, 0, 0, retryNone, 0, 0, 0, ms, flagFencing},
		{ms - 1, 0, 0, retryNone, 0, 0, 0, ms, 0},
		{ms + ms/2, ms, 0, retryNone, 0, 0, 0, ms - 1, 0},
		{2 * ms, ms, 1, retryLinear, 1, 0, 0, 2 * ms, flagFencing},
		{0, 0, 0, retryNone, 0, 0, 0, 0, 0},
		{-1, -1, -1, retryLinear, -1, -1, -1, -1, 0},
		{math.MinInt64, math.MinInt64, math.MinInt64, retryExponential, math.MinInt64, math.MinInt64, math.MinInt, math.MinInt64, 0xff},
		{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64, retryExponential, 1, math.MaxInt64, 0, math.MaxInt64, flagFencing},
		{math.MaxInt64, 1, 1, retryLimited, 1, math.MaxInt64, math.MaxInt, math.MaxInt64, flagHeld},
		{int64(time.Second), 0, 0, retryExponential, ms, ms / 2, 0, int64(time.Second), 0},
		{int64(time.Second), 0, 0, retryLimited, ms, 2 * ms, -1, int64(time.Second), flagHeld},
		{int64(time.Second), 0, 0, retryNil, 0, 0, 0, int64(time.Second), flagAsDefaults},
		{int64(time.Second), 0, 0, retryCustom, -1, 0, 3, int64(time.Second), flagHeld},
		{int64(time.Second), 0, 0, retryCustom, math.MaxInt64, 0, 3, int64(time.Second), flagHeld | flagAsDefaults},
		{int64(time.Second), int64(time.Second) - 1, 0, retryLinear, math.MaxInt64, 0, 0, int64(time.Second), flagHeld | flagWatchdogOff},
		{int64(time.Hour), 1, int64(time.Hour), retryNone, 0, 0, 0, int64(time.Hour), flagWatchdogOff},
		{int64(24 * time.Hour), 0, 0, retryNone, 0, 0, 0, int64(24*time.Hour) + 1, 0},
		{int64(24*time.Hour) + 1, 0, 0, retryNone, 0, 0, 0, int64(time.Second), 0},
	} {
		f.Add(s.ttl, s.interval, s.maxHold, s.kind, s.a, s.b, s.attempts, s.extendTTL, s.flags)
	}

	mini := newMiniServer(f)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr(), PoolSize: 4})
	f.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, ttl, interval, maxHold int64, kind uint8, a, b int64, attempts int, extendTTL int64, flags uint8) {
		mini.FlushAll()
		opts := []redislock.Option{
			redislock.WithTTL(time.Duration(ttl)),
			redislock.WithExtendInterval(time.Duration(interval)),
			redislock.WithMaxHold(time.Duration(maxHold)),
			redislock.WithWatchdog(flags&flagWatchdogOff == 0),
		}
		if flags&flagFencing != 0 {
			opts = append(opts, redislock.WithFencing())
		}
		retryValid := true
		switch kind % retryKindCount {
		case retryNone:
			opts = append(opts, redislock.WithRetry(redislock.NoRetry()))
		case retryLinear:
			opts = append(opts, redislock.WithRetry(redislock.LinearBackoff(time.Duration(a))))
			retryValid = a > 0
		case retryExponential:
			opts = append(opts, redislock.WithRetry(redislock.ExponentialBackoff(time.Duration(a), time.Duration(b))))
			retryValid = a > 0 && b >= a
		case retryLimited:
			opts = append(opts, redislock.WithRetry(redislock.LimitRetry(redislock.ExponentialBackoff(time.Duration(a), time.Duration(b)), attempts)))
			retryValid = a > 0 && b >= a && attempts >= 0
		case retryNil:
			opts = append(opts, redislock.WithRetry(nil))
			retryValid = false
		case retryCustom:
			opts = append(opts, redislock.WithRetry(retryFunc(func(attempt int) (time.Duration, bool) {
				return time.Duration(a), attempt <= attempts%5
			})))
		}

		// What the documentation promises, computed independently.
		// The interval is compared with the TTL as Redis keeps it, in
		// whole milliseconds: 1.5ms with an interval of 1.2ms is rejected.
		// The shortest lease is 10ms, the longest 24h; an interval is 0
		// (TTL/3) or at least 1ms.
		valid := ttl >= 10*ms && ttl <= int64(24*time.Hour) &&
			(interval == 0 || interval >= ms) && time.Duration(interval) < time.Duration(ttl).Truncate(time.Millisecond) &&
			maxHold >= 0 && retryValid

		if flags&flagHeld != 0 {
			require.NoError(t, rdb.Set(ctx, "lock:{fuzz}", "someone-else", time.Minute).Err())
		}
		c := redislock.New(rdb, quiet)
		perCall := opts
		if flags&flagAsDefaults != 0 {
			c, perCall = redislock.New(rdb, append([]redislock.Option{quiet}, opts...)...), nil
		}
		// A short deadline bounds the waiting for a held lock under any
		// strategy; a free lock gets a generous one.
		wait := 10 * time.Second
		if flags&flagHeld != 0 {
			wait = 5 * time.Millisecond
		}
		waitCtx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		l, err := c.Acquire(waitCtx, "fuzz", perCall...)

		switch {
		case !valid:
			requireClearInvalid(t, err, "ttl=%d interval=%d maxHold=%d kind=%d a=%d b=%d attempts=%d", ttl, interval, maxHold, kind, a, b, attempts)
			require.Nil(t, l)
		case flags&flagHeld != 0:
			require.Nil(t, l)
			if !errors.Is(err, redislock.ErrNotAcquired) {
				// The deadline can also end an attempt in flight.
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}
		case err != nil && strings.Contains(err.Error(), "lease ran out before the reply arrived"):
			// A 10ms lease on a loaded machine: the reply can come after
			// its safe deadline, and the key is given back.
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.Nil(t, l)
		default:
			require.NoError(t, err)
			if flags&flagFencing != 0 {
				require.GreaterOrEqual(t, l.Fence(), int64(1))
			} else {
				require.Zero(t, l.Fence())
			}
			extendErr := l.Extend(ctx, time.Duration(extendTTL))
			switch {
			case extendTTL < 10*ms || extendTTL > int64(24*time.Hour):
				requireClearInvalid(t, extendErr, "Extend(%d)", extendTTL)
			case extendErr != nil:
				// Only a hold that has already ended (a max hold or
				// lease shorter than the call) may refuse.
				require.ErrorIs(t, extendErr, redislock.ErrNotHeld)
				require.Error(t, l.Context().Err())
			}
			releaseErr := l.Release(ctx)
			if releaseErr != nil {
				require.ErrorIs(t, releaseErr, redislock.ErrNotHeld)
			}
			require.Error(t, l.Context().Err(), "the hold has ended")
			if cause := context.Cause(l.Context()); !errors.Is(cause, redislock.ErrReleased) {
				require.ErrorIs(t, cause, redislock.ErrLockLost)
			}
		}
		requireNoLockGoroutines(t)
	})
}

// FuzzMetadata: any string is either refused as an invalid argument, with
// nothing sent, or stored and read back by Inspect exactly, with the token
// alone in Lock.Token and nowhere in the Info.
func FuzzMetadata(f *testing.F) {
	for _, seed := range []string{"", "host=web-3 pid=42", "é😀 mixed", "a\nb", "a\x1fb", "\xff", "\u2028", "\u202e", "\x00",
		strings.Repeat("x", redislock.MaxMetadata), strings.Repeat("x", redislock.MaxMetadata+1), strings.Repeat("é", redislock.MaxMetadata/2)} {
		f.Add(seed)
	}
	mini := newMiniServer(f)
	rdb := newRedisClient(f, mini.Addr())
	ctx := context.Background()
	c := redislock.New(rdb, quiet, redislock.WithTTL(time.Minute))

	f.Fuzz(func(t *testing.T, metadata string) {
		before := mini.CommandCount()
		l, err := c.Acquire(ctx, "fuzz", redislock.WithMetadata(metadata))
		if err != nil {
			require.ErrorIs(t, err, redislock.ErrInvalidArgument)
			require.Equal(t, before, mini.CommandCount(), "nothing was sent")
			require.True(t, len(metadata) > redislock.MaxMetadata || !utf8.ValidString(metadata) ||
				strings.ContainsFunc(metadata, func(r rune) bool {
					return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control)
				}), "refused printable metadata %q: %v", metadata, err)
			return
		}
		defer func() { require.NoError(t, l.Release(ctx)) }()
		require.Equal(t, metadata, l.Metadata())
		require.Len(t, l.Token(), 26)
		info, err := c.Inspect(ctx, "fuzz")
		require.NoError(t, err)
		require.True(t, info.Held)
		require.Equal(t, metadata, info.Metadata)
		require.NotContains(t, info.Metadata, l.Token())
	})
}
