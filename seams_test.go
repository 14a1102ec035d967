package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/faultproxy"
	"github.com/redislock/redislock/internal/redistest"
)

// The seams between the exclusive lock and the lock family (issue 29):
// what a waiter leaves behind when it goes, and who is told when a lock
// is let go.

// familyKind is one way of taking a name, as a test drives it.
type familyKind struct {
	name    string
	acquire func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error)
}

var (
	exclusiveKind = familyKind{"exclusive", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.Acquire(ctx, name, opts...)
	}}
	sharedKind = familyKind{"shared", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireShared(ctx, name, opts...)
	}}
	semaphoreKind = familyKind{"semaphore of 1", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireSemaphore(ctx, name, 1, opts...)
	}}
	multiKind = familyKind{"multi", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireMulti(ctx, []string{name, name + "-other"}, opts...)
	}}
)

// A waiter that gave up (its ctx ended, or its strategy ran out) is never
// handed the lock: the release right after it returned lets the next
// caller in, and a caller that does not wait finds the name free. With the
// waiter's place still in the server's queue, the release handed the lock
// to it, and the name was held by nobody until that hand-over lapsed.
func TestAWaiterThatGaveUpIsHandedNothing(t *testing.T) {
	t.Parallel()
	cases := []struct{ holder, waiter familyKind }{
		{exclusiveKind, exclusiveKind},
		{exclusiveKind, sharedKind},
		{semaphoreKind, semaphoreKind},
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, tc := range cases {
			for _, waiters := range []int{1, 3} {
				for _, sameClient := range []bool{true, false} {
					where := "on other Clients"
					if sameClient {
						where = "on the holder's Client"
					}
					t.Run(fmt.Sprintf("%s holder, %d %s waiters %s", tc.holder.name, waiters, tc.waiter.name, where), func(t *testing.T) {
						t.Parallel() // each on names of its own
						stalled := 0
						for trial := range 3 {
							if requireGoneWaitersHandedNothing(t, b, tc.holder, tc.waiter, waiters, sameClient,
								fmt.Sprintf("gone-%s-%d-%v-%d", tc.waiter.name, waiters, sameClient, trial)) {
								stalled++
							}
						}
						require.Less(t, stalled, 3, "the machine held up the give-backs of every trial")
					})
				}
			}
		}
	})
}

// requireGoneWaitersHandedNothing runs one trial on name; stalled when a
// waiter returned before its give-back was answered (see below).
func requireGoneWaitersHandedNothing(t *testing.T, b *backend, holderKind, waiterKind familyKind, waiters int, sameClient bool, name string) (stalled bool) {
	t.Helper()
	ctx := context.Background()
	c := redislock.New(b.rdb, quiet)
	// (The sequence takes the lock for 200 ms first, without the
	// watchdog; the Extend makes every kind's lease a minute alike, longer
	// than the waiters can take to queue on a loaded machine.)
	holder, err := holderKind.acquire(ctx, c, name, redislock.WithTTL(time.Second), redislock.WithWatchdog(false))
	require.NoError(t, err)
	require.NoError(t, holder.Extend(ctx, time.Minute))

	var wg sync.WaitGroup
	errs := make([]error, waiters)
	wctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	for i := range waiters {
		wc := c
		if !sameClient {
			wc = redislock.New(b.rdb, quiet)
		}
		wg.Go(func() {
			_, errs[i] = waiterKind.acquire(wctx, wc, name, redislock.WithRetry(redislock.LinearBackoff(10*time.Second)))
		})
	}
	// They give up once every one is in line on the server (exclusive
	// waiters of one Client take turns: the turn's holder alone queues, the
	// others wait behind it in the Client). It was a 500 ms timeout, which
	// a loaded machine could end before any had queued.
	inLine := int64(waiters)
	if sameClient && waiterKind.name == exclusiveKind.name {
		inLine = 1
	}
	eventually(t, 30*time.Second, func() bool { return queueLen(t, b.rdb, name) == inLine }, "the waiters never queued")
	giveUp()
	wg.Wait()
	for i, err := range errs {
		// Not acquired (ErrNotAcquired, or, for a waiter whose answer was
		// not read yet, none), with its places in line on the server.
		require.ErrorIs(t, err, context.Canceled, "waiter %d gives up", i)
	}
	// A waiter waits for its give-back as long as the link usually takes,
	// from when the give-back's goroutine runs; one still in line now was
	// not answered in that time, and is finished in the background: a
	// machine that held the give-back up so long (two busy loops beside
	// the suite can) makes a trial that shows nothing.
	// Such a trial still checks that the give-back, when it lands, undoes
	// what the release handed to the waiter that left: the name is free
	// again once it has, with nothing left in line.
	if queueLen(t, b.rdb, name) != 0 {
		t.Logf("%s: a give-back was not answered by the time its waiter returned", name)
		require.NoError(t, holder.Release(ctx))
		eventually(t, 10*time.Second, func() bool {
			next, err := holderKind.acquire(ctx, c, name, redislock.WithTTL(2*time.Second))
			if err != nil {
				require.ErrorIs(t, err, redislock.ErrNotAcquired)
				return false
			}
			require.NoError(t, next.Release(ctx))
			return true
		}, "the name stayed held by a waiter that left")
		require.Zero(t, queueLen(t, b.rdb, name), "nothing is left in line")
		return true
	}

	require.NoError(t, holder.Release(ctx))
	next, err := holderKind.acquire(ctx, c, name, redislock.WithTTL(2*time.Second))
	require.NoError(t, err, "a caller that does not wait, right after the release")
	require.NoError(t, next.Release(ctx))
	return false
}

// An attempt whose caller gave up during a partition longer than the TTL
// still reaches Redis when the partition heals (what was sent before it
// arrives then) and takes the name with a fresh lease, under a token nobody
// has. The give-back keeps going until Redis answers again, and then for a
// lease more: the name is free again soon after the network heals, not a
// whole TTL later. (It stopped at the attempt's own lease end, during the
// partition.)
func TestAnAttemptThatLandsAfterALongPartitionIsGivenBack(t *testing.T) {
	t.Parallel()
	// Freed in half the TTL: the janitor retries every 250 ms at most, so
	// 1.5 s leaves a loaded machine room, and the code before took a TTL.
	const ttl = 3 * time.Second
	for _, tc := range []struct{ kind, next familyKind }{
		{exclusiveKind, exclusiveKind}, {multiKind, multiKind},
		{sharedKind, exclusiveKind}, // a shared caller would join the late share
		{semaphoreKind, semaphoreKind},
	} {
		kind := tc.kind
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b *backend) {
				ctx := context.Background()
				proxy := newProxy(t, b.rdb.Options().Addr)
				rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
				t.Cleanup(func() { _ = rdb.Close() })
				c := redislock.New(rdb, quiet, redislock.WithTTL(ttl))
				name := "partitioned-" + strings.ReplaceAll(kind.name, " ", "-")
				// The scripts are loaded: one command. (Under the 100 ms read
				// timeout a loaded machine may miss: tried again, on a name
				// of its own each time, a missed release's lock left to lapse.)
				warmed := false
				for i := 0; i < 20 && !warmed; i++ {
					warm, err := kind.acquire(ctx, c, fmt.Sprintf("%s-warm-%d", name, i))
					warmed = err == nil && warm.Release(ctx) == nil
				}
				require.True(t, warmed, "a warm-up acquire and release within the read timeout, in 20 tries")

				proxy.SetMode(faultproxy.Hold)
				_, err := kind.acquire(ctx, c, name)
				require.Error(t, err, "no answer during the partition")
				require.False(t, errors.Is(err, redislock.ErrNotAcquired), "a timeout is no verdict: %v", err)
				require.Positive(t, proxy.Held(), "the attempt is held on its way")
				// The partition outlasts the attempt's lease.
				time.Sleep(ttl + 200*time.Millisecond)
				proxy.SetMode(faultproxy.Pass)
				healed := time.Now()

				other := redislock.New(b.rdb, quiet)
				var taken *redislock.Lock
				deadline := time.Now().Add(5 * time.Second)
				for taken, err = tc.next.acquire(ctx, other, name); err != nil; taken, err = tc.next.acquire(ctx, other, name) {
					require.True(t, time.Now().Before(deadline), "the name is still held %v after the partition healed: %v", time.Since(healed), err)
					time.Sleep(2 * time.Millisecond) // polling interval
				}
				free := time.Since(healed)
				require.NoError(t, taken.Release(ctx))
				require.Less(t, free, ttl/2, "free again soon after the partition healed, not a lease later")
				t.Logf("free %v after the partition healed", free.Round(time.Millisecond))
			})
		})
	}
}

// Close returns by its ctx's deadline whatever the network does, and the
// Client's waiters get ErrClosed at once, also one whose attempt is stuck
// on the stalled connection; what it could not release is reported. (It
// returned after go-redis's read timeout, 3 s on its defaults.)
func TestCloseKeepsToItsDeadlineOnAStalledNetwork(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		proxy := newProxy(t, b.rdb.Options().Addr)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults
		t.Cleanup(func() { _ = rdb.Close() })
		c := redislock.New(rdb, quiet)
		var held []*redislock.Lock // kept: a dropped Lock is released by itself
		for _, name := range []string{"close-a", "close-b"} {
			l, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			held = append(held, l)
		}
		blocker, err := redislock.New(b.rdb, quiet).Acquire(ctx, "close-w")
		require.NoError(t, err)
		type verdict struct {
			err error
			at  time.Time
		}
		waited := make(chan verdict, 1)
		go func() {
			_, err := c.Acquire(ctx, "close-w", redislock.WithRetry(redislock.LinearBackoff(10*time.Second)))
			waited <- verdict{err, time.Now()}
		}()
		eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{close-w}:q").Val() == 1 },
			"the waiter never queued")

		proxy.SetMode(faultproxy.Blackhole)
		// The waiter's next look at the lock (every half second while
		// queued) is stuck on the stalled connection.
		time.Sleep(600 * time.Millisecond)
		start := time.Now()
		closeCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err = c.Close(closeCtx)
		took := time.Since(start)
		require.Error(t, err)
		require.ErrorContains(t, err, "2 locks not confirmed released")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// Bounds well below the 3 s the code before took, with room for a
		// loaded machine's scheduling.
		require.Less(t, took, 2*time.Second, "Close returns by its ctx's deadline")
		select {
		case v := <-waited:
			require.ErrorIs(t, v.err, redislock.ErrClosed)
			require.Less(t, v.at.Sub(start), time.Second, "the waiter was told at once")
		case <-time.After(time.Second):
			t.Fatal("the waiter is still waiting after Close returned")
		}
		proxy.SetMode(faultproxy.Pass)
		proxy.ResetAll() // go-redis gives up on the stalled connections now
		require.NoError(t, blocker.Release(ctx))
		runtime.KeepAlive(held)
	})
}

// Every kind of waiter is woken by the release that lets it in, whatever
// kind the holder is, not at its backoff (a minute, past its ctx). A multi
// waiter, which listens without queuing, gets the lock only if the release
// wakes it (behind a plain lock or shared holders it found out at its
// backoff: their release announced itself only when someone queued). A
// queued waiter's refresh (half a second) is put out of reach too, so
// every kind gets the lock only by being woken. Not parallel: the refresh
// is the package's.
func TestEveryWaiterIsWokenByTheReleaseThatLetsItIn(t *testing.T) {
	t.Cleanup(redislock.SetQueueRefresh(time.Hour))
	multiHolder := familyKind{"multi", func(ctx context.Context, c *redislock.Client, name string, opts ...redislock.Option) (*redislock.Lock, error) {
		return c.AcquireMulti(ctx, []string{name, name + "-held"}, opts...)
	}}
	cases := []struct{ holder, waiter familyKind }{
		{exclusiveKind, exclusiveKind}, {exclusiveKind, sharedKind}, {exclusiveKind, multiKind},
		{sharedKind, exclusiveKind}, {sharedKind, multiKind},
		{multiHolder, exclusiveKind}, {multiHolder, sharedKind}, {multiHolder, multiKind},
		{semaphoreKind, semaphoreKind},
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, tc := range cases {
			t.Run(tc.holder.name+" holder, "+tc.waiter.name+" waiter", func(t *testing.T) {
				ctx := context.Background()
				name := "woken-" + strings.ReplaceAll(tc.holder.name+"-"+tc.waiter.name, " ", "-")
				holder, err := tc.holder.acquire(ctx, redislock.New(b.rdb, quiet), name)
				require.NoError(t, err)
				got := make(chan error, 1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					l, err := tc.waiter.acquire(wctx, redislock.New(b.rdb, quiet), name,
						redislock.WithRetry(redislock.LinearBackoff(time.Minute)))
					if err == nil {
						err = l.Release(ctx)
					}
					got <- err
				}()
				// The waiter queued, or listens to the name's releases: it
				// is waiting.
				channel := "lock:{" + name + "}:released"
				eventually(t, 5*time.Second, func() bool {
					return b.rdb.ZCard(ctx, "lock:{"+name+"}:q").Val() > 0 || b.rdb.PubSubNumSub(ctx, channel).Val()[channel] > 0
				}, "the waiter never waited")
				require.NoError(t, holder.Release(ctx))
				require.NoError(t, <-got, "woken by the release, within its ctx")
			})
		}
	})
}

// A Lock dropped while held (nothing references it or its Context) is
// released by its Client and logged at Error, with how long it was held
// and where it was acquired; a Lock whose Context is still referenced (a
// goroutine still selecting on ctx.Done()) is kept. Before, the watchdog
// extended a dropped Lock for the life of the process, silently.
func TestADroppedLockIsReleasedAndLogged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		logs := &logRecorder{}
		c := redislock.New(b.rdb, redislock.WithLogger(slog.New(logs)), redislock.WithTTL(time.Minute))
		requireReleasedOnceUnreachable := func(what string) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for b.rdb.Exists(ctx, "lock:{"+what+"}").Val() == 1 {
				require.True(t, time.Now().Before(deadline), "%s is still held after it was dropped", what)
				runtime.GC() // finds the Lock unreachable; its finalizer runs soon after
				time.Sleep(5 * time.Millisecond)
			}
		}

		t.Run("dropped", func(t *testing.T) {
			func() {
				_, err := c.Acquire(ctx, "dropped") // the Lock is dropped here
				require.NoError(t, err)
			}()
			requireReleasedOnceUnreachable("dropped")
			// The janitor may delete the key before the line is written.
			eventually(t, 5*time.Second, func() bool {
				_, ok := logs.find(slog.LevelError, "lock dropped without Release")
				return ok
			}, "logged at Error: %v", logs.lines())
			line, _ := logs.find(slog.LevelError, "lock dropped without Release")
			require.Contains(t, line, "name=dropped")
			require.Contains(t, line, "held_for=")
			require.Contains(t, line, "acquired_at=")
			require.Contains(t, line, "seams_test.go:", "where it was acquired")
		})

		// Every way in records its own caller's line, not a frame of the
		// library's or the caller's caller's (which, here, would be
		// another line of this file).
		t.Run("acquired at the caller's line, for every kind", func(t *testing.T) {
			// at drops the Lock and gives the line it was called from: the
			// line of the acquiring call, written in its arguments.
			at := func(_ *redislock.Lock, err error) (int, error) { _, _, line, _ := runtime.Caller(1); return line, err }
			for name, acquire := range map[string]func() (int, error){
				"at-exclusive": func() (int, error) { return at(c.Acquire(ctx, "at-exclusive")) },
				"at-shared":    func() (int, error) { return at(c.AcquireShared(ctx, "at-shared")) },
				"at-semaphore": func() (int, error) { return at(c.AcquireSemaphore(ctx, "at-semaphore", 2)) },
				"at-multi": func() (int, error) {
					return at(c.AcquireMulti(ctx, []string{"at-multi", "at-multi-2"}, redislock.WithTTL(time.Hour)))
				},
			} {
				line, err := acquire()
				require.NoError(t, err)
				want := fmt.Sprintf("seams_test.go:%d", line)
				eventually(t, 10*time.Second, func() bool {
					runtime.GC()
					for _, l := range logs.lines() {
						if strings.Contains(l, "lock dropped without Release") && strings.Contains(l, "name="+name+" ") {
							require.Contains(t, l, want, "where %s was acquired", name)
							return true
						}
					}
					return false
				}, "%s: no log of its drop: %v", name, logs.lines())
			}
		})

		// A Lock whose Context was made, but whose Done channel nobody
		// asked for, goes after one collection, as one without a Context.
		t.Run("dropped with its context, after one collection", func(t *testing.T) {
			func() {
				l, err := c.Acquire(ctx, "dropped-ctx")
				require.NoError(t, err)
				require.NoError(t, l.Context().Err())
			}()
			defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection but this one
			runtime.GC()
			eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{dropped-ctx}").Val() == 0 },
				"still held after the collection that found it dropped")
		})

		t.Run("kept while its context is referenced", func(t *testing.T) {
			stop := make(chan struct{})
			watching := make(chan struct{})
			var lock weak.Pointer[redislock.Lock]
			func() {
				l, err := c.AcquireShared(ctx, "watched")
				require.NoError(t, err)
				lock = weak.Make(l)
				lockCtx := l.Context()
				go func() {
					close(watching)
					select { // keeps lockCtx, which it reads after, and through it the Lock
					case <-lockCtx.Done():
						t.Errorf("the lock was lost while its context was referenced: %v", context.Cause(lockCtx))
					case <-stop:
					}
					_ = lockCtx.Err()
				}()
			}()
			<-watching
			for range 5 {
				runtime.GC()
			}
			// Still reachable after full collections, so never finalized.
			require.NotNil(t, lock.Value(), "the Lock was collected while its context is referenced")
			require.Equal(t, int64(1), b.rdb.Exists(ctx, "lock:{watched}").Val(), "released while its context is referenced")
			close(stop) // the goroutine lets the context go
			requireReleasedOnceUnreachable("watched")
		})

		// A goroutine that waits on the Done channel alone (neither the Lock
		// nor its context is reachable from it once it waits) keeps the
		// Lock as well: released once the channel goes, and the channel
		// still closes when the hold ends (here its Client closes).
		waitOnDone := func(t *testing.T, c *redislock.Client, name string, stop chan struct{}) (returned chan struct{}) {
			waiting, returned := make(chan struct{}), make(chan struct{})
			var done, finalized <-chan struct{}
			func() {
				l, err := c.Acquire(ctx, name)
				require.NoError(t, err)
				done = l.Context().Done()
				// A cleanup on an object with a finalizer runs only once
				// the finalizer has run (runtime.AddCleanup).
				signal := make(chan struct{})
				runtime.AddCleanup(l, func(ch chan struct{}) { close(ch) }, signal)
				finalized = signal
				go func() {
					defer close(returned)
					close(waiting)
					select {
					case <-done:
					case <-stop:
					}
				}()
			}()
			<-waiting
			deadline := time.Now().Add(10 * time.Second)
			for isFinalized := false; !isFinalized; {
				select {
				case <-finalized:
					isFinalized = true
				case <-time.After(time.Millisecond): // between collections
					require.True(t, time.Now().Before(deadline), "the dropped Lock was never finalized")
					runtime.GC()
				}
			}
			// The finalizer has run: ending the hold would have closed done in it.
			select {
			case <-done:
				t.Fatal("its Done channel closed while a goroutine waits on it: the hold ended")
			default:
			}
			require.Equal(t, int64(1), b.rdb.Exists(ctx, "lock:{"+name+"}").Val(), "released while a goroutine waits on its Done channel")
			return returned
		}
		t.Run("kept while a goroutine waits on its Done channel", func(t *testing.T) {
			stop := make(chan struct{})
			returned := waitOnDone(t, c, "done-only", stop)
			close(stop) // the goroutine lets the channel go
			<-returned
			requireReleasedOnceUnreachable("done-only")
		})
		t.Run("a Done channel waited on alone closes when the hold ends", func(t *testing.T) {
			closing := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute))
			returned := waitOnDone(t, closing, "done-closed", nil)
			require.NoError(t, closing.Close(ctx))
			<-returned
			require.Zero(t, b.rdb.Exists(ctx, "lock:{done-closed}").Val(), "Close released it")
		})
	})
}

// A semaphore's slot handed to a waiter keeps the holders' set alive for
// the hand-over's lease: the set's expiry was the releaser's latest lease,
// so the set, and with it the handed slot, vanished while the waiter that
// took it without a claim still counted on it, and a third caller took a
// slot of a semaphore of 2 (found by an independent review). With one
// holder, the release emptied the set and the hand-over re-created it with
// no expiry at all. On a real server: miniredis does not expire keys as
// time passes.
func TestAHandedSemaphoreSlotKeepsItsSetAlive(t *testing.T) {
	t.Parallel()
	server := redistest.Start(t)
	rdb := newRedisClient(t, server.Addr())
	ctx := context.Background()
	a := redislock.New(rdb, quiet)
	b := redislock.New(newRedisClient(t, server.Addr()), quiet)
	c := redislock.New(newRedisClient(t, server.Addr()), quiet)
	noWatchdog := []redislock.Option{redislock.WithTTL(time.Second), redislock.WithWatchdog(false)}

	t.Run("the releaser held the latest lease", func(t *testing.T) {
		other, err := a.AcquireSemaphore(ctx, "handed", 2, noWatchdog...)
		require.NoError(t, err)
		start := time.Now()
		time.Sleep(50 * time.Millisecond) // the next lease ends later
		holder, err := a.AcquireSemaphore(ctx, "handed", 2, noWatchdog...)
		require.NoError(t, err)
		time.Sleep(time.Until(start.Add(800 * time.Millisecond)))
		got := make(chan *redislock.Lock, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			l, err := b.AcquireSemaphore(wctx, "handed", 2, redislock.WithTTL(time.Second), redislock.WithRetry(redislock.LinearBackoff(time.Second)))
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
			got <- l
		}()
		eventually(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, "lock:{handed}:q").Val() == 1 }, "the waiter never queued")
		require.NoError(t, holder.Release(ctx))
		waiter := <-got
		require.NotNil(t, waiter)
		// Past the releaser's lease end: the waiter still holds its slot,
		// so at most one more caller gets one.
		time.Sleep(time.Until(start.Add(1200 * time.Millisecond)))
		var extra []*redislock.Lock
		for range 2 {
			if l, err := c.AcquireSemaphore(ctx, "handed", 2, redislock.WithTTL(time.Second)); err == nil {
				extra = append(extra, l)
			}
		}
		require.Len(t, extra, 1, "a semaphore of 2, held by the waiter (valid: %v)", waiter.Valid())
		for _, l := range append(extra, waiter) {
			require.NoError(t, l.Release(ctx))
		}
		runtime.KeepAlive(other)
	})

	t.Run("the releaser was the only holder", func(t *testing.T) {
		holder, err := a.AcquireSemaphore(ctx, "alone", 1, redislock.WithTTL(time.Second))
		require.NoError(t, err)
		// A waiter of a process that went away right after queuing.
		now := time.Now().UnixMilli()
		require.NoError(t, rdb.ZAdd(ctx, "lock:{alone}:q", redis.Z{Score: float64(now), Member: "GONEGONEGO.nAAAA"}).Err())
		require.NoError(t, rdb.ZAdd(ctx, "lock:{alone}:qx", redis.Z{Score: float64(now + 1500), Member: "GONEGONEGO.nAAAA"}).Err())
		require.NoError(t, holder.Release(ctx))
		ttl := rdb.PTTL(ctx, "lock:{alone}").Val()
		require.Positive(t, ttl, "the handed slot's set expires")
		require.LessOrEqual(t, ttl, time.Second)
	})
}

// A waiter that returns on a Redis error reply (here SEMLIMIT: the holders
// changed their limit while it waited) takes its place out of the queue,
// as one that gives up does: it kept it, and the next release handed it
// the slot, held by nobody (found by an independent review).
func TestAWaiterRefusedByAnErrorReplyLeavesTheQueue(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		gone, err := c.AcquireSemaphore(ctx, "limited", 1)
		require.NoError(t, err)
		// The waiter talks through a proxy that holds its commands while the
		// slot changes hands, so that its half-second look cannot take the
		// freed slot first.
		proxy, err := faultproxy.New(b.rdb.Options().Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = proxy.Close() })
		wrdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
		t.Cleanup(func() { _ = wrdb.Close() })
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := redislock.New(wrdb, quiet).AcquireSemaphore(wctx, "limited", 1, redislock.WithRetry(redislock.LinearBackoff(5*time.Second)))
			done <- err
		}()
		eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{limited}:q").Val() == 1 }, "the waiter never queued")
		proxy.SetMode(faultproxy.Hold)
		require.NoError(t, b.rdb.Del(ctx, "lock:{limited}").Err()) // the holder's slot is gone (a crash)
		x, err := c.AcquireSemaphore(ctx, "limited", 2)            // a holder with another limit
		require.NoError(t, err)
		proxy.SetMode(faultproxy.Pass)
		require.ErrorIs(t, <-done, redislock.ErrLimitMismatch, "the waiter's next look")
		// Its place is given back as it returns (a loaded machine can
		// finish that just after: the link's usual round trip bounds the wait).
		eventually(t, 10*time.Second, func() bool { return b.rdb.ZCard(ctx, "lock:{limited}:q").Val() == 0 }, "the waiter kept its place")
		require.NoError(t, x.Release(ctx))
		y, err := c.AcquireSemaphore(ctx, "limited", 2)
		require.NoError(t, err)
		z, err := c.AcquireSemaphore(ctx, "limited", 2)
		require.NoError(t, err, "nothing was handed to the waiter that returned")
		require.NoError(t, y.Release(ctx))
		require.NoError(t, z.Release(ctx))
		runtime.KeepAlive(gone)
	})
}

// What hangs on a Lock's Context references it: an AfterFunc on it (a
// worker stopped on loss, say) keeps a dropped Lock held, as the context
// itself would, and calling the AfterFunc's stop lets it go.
func TestAnAfterFuncOnTheContextKeepsTheLockUntilStopped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		logs := &logRecorder{}
		c := redislock.New(b.rdb, redislock.WithLogger(slog.New(logs)))
		var stop func() bool
		var lock weak.Pointer[redislock.Lock]
		func() {
			l, err := c.Acquire(ctx, "afterfunc")
			require.NoError(t, err)
			lock = weak.Make(l)
			stop = context.AfterFunc(l.Context(), func() { t.Error("the lock was lost while held") })
		}()
		for range 5 {
			runtime.GC()
		}
		// Still reachable after full collections, so never finalized.
		require.NotNil(t, lock.Value(), "the Lock was collected while an AfterFunc hangs on its context")
		require.Equal(t, int64(1), b.rdb.Exists(ctx, "lock:{afterfunc}").Val(), "released while an AfterFunc hangs on its context")
		require.True(t, stop(), "the AfterFunc had not run")
		deadline := time.Now().Add(10 * time.Second)
		for b.rdb.Exists(ctx, "lock:{afterfunc}").Val() == 1 {
			require.True(t, time.Now().Before(deadline), "still held after the AfterFunc was stopped")
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		eventually(t, 5*time.Second, func() bool {
			_, logged := logs.find(slog.LevelError, "lock dropped without Release")
			return logged
		}, "the drop was not logged at Error")
	})
}

// A child of a Lock's context is registered with that context until its
// cancel is called (or its deadline passes), and it points back at the
// Lock: a child whose cancel is never called (go vet's lostcancel warns of
// it) keeps a dropped Lock, even when nothing references the child either.
// The Lock is then held, extended by the watchdog, until its hold ends
// otherwise: here Client.Close releases it. A child cancelled, or with a
// deadline that passed, keeps nothing: the dropped Lock is released once
// collected (docs/lifecycle.md).
func TestAChildContextNeverCancelledKeepsADroppedLockUntilClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet, redislock.WithTTL(time.Minute))
		// dropWithChild takes name, hangs a child on the Lock's context
		// with child, and drops both.
		dropWithChild := func(name string, child func(lockCtx context.Context) context.CancelFunc) weak.Pointer[redislock.Lock] {
			l, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			_ = child(l.Context())
			return weak.Make(l)
		}
		releasedOnceCollected := func(name string) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for b.rdb.Exists(ctx, "lock:{"+name+"}").Val() == 1 {
				require.True(t, time.Now().Before(deadline), "%s is still held after it was dropped", name)
				runtime.GC() // finds the Lock unreachable; its finalizer runs soon after
				time.Sleep(5 * time.Millisecond)
			}
		}

		kept := dropWithChild("child-kept", func(lockCtx context.Context) context.CancelFunc {
			_, cancel := context.WithCancel(lockCtx)
			return cancel // dropped, never called
		})
		dropWithChild("child-cancelled", func(lockCtx context.Context) context.CancelFunc {
			_, cancel := context.WithCancel(lockCtx)
			cancel()
			return cancel
		})
		dropWithChild("child-deadline", func(lockCtx context.Context) context.CancelFunc {
			_, cancel := context.WithTimeout(lockCtx, 50*time.Millisecond)
			return cancel // dropped, never called: its deadline cancels it
		})
		releasedOnceCollected("child-cancelled")
		releasedOnceCollected("child-deadline")
		for range 5 {
			runtime.GC()
		}
		// Still reachable after full collections, so never finalized.
		require.NotNil(t, kept.Value(), "the Lock was collected while a child never cancelled hangs on its context")
		require.Equal(t, int64(1), b.rdb.Exists(ctx, "lock:{child-kept}").Val(), "released while a child never cancelled hangs on its context")
		require.NoError(t, c.Close(ctx))
		require.Zero(t, b.rdb.Exists(ctx, "lock:{child-kept}").Val(), "Close released it")
	})
}

// An attempt still on its way when Close turns its waiter away must not
// leave a lease held by nobody: here the holder (another Client) releases
// while the waiter's attempt is stuck in a hook, the release hands the lock
// to the waiter's place, and the attempt lands only after the janitor's
// last try has given that back. Close must let the attempt land first and
// then give back what it took. (Seen as a rare failure of
// TestCloseReleasesEverythingAndTurnsCallersAway: the name held for a whole
// TTL by the waiter's token after Close returned.)
func TestCloseGivesBackAnAttemptThatLandsAfterItsWaiterLeft(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		lateAttempt(t, b, func(c *redislock.Client, _ context.CancelFunc) <-chan error {
			closed := make(chan error, 1)
			go func() { closed <- c.Close(context.Background()) }()
			return closed
		}, redislock.ErrClosed)
	})
}

// The same when the waiter's ctx ends: the janitor keeps at it until the
// attempt's reply was read, then gives back what it took.
func TestTheJanitorGivesBackAnAttemptThatLandsAfterItsWaiterLeft(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b *backend) {
		lateAttempt(t, b, func(_ *redislock.Client, cancel context.CancelFunc) <-chan error {
			cancel()
			return nil
		}, context.Canceled)
	})
}

// lateAttempt holds a waiter's attempt in a hook while its holder (another
// Client) releases, which hands the lock to the waiter's place; stop then
// makes the waiter leave (returning what Close returns, if it calls it),
// and the attempt lands once a give-back of the key has run (the code
// before had then given back already), or after 2 s (a fallback that
// decides nothing: either way, the code before fails and the fix passes).
// Nothing may hold the name afterwards.
func lateAttempt(t *testing.T, b *backend, stop func(*redislock.Client, context.CancelFunc) <-chan error, want error) {
	ctx := context.Background()
	const key = "lock:{late}"
	holder, err := redislock.New(b.rdb, quiet).Acquire(ctx, "late")
	require.NoError(t, err)
	gate := &attemptGate{key: key, held: make(chan struct{}), open: make(chan struct{})}
	wrdb := redis.NewClient(&redis.Options{Addr: b.rdb.Options().Addr})
	t.Cleanup(func() { _ = wrdb.Close() })
	wrdb.AddHook(gate)
	c := redislock.New(wrdb, quiet)
	t.Cleanup(func() { _ = c.Close(ctx) })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "late", redislock.WithRetry(redislock.LinearBackoff(10*time.Second)))
		waited <- err
	}()
	eventually(t, 5*time.Second, func() bool { return b.rdb.ZCard(ctx, key+":q").Val() == 1 }, "the waiter never queued")
	gate.close()
	select { // its next attempt (the half-second refresh) is held
	case <-gate.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter sent no attempt")
	}
	require.NoError(t, holder.Release(ctx)) // handed to the waiter's place
	closed := stop(c, cancel)
	require.ErrorIs(t, <-waited, want)
	select {
	case <-gate.gaveBack():
	case <-time.After(2 * time.Second):
	}
	close(gate.open)
	if closed != nil {
		require.NoError(t, <-closed)
		require.Zero(t, b.rdb.Exists(ctx, key).Val(), "the attempt that landed after its waiter left holds the name")
		return
	}
	eventually(t, 5*time.Second, func() bool { return b.rdb.Exists(ctx, key).Val() == 0 },
		"the attempt that landed after its waiter left holds the name")
}

// attemptGate holds the first command on key sent once it is closed (an
// acquire attempt) until open is closed, and tells when a later command on
// key (a give-back) has had its reply.
type attemptGate struct {
	key        string
	mu         sync.Mutex
	closed     bool
	holding    bool
	held, open chan struct{}
	back       chan struct{}
}

func (g *attemptGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.back = true, make(chan struct{})
}

func (g *attemptGate) gaveBack() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.back
}

// pass runs next for cmds, holding them when they are the attempt.
func (g *attemptGate) pass(cmds []redis.Cmder, next func() error) error {
	onKey := false
	for _, cmd := range cmds {
		for _, arg := range cmd.Args() {
			if s, ok := arg.(string); ok && s == g.key {
				onKey = true
			}
		}
	}
	g.mu.Lock()
	hold := onKey && g.closed && !g.holding
	later := onKey && g.holding
	if hold {
		g.holding = true
	}
	g.mu.Unlock()
	if hold {
		close(g.held)
		<-g.open
	}
	err := next()
	if later {
		g.mu.Lock()
		select {
		case <-g.back:
		default:
			close(g.back)
		}
		g.mu.Unlock()
	}
	return err
}

func (g *attemptGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *attemptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return g.pass([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (g *attemptGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return g.pass(cmds, func() error { return next(ctx, cmds) })
	}
}

// A release hands a name only to a waiter that can take what it lets go:
// a semaphore's slot to a semaphore's waiter, a lock to a lock's (exclusive
// or shared); a waiter of another kind stays in line, and hears the name
// freed. Both cases start with a holder that crashed (its key deleted, as
// its lease would lapse) while a waiter of its kind is queued, and a caller
// of the other kind taking the free name: a semaphore caller counts the
// queue and takes a slot beside the waiter, a plain Acquire's SET NX
// ignores it. (Its release handed the name to the waiter's token as its
// own kind: the waiter took a semaphore's slot for a lock, or a lock for a
// slot, and the name was held by a token nobody could use until the
// hand-over lapsed.) The waiters' refresh is put out of reach, so that
// only the release lets them in; not parallel.
func TestAHandOverGoesOnlyToAWaiterThatCanTakeIt(t *testing.T) {
	t.Cleanup(redislock.SetQueueRefresh(time.Hour))
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := redislock.New(b.rdb, quiet)
		// queued starts a waiter on a Client of its own and returns once it
		// queued, listened and tried once more (see settle).
		queued := func(t *testing.T, name string, acquire func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error)) <-chan lockResult {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			t.Cleanup(cancel)
			rdb := newRedisClient(t, b.rdb.Options().Addr)
			settled, _ := settle(t, b, rdb, name)
			got := goAcquire(func() (*redislock.Lock, error) { return acquire(wctx, redislock.New(rdb, quiet)) })
			settled()
			return got
		}
		wait := redislock.WithRetry(redislock.LinearBackoff(time.Minute))

		t.Run("a lock's waiter, a semaphore's release", func(t *testing.T) {
			const name, key = "crossed-slot", "lock:{crossed-slot}"
			require.NoError(t, b.rdb.Set(ctx, key, "CRASHEDHOLDER", time.Minute).Err())
			got := queued(t, name, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
				return c.Acquire(ctx, name, wait)
			})
			require.NoError(t, b.rdb.Del(ctx, key).Err()) // its lease lapses
			slot, err := c.AcquireSemaphore(ctx, name, 2)
			require.NoError(t, err, "a slot beside the one the queued waiter is owed")
			require.NoError(t, slot.Release(ctx))
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			require.Equal(t, r.l.Token(), b.rdb.Get(ctx, key).Val(), "the waiter holds the name as a lock")
			require.NoError(t, r.l.Release(ctx))
		})

		t.Run("a semaphore's waiter, a lock's release", func(t *testing.T) {
			const name, key = "crossed-lock", "lock:{crossed-lock}"
			crashed, err := c.AcquireSemaphore(ctx, name, 1)
			require.NoError(t, err)
			got := queued(t, name, func(ctx context.Context, c *redislock.Client) (*redislock.Lock, error) {
				return c.AcquireSemaphore(ctx, name, 1, wait)
			})
			require.NoError(t, b.rdb.Del(ctx, key).Err()) // its lease lapses
			lock, err := c.Acquire(ctx, name)
			require.NoError(t, err)
			require.NoError(t, lock.Release(ctx))
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			require.NoError(t, b.rdb.ZScore(ctx, key, r.l.Token()).Err(), "the waiter holds a slot")
			require.NoError(t, r.l.Release(ctx))
			_ = crashed.Release(ctx) // its slot is gone: ErrNotHeld
		})
	})
}

// Every kind of waiter is queued by one clock: the waiter that came first
// stays first. Here a semaphore's waiter queues, the semaphore's holder
// crashes, a plain lock takes the name and an exclusive waiter queues
// behind it. (A semaphore's waiter's arrival counted in microseconds, the
// others' in milliseconds: the later exclusive waiter went ahead.) The
// waiters' refresh is put out of reach (the semaphore's waiter would find
// a lock and give up); not parallel.
func TestWaitersOfEveryKindQueueByOneClock(t *testing.T) {
	t.Cleanup(redislock.SetQueueRefresh(time.Hour))
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const name, key = "one-clock", "lock:{one-clock}"
		c := redislock.New(b.rdb, quiet)
		crashed, err := c.AcquireSemaphore(ctx, name, 1)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		wait := redislock.WithRetry(redislock.LinearBackoff(time.Minute))
		rdb := newRedisClient(t, b.rdb.Options().Addr)
		settled, _ := settle(t, b, rdb, name)
		first := goAcquire(func() (*redislock.Lock, error) {
			return redislock.New(rdb, quiet).AcquireSemaphore(wctx, name, 1, wait)
		})
		settled()
		head := b.rdb.ZRange(ctx, key+":q", 0, 0).Val()
		require.NoError(t, b.rdb.Del(ctx, key).Err()) // its holder's lease lapses
		lock, err := c.Acquire(ctx, name)
		require.NoError(t, err)
		second := goAcquire(func() (*redislock.Lock, error) { return redislock.New(b.rdb, quiet).Acquire(wctx, name, wait) })
		eventually(t, 10*time.Second, func() bool { return queueLen(t, b.rdb, name) == 2 }, "the exclusive waiter never queued")
		require.Equal(t, head, b.rdb.ZRange(ctx, key+":q", 0, 0).Val(), "the first waiter is still first in line")

		// The lock goes to the exclusive waiter (a semaphore's waiter
		// cannot take it); when that lets go, the semaphore's waiter, still
		// in line, hears it and takes the free name.
		require.NoError(t, lock.Release(ctx))
		for _, got := range []<-chan lockResult{second, first} {
			r := receive(t, got, 10*time.Second)
			require.NoError(t, r.err)
			require.NoError(t, r.l.Release(ctx))
		}
		_ = crashed.Release(ctx) // its slot is gone: ErrNotHeld
	})
}
