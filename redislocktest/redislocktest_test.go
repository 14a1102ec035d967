package redislocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/redislocktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLost waits for the lock's context to end and returns the loss.
func waitLost(t *testing.T, lock *redislock.Lock) *redislock.LostError {
	t.Helper()
	select {
	case <-lock.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not notice within 10s")
	}
	var lost *redislock.LostError
	require.True(t, errors.As(context.Cause(lock.Context()), &lost), "cause: %v", context.Cause(lock.Context()))
	return lost
}

func TestTheWatchdogNoticesEachWayOfBreakingALock(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(env *redislocktest.Env, name string)
		reason  redislock.LostReason
	}{
		{"an expired lease is lost as expired", func(env *redislocktest.Env, name string) { env.Expire(name) }, redislock.Expired},
		{"a deleted key is lost as expired", func(env *redislocktest.Env, name string) { env.Delete(name) }, redislock.Expired},
		{"a stolen lock is lost as taken", func(env *redislocktest.Env, name string) { env.Steal(name) }, redislock.Taken},
		{"a lease outrun by the server's clock is lost as expired", func(env *redislocktest.Env, name string) {
			env.FastForward(time.Minute)
		}, redislock.Expired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			// A TTL far above the test's length: only the helper can end the lease.
			env := redislocktest.New(t, redislock.WithTTL(30*time.Second))
			other, err := env.Client.Acquire(ctx, "bystander")
			require.NoError(t, err)
			lock, err := env.Client.Acquire(ctx, "job")
			require.NoError(t, err)
			token, held := env.Holder("job")
			require.True(t, held)
			require.Equal(t, lock.Token(), token)

			c.breakIt(env, "job")
			lost := waitLost(t, lock)
			require.Equal(t, c.reason, lost.Reason)
			require.Equal(t, "job", lost.Name)
			require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

			if c.reason == redislock.Taken {
				thief, held := env.Holder("job")
				require.True(t, held, "the thief's key is left alone")
				require.NotEqual(t, lock.Token(), thief)
			} else {
				_, held := env.Holder("job")
				require.False(t, held)
			}
			if c.name != "a lease outrun by the server's clock is lost as expired" {
				require.NoError(t, other.Context().Err(), "other locks are untouched")
			}
			_ = other.Release(ctx)
		})
	}
}

func TestStealKeepsTheTTLAndReturnsTheNewToken(t *testing.T) {
	env := redislocktest.New(t, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
	ctx := context.Background()
	lock, err := env.Client.Acquire(ctx, "job")
	require.NoError(t, err)
	stolen := env.Steal("job")
	token, held := env.Holder("job")
	require.True(t, held)
	require.Equal(t, stolen, token)
	require.Equal(t, time.Minute, env.Mini.TTL(env.Key("job")), "the lease is kept as it was")
	require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)
	require.Equal(t, stolen, env.Redis.Get(ctx, env.Key("job")).Val(), "release left the thief's key")
}

func TestFastForwardFreesALockForAWaiterOnlyPastItsTTL(t *testing.T) {
	env := redislocktest.New(t, redislock.WithWatchdog(false), redislock.WithTTL(10*time.Second))
	ctx := context.Background()
	holder, err := env.Client.Acquire(ctx, "job")
	require.NoError(t, err)
	defer holder.Release(ctx)

	env.FastForward(9 * time.Second)
	_, err = env.Client.Acquire(ctx, "job")
	require.ErrorIs(t, err, redislock.ErrNotAcquired, "one second of lease left")
	env.FastForward(time.Second)
	next, err := env.Client.Acquire(ctx, "job")
	require.NoError(t, err, "the lease ran out on the server")
	require.NoError(t, next.Release(ctx))
}

func TestKeysFollowTheKeyPrefixGivenToNew(t *testing.T) {
	env := redislocktest.New(t, redislock.WithKeyPrefix("app:locks:"), redislock.WithFencing())
	ctx := context.Background()
	require.Equal(t, "app:locks:{job}", env.Key("job"))
	require.False(t, env.Mini.Exists("app:locks:{redislocktest-probe}:fence"), "finding the prefix left no fence counter")
	lock, err := env.Client.Acquire(ctx, "job")
	require.NoError(t, err)
	require.Positive(t, lock.Fence())
	require.Equal(t, lock.Key(), env.Key("job"))
	env.Delete("job")
	require.Equal(t, redislock.Expired, waitLost(t, lock).Reason)
	require.ErrorIs(t, lock.Release(ctx), redislock.ErrNotHeld)

	plain := redislocktest.New(t)
	require.Equal(t, redislock.DefaultKeyPrefix+"{job}", plain.Key("job"))
	require.Empty(t, plain.Mini.Keys(), "New leaves the server empty")
}

func TestHolderOfAFreeLock(t *testing.T) {
	env := redislocktest.New(t)
	token, held := env.Holder("nobody")
	require.False(t, held)
	require.Empty(t, token)
}

func TestHolderOfALockWithMetadataIsItsToken(t *testing.T) {
	env := redislocktest.New(t)
	lock, err := env.Client.Acquire(context.Background(), "job", redislock.WithMetadata("host=a pid=1"))
	require.NoError(t, err)
	token, held := env.Holder("job")
	require.True(t, held)
	require.Equal(t, lock.Token(), token)
	require.NoError(t, lock.Release(context.Background()))
}

// recorder is a TB that records failures instead of stopping a goroutine.
type recorder struct {
	failures []string
	cleanups []func()
}

func (r *recorder) Helper()                           {}
func (r *recorder) Cleanup(f func())                  { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Fatalf(format string, args ...any) { r.failures = append(r.failures, format) }
func (r *recorder) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestMisuseFailsTheTestWithAClearMessage(t *testing.T) {
	t.Run("breaking a lock nobody holds", func(t *testing.T) {
		rec := &recorder{}
		defer rec.close()
		env := redislocktest.New(rec)
		env.Steal("nobody")
		env.Expire("nobody")
		env.Delete("nobody")
		require.Len(t, rec.failures, 3)
		require.Contains(t, rec.failures[0], "nobody holds the lock")
	})
	t.Run("invalid options", func(t *testing.T) {
		rec := &recorder{}
		defer rec.close()
		redislocktest.New(rec, redislock.WithTTL(0))
		require.Len(t, rec.failures, 1)
	})
}

// kinds are the ways to hold a name: each takes it with the holders it
// says (a lock has one), on env's Client with opts.
var kinds = []struct {
	name    string
	holders int
	acquire func(env *redislocktest.Env, name string, opts ...redislock.Option) (*redislock.Lock, error)
}{
	{"a lock", 1, func(env *redislocktest.Env, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return env.Client.Acquire(context.Background(), name, opts...)
	}},
	{"a shared lock", 2, func(env *redislocktest.Env, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return env.Client.AcquireShared(context.Background(), name, opts...)
	}},
	{"a semaphore", 2, func(env *redislocktest.Env, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return env.Client.AcquireSemaphore(context.Background(), name, 3, opts...)
	}},
}

func TestEveryKindsHoldersLoseItToExpireStealDeleteAndFastForward(t *testing.T) {
	ways := []struct {
		name    string
		breakIt func(env *redislocktest.Env, name string)
		reason  redislock.LostReason
	}{
		{"Expire", func(env *redislocktest.Env, name string) { env.Expire(name) }, redislock.Expired},
		{"Delete", func(env *redislocktest.Env, name string) { env.Delete(name) }, redislock.Expired},
		{"Steal", func(env *redislocktest.Env, name string) { env.Steal(name) }, redislock.Taken},
		{"FastForward", func(env *redislocktest.Env, name string) { env.FastForward(time.Minute) }, redislock.Expired},
	}
	for _, kind := range kinds {
		for _, way := range ways {
			t.Run(kind.name+", "+way.name, func(t *testing.T) {
				env := redislocktest.New(t, redislock.WithTTL(30*time.Second))
				var holders []*redislock.Lock
				for range kind.holders {
					l, err := kind.acquire(env, "job", redislock.WithMetadata("worker"))
					require.NoError(t, err)
					holders = append(holders, l)
				}
				way.breakIt(env, "job")
				for _, l := range holders {
					require.Equal(t, way.reason, waitLost(t, l).Reason, "every holder loses it")
					require.ErrorIs(t, l.Release(context.Background()), redislock.ErrNotHeld)
				}
				token, held := env.Holder("job")
				if way.reason == redislock.Taken {
					require.True(t, held, "the thief holds it")
					require.Equal(t, "stolen-by-redislocktest", token)
					_, err := kind.acquire(env, "job", redislock.WithRetry(redislock.NoRetry()))
					require.Error(t, err, "nobody else gets in")
				} else {
					require.False(t, held)
				}
			})
		}
	}
}

func TestHolderIsTheHolderWhoseLeaseEndsFirst(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			env := redislocktest.New(t, redislock.WithWatchdog(false))
			// All kept reachable: a Lock dropped while held is released.
			var holders []*redislock.Lock
			for i := range kind.holders {
				// The later, the shorter: the last one's lease ends first.
				l, err := kind.acquire(env, "job", redislock.WithTTL(time.Duration(60-10*i)*time.Second), redislock.WithMetadata("w"))
				require.NoError(t, err)
				holders = append(holders, l)
			}
			first := holders[len(holders)-1]
			token, held := env.Holder("job")
			require.True(t, held)
			require.Equal(t, first.Token(), token)

			require.NoError(t, first.Release(context.Background()))
			token, held = env.Holder("job")
			require.Equal(t, kind.holders > 1, held, "held while a holder is left")
			if held {
				require.Equal(t, holders[0].Token(), token)
				require.NoError(t, holders[0].Release(context.Background()))
			}
		})
	}
}

// The package doc's Client.Break: the lock passes on at once, to a waiter
// that nothing else would wake for an hour; the holder learns at its next
// extension.
func TestClientBreakHandsTheLockToTheWaiterAtOnce(t *testing.T) {
	env := redislocktest.New(t, redislock.WithTTL(time.Minute))
	ctx := context.Background()
	holder, err := env.Client.Acquire(ctx, "job")
	require.NoError(t, err)
	got := make(chan *redislock.Lock, 1)
	go func() {
		l, err := env.Client.Acquire(ctx, "job", redislock.WithRetry(redislock.LinearBackoff(time.Hour)))
		if err != nil {
			l = nil
		}
		got <- l
	}()
	require.Eventually(t, func() bool { return env.Redis.ZCard(ctx, env.Key("job")+":q").Val() == 1 },
		10*time.Second, time.Millisecond, "the waiter did not queue")
	_, err = env.Client.Break(ctx, "job")
	require.NoError(t, err)
	var next *redislock.Lock
	select {
	case next = <-got:
		require.NotNil(t, next, "the waiter got the lock")
	case <-time.After(10 * time.Second): // an hour's backoff: only the hand-over gets it in
		t.Fatal("the waiter did not get the lock")
	}
	token, _ := env.Holder("job")
	require.Equal(t, next.Token(), token)
	// Before the waiter lets go: the holder then finds the waiter's token.
	require.Equal(t, redislock.Taken, waitLost(t, holder).Reason, "handed to the waiter: taken")
	require.NoError(t, next.Release(ctx))
}
