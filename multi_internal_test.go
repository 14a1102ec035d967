package redislock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock/internal/lockrules"
	"github.com/redislock/redislock/internal/redistest"
)

// giveBackHook runs then on the first multi release it sees, armed (a
// give-back), in place of sending it when then returns an error; and
// notes the token each SET carried.
type giveBackHook struct {
	armed  atomic.Bool
	then   func(ctx context.Context) error
	mu     sync.Mutex
	tokens []string // the SETs'
}

func (h *giveBackHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *giveBackHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[1] == multiReleaseSHA && h.armed.CompareAndSwap(true, false) {
			if err := h.then(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h *giveBackHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, cmd := range cmds {
			if args := cmd.Args(); cmd.Name() == "set" && len(args) > 2 {
				if token, ok := args[2].(*string); ok {
					h.tokens = append(h.tokens, *token)
				}
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// giveBackClient is a warmed-up Client (a script ran: its multi attempts
// start with SETs) with hook on its go-redis client, and another Client's
// hold of gb:b, which the multi lock's SETs find taken.
func giveBackClient(t *testing.T, ctx context.Context, addr string, hook *giveBackHook) (*Client, *redis.Client, *Lock) {
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c := New(rdb, WithLogger(discard()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	warmUp(t, ctx, c)
	other, err := New(admin, WithLogger(discard())).Acquire(ctx, "gb:b")
	require.NoError(t, err)
	hook.armed.Store(true)
	rdb.AddHook(hook)
	return c, admin, other
}

var gbNames, gbKeys = []string{"gb:a", "gb:b", "gb:c"}, []string{DefaultKeyPrefix + "{gb:a}", DefaultKeyPrefix + "{gb:b}", DefaultKeyPrefix + "{gb:c}"}

// After the SETs' give-back, the script takes the names under a token of
// its own: a late copy of the give-back (go-redis sends a command again
// after a read timeout) releases the SETs' token, never the lock's.
func TestAMultiLockTakenAfterItsSETsGaveBackHasATokenOfItsOwn(t *testing.T) {
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var other *Lock
		hook := &giveBackHook{then: func(context.Context) error { return other.Release(ctx) }} // b comes free
		c, admin, o := giveBackClient(t, ctx, addr, hook)
		other = o

		l, err := c.AcquireMulti(ctx, gbNames, WithMetadata("job 7"))
		require.NoError(t, err, "the script took the names that came free")
		require.False(t, hook.armed.Load(), "the SETs' give-back ran")
		require.Len(t, hook.tokens, 3)
		require.NotEqual(t, hook.tokens[0], valueOf(l.Token(), "job 7"), "the SETs' token is not the lock's")
		for _, key := range gbKeys {
			require.Equal(t, valueOf(l.Token(), "job 7"), admin.Get(ctx, key).Val(), "%s: the new token, the metadata kept", key)
		}
		require.NoError(t, l.Release(ctx))
	})
}

// The SETs' give-back runs within the caller's ctx: a caller that gives up
// while it waits returns, and the janitor gives the names back.
func TestAMultiLocksGiveBackEndsWithTheCallersContext(t *testing.T) {
	type key struct{}
	forEachServer(t, func(t *testing.T, addr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		callCtx, quit := context.WithCancel(context.WithValue(ctx, key{}, "the caller's"))
		reached := make(chan any, 1)
		hook := &giveBackHook{then: func(ctx context.Context) error {
			reached <- ctx.Value(key{})
			<-ctx.Done() // a stalled link: only the ctx ends the wait
			return ctx.Err()
		}}
		c, admin, other := giveBackClient(t, ctx, addr, hook)

		got := make(chan error, 1)
		go func() {
			_, err := c.AcquireMulti(callCtx, gbNames)
			got <- err
		}()
		require.Equal(t, "the caller's", <-reached, "the give-back runs within the caller's ctx")
		quit()
		require.ErrorIs(t, <-got, context.Canceled)
		require.NoError(t, other.Release(ctx))
		// The janitor gives back what the SETs took (its rounds are at most
		// 250 ms apart; the window allows a loaded machine many of them).
		waitFor(t, func() bool { return admin.Exists(ctx, gbKeys...).Val() == 0 }, "the SETs' names were never given back")
	})
}

// On a Cluster, names in several slots are taken a slot at a time; when a
// later slot's name is held, what the earlier slots took is given back
// within the caller's ctx too: a caller that gives up while that give-back
// is stalled (a node that stopped answering) returns, and the janitor gives
// the names back. (It waited up to ReleaseTimeout, 5 s, whatever ctx said.)
func TestAMultiLocksGiveBackAcrossSlotsEndsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	cluster := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"gbx:a", "gbx:b"}
	keyOf := func(name string) string { return DefaultKeyPrefix + "{" + name + "}" }
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(lockrules.Slot(keyOf(a)), lockrules.Slot(keyOf(b))) })
	require.NotEqual(t, lockrules.Slot(keyOf(names[0])), lockrules.Slot(keyOf(names[1])))
	admin := cluster.Client(t)
	other, err := New(admin, WithLogger(discard())).Acquire(ctx, names[1]) // the later slot's name
	require.NoError(t, err)
	rdb := cluster.Client(t)
	c := New(rdb, WithLogger(discard()))
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	warmUp(t, ctx, c)
	reached := make(chan any, 1)
	hook := &giveBackHook{then: func(ctx context.Context) error {
		reached <- ctx.Value(key{})
		<-ctx.Done() // a stalled link: only the ctx ends the wait
		return ctx.Err()
	}}
	hook.armed.Store(true)
	rdb.AddHook(hook)

	callCtx, quit := context.WithCancel(context.WithValue(ctx, key{}, "the caller's"))
	got := make(chan error, 1)
	go func() {
		_, err := c.AcquireMulti(callCtx, names)
		got <- err
	}()
	require.Equal(t, "the caller's", <-reached, "the give-back runs within the caller's ctx")
	quit()
	// The verdict came before the give-back: the name is held (NoRetry,
	// the default, does not wait).
	require.ErrorIs(t, <-got, ErrNotAcquired)
	require.NoError(t, other.Release(ctx))
	waitFor(t, func() bool { return admin.Exists(ctx, keyOf(names[0])).Val() == 0 }, "the first slot's name was never given back")
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
		var other *Lock
		// The give-back fails, and b comes free before the script would run.
		hook := &giveBackHook{then: func(context.Context) error {
			require.NoError(t, other.Release(ctx))
			return errors.New("connection reset (a test's)")
		}}
		c, admin, o := giveBackClient(t, ctx, addr, hook)
		other = o

		l, err := c.AcquireMulti(ctx, gbNames)
		require.Error(t, err, "not a lock whose keys the janitor is to release")
		require.Nil(t, l)
		require.False(t, hook.armed.Load(), "the give-back was tried")
		// The janitor gives back what the SETs took (its rounds are at most
		// 250 ms apart; the window allows a loaded machine many of them).
		waitFor(t, func() bool { return admin.Exists(ctx, gbKeys...).Val() == 0 }, "the SETs' names were never given back")
	})
}
