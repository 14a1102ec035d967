package redislock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// failingGiveBack fails the first multi release it sees, armed, without
// sending it (a connection that broke), after running then.
type failingGiveBack struct {
	armed atomic.Bool
	then  func()
}

func (h *failingGiveBack) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failingGiveBack) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && args[1] == multiReleaseSHA && h.armed.CompareAndSwap(true, false) {
			h.then()
			cmd.SetErr(errors.New("connection reset (a test's)"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *failingGiveBack) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A multi lock's SETs that took some names give them back before the
// script runs under the same token. When that give-back fails, it is the
// janitor's, under that token: the attempt fails, rather than have the
// script take the names under a token the janitor then releases (a lock
// whose keys vanish under its holder, and a name two hold).
func TestAFailedGiveBackOfAMultiLocksSETsFailsTheAttempt(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = admin.Close() })
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		c := New(rdb, WithLogger(discard()))
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		warmUp(t, ctx, c) // a script ran: the first attempt is SETs

		other, err := New(admin, WithLogger(discard())).Acquire(ctx, "gb:b")
		require.NoError(t, err)
		// The give-back fails, and b comes free before the script would run.
		hook := &failingGiveBack{then: func() { require.NoError(t, other.Release(ctx)) }}
		hook.armed.Store(true)
		rdb.AddHook(hook)

		l, err := c.AcquireMulti(ctx, []string{"gb:a", "gb:b", "gb:c"})
		require.Error(t, err, "not a lock whose keys the janitor is to release")
		require.Nil(t, l)
		require.False(t, hook.armed.Load(), "the give-back was tried")
		keys := []string{DefaultKeyPrefix + "{gb:a}", DefaultKeyPrefix + "{gb:b}", DefaultKeyPrefix + "{gb:c}"}
		// The janitor gives back what the SETs took (its rounds are at most
		// 250 ms apart; the window allows a loaded machine many of them).
		waitFor(t, func() bool { return admin.Exists(ctx, keys...).Val() == 0 }, "the SETs' names were never given back")
	})
}
