package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/gocronlock"
	"github.com/redislock/redislock/internal/redistest"
)

var startOfDay = time.Date(2026, 12, 2, 0, 5, 0, 0, time.UTC)

// fastJob returns at once: the worst case for "once per tick", since its
// lock is free again before a slower pod's scheduler fires.
func fastJob(context.Context, *pod) {}

// runTicksInTurn fires ticks on three pods with their own clocks, one pod
// after another, each pod finishing (run and release, or skip) before the
// next fires: pods whose clocks disagree by the length of a whole run. The
// order rotates every tick. Between ticks, passTime lets a second go by on
// the Redis side. It returns the runs per tick.
func runTicksInTurn(t *testing.T, b *backend, ticks int, passTime func(), opts ...gocronlock.Option) []int {
	t.Helper()
	pods := make([]*pod, 3)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("pod-%d", i+1), b.rdb, clockwork.NewFakeClockAt(startOfDay), fastJob, opts...)
	}
	lockKey := "lock:{tick-job}"
	runsPerTick := make([]int, ticks)
	for tick := range ticks {
		for i := range pods {
			p := pods[(tick+i)%len(pods)]
			if p.fire(t) == "ran" {
				runsPerTick[tick]++
				eventually(t, 10*time.Second, func() bool { return b.rdb.Exists(context.Background(), lockKey).Val() == 0 },
					"%s did not release the lock after its run", p.name)
			}
		}
		passTime()
	}
	return runsPerTick
}

func TestATickRunsOnceEvenWhenTheFastestPodReleasesBeforeTheOthersFire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		// The default minimum hold (500ms). On miniredis the three pods take
		// their turns in frozen server time; on a real server they must all
		// try within 500ms of the first, which takes them milliseconds.
		passTime := func() {
			if b.mini != nil {
				b.mini.FastForward(time.Second) // the next tick is a second later
				return
			}
			// On a real server the claim expires by itself.
			eventually(t, 10*time.Second, func() bool {
				return b.rdb.Exists(context.Background(), "lock:{tick-job}:ran").Val() == 0
			}, "the claim of the tick did not expire")
		}
		runs := runTicksInTurn(t, b, 4, passTime, gocronlock.WithLockOptions(quiet))
		require.Equal(t, []int{1, 1, 1, 1}, runs, "runs per tick")
	})
}

func TestWithoutAMinimumHoldAFastJobRunsOncePerPod(t *testing.T) {
	// The failure the minimum hold exists for, shown by the same procedure:
	// each pod finds the lock free and runs the tick again.
	runs := runTicksInTurn(t, miniBackend(t), 2, func() {}, gocronlock.WithMinHold(0), gocronlock.WithLockOptions(quiet))
	require.Equal(t, []int{3, 3}, runs, "runs per tick")
}

// tickLog records, for the real-clock test, how many runs each scheduled
// second had.
type tickLog struct {
	mu   sync.Mutex
	runs map[time.Time]int
	late map[time.Time]time.Duration // how long after its second the run started
}

func (l *tickLog) record(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tick := at.Truncate(time.Second)
	l.runs[tick]++
	l.late[tick] = at.Sub(tick)
}

func (l *tickLog) lateness(tick time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.late[tick]
}

func (l *tickLog) snapshot() map[time.Time]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[time.Time]int, len(l.runs))
	for k, v := range l.runs {
		out[k] = v
	}
	return out
}

// On the real clock, a real server: miniredis's own TTL clock (ClockTTL)
// is covered by the fake-clock test above instead.
func TestThreePodsOnTheRealClockRunTheJobOncePerSecond(t *testing.T) {
	run := func(t *testing.T, rdb redis.UniversalClient) {
		log := &tickLog{runs: map[time.Time]int{}, late: map[time.Time]time.Duration{}}
		job := func(context.Context, *pod) { log.record(time.Now()) }
		pods := make([]*pod, 3)
		for i := range pods {
			pods[i] = newPod(t, fmt.Sprintf("pod-%d", i+1), rdb, nil, job, gocronlock.WithLockOptions(quiet))
		}
		const wantTicks = 5
		eventually(t, 30*time.Second, func() bool { return len(log.snapshot()) >= wantTicks },
			"fewer than %d ticks ran", wantTicks)
		for _, p := range pods {
			require.NoError(t, p.shutdown())
		}

		runs := log.snapshot()
		ticks := make([]time.Time, 0, len(runs))
		for tick := range runs {
			ticks = append(ticks, tick)
		}
		sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
		for i, tick := range ticks {
			require.Equal(t, 1, runs[tick], "runs at %s (all: %v)", tick.Format("15:04:05"), runs)
			if i > 0 && tick.Sub(ticks[i-1]) != time.Second {
				// The one way a tick may go missing: the run before it
				// started so late (an overloaded machine) that its minimum
				// hold, counted from its acquisition, outlasted the next
				// second. Anything else is a bug.
				previous := log.lateness(ticks[i-1])
				require.Greater(t, previous, gocronlock.DefaultMinHold,
					"the tick before %s was missed although the run before it started only %v late", tick.Format("15:04:05"), previous)
				t.Logf("a tick before %s was missed: the run before it started %v late (overloaded machine)", tick.Format("15:04:05"), previous)
			}
		}
		total := 0
		for _, p := range pods {
			p.mu.Lock()
			total += p.runs
			p.mu.Unlock()
			for _, err := range p.errs() {
				// Shutdown cancels the job's context, which may catch a
				// pod in the middle of Lock.
				require.True(t, errors.Is(err, redislock.ErrNotAcquired) || errors.Is(err, context.Canceled),
					"%s skipped for another reason: %v", p.name, err)
			}
		}
		require.Equal(t, len(ticks), total, "one run per tick across the pods")
	}
	t.Run("redis-server", func(t *testing.T) {
		run(t, newRedisClient(t, redistest.Start(t).Addr()))
	})
}

func TestALongJobKeepsItsLockAndTheOtherPodsSkip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		if b.mini != nil {
			b.mini.ClockTTL(true)
		}
		const ttl = 300 * time.Millisecond
		started, finish := make(chan struct{}), make(chan struct{})
		job := func(context.Context, *pod) {
			close(started)
			<-finish
		}
		opts := []gocronlock.Option{gocronlock.WithLockOptions(quiet, redislock.WithTTL(ttl))}
		a := newPod(t, "pod-a", b.rdb, clockwork.NewFakeClockAt(startOfDay), job, opts...)
		other := newPod(t, "pod-b", b.rdb, clockwork.NewFakeClockAt(startOfDay), fastJob, opts...)

		require.NoError(t, a.clock.BlockUntilContext(ctx, 1))
		a.clock.Advance(time.Second)
		<-started
		lockCtx, ok := a.locker.Context("tick-job")
		require.True(t, ok, "the running job's lock context is available")
		token := b.rdb.Get(ctx, "lock:{tick-job}").Val()
		require.NotEmpty(t, token)

		// The job runs for several TTLs: the watchdog keeps the key ours.
		end := time.Now().Add(4 * ttl)
		for time.Now().Before(end) {
			require.NoError(t, lockCtx.Err(), "lock lost during the job: %v", context.Cause(lockCtx))
			require.Equal(t, token, b.rdb.Get(ctx, "lock:{tick-job}").Val(), "the key still holds the run's token")
			time.Sleep(20 * time.Millisecond) // sampling interval
		}
		require.Equal(t, "skipped", other.fire(t), "another pod's tick during the run skips")
		require.ErrorIs(t, other.errs()[0], redislock.ErrNotAcquired)

		close(finish)
		require.Equal(t, "ran", <-a.outcomes)
		eventually(t, 10*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{tick-job}").Val() == 0 },
			"the lock was not released after the run")
		require.ErrorIs(t, context.Cause(lockCtx), redislock.ErrReleased)
		_, ok = a.locker.Context("tick-job")
		require.False(t, ok, "no run holds the lock any more")
	})
}

func TestAJobThatWatchesItsLockContextStopsWhenTheLockIsTaken(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		stopped := make(chan error, 1)
		var locker *gocronlock.Locker
		job := func(jobCtx context.Context, p *pod) {
			lockCtx, ok := p.locker.Context("tick-job")
			if !ok {
				stopped <- errors.New("no lock context inside the run")
				return
			}
			select { // the work: it stops when either context is done
			case <-lockCtx.Done():
				stopped <- context.Cause(lockCtx)
			case <-jobCtx.Done():
				stopped <- jobCtx.Err()
			}
		}
		p := newPod(t, "pod-a", b.rdb, clockwork.NewFakeClockAt(startOfDay), job,
			gocronlock.WithLockOptions(quiet, redislock.WithExtendInterval(10*time.Millisecond)))
		locker = p.locker
		require.NoError(t, p.clock.BlockUntilContext(ctx, 1))
		p.clock.Advance(time.Second)
		eventually(t, 10*time.Second, func() bool { _, ok := locker.Context("tick-job"); return ok }, "the run did not start")

		require.NoError(t, b.rdb.Set(ctx, "lock:{tick-job}", "another-pods-token", time.Minute).Err())
		select {
		case cause := <-stopped:
			var lost *redislock.LostError
			require.ErrorAs(t, cause, &lost)
			require.Equal(t, redislock.Taken, lost.Reason)
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not stop after its lock was taken")
		}
		require.Equal(t, "ran", <-p.outcomes)
		eventually(t, 10*time.Second, func() bool { _, ok := locker.Context("tick-job"); return !ok }, "Unlock did not run")
		require.Equal(t, "another-pods-token", b.rdb.Get(ctx, "lock:{tick-job}").Val(), "Unlock left the new holder's key alone")
	})
}

func TestLockAndUnlockDirectly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		const minHold = 5 * time.Second
		locker, err := gocronlock.New(b.rdb, gocronlock.WithNamePrefix("billing:"), gocronlock.WithMinHold(minHold),
			gocronlock.WithLockOptions(quiet, redislock.WithTTL(10*time.Second)))
		require.NoError(t, err)

		t.Run("the lock name is the prefix and the job name, with the watchdog on", func(t *testing.T) {
			lock, err := locker.Lock(ctx, "report")
			require.NoError(t, err)
			require.NotEmpty(t, b.rdb.Get(ctx, "lock:{billing:report}").Val())
			ttl := b.rdb.PTTL(ctx, "lock:{billing:report}").Val()
			require.True(t, ttl > 9*time.Second && ttl <= 10*time.Second, "lease %v", ttl)
			claim := b.rdb.PTTL(ctx, "lock:{billing:report}:ran").Val()
			require.True(t, claim > 0 && claim <= minHold, "the claim expires by itself within the minimum hold: %v", claim)

			_, err = locker.Lock(ctx, "report")
			require.ErrorIs(t, err, redislock.ErrNotAcquired, "held")
			require.NoError(t, lock.Unlock(ctx))
			require.Zero(t, b.rdb.Exists(ctx, "lock:{billing:report}").Val(), "Unlock deletes the lock")
			require.ErrorIs(t, lock.Unlock(ctx), redislock.ErrNotHeld, "a second Unlock")
		})
		t.Run("within the minimum hold another attempt skips and leaves nothing held", func(t *testing.T) {
			_, err := locker.Lock(ctx, "report")
			require.ErrorIs(t, err, redislock.ErrNotAcquired)
			require.Contains(t, err.Error(), "minimum hold")
			require.Zero(t, b.rdb.Exists(ctx, "lock:{billing:report}").Val(), "the lock taken for the check was released")
			_, ok := locker.Context("report")
			require.False(t, ok)
		})
		t.Run("after the minimum hold the job can run again", func(t *testing.T) {
			if b.mini != nil {
				b.mini.FastForward(minHold)
			} else {
				require.NoError(t, b.rdb.PExpire(ctx, "lock:{billing:report}:ran", time.Millisecond).Err())
			}
			eventually(t, 10*time.Second, func() bool { return b.rdb.Exists(ctx, "lock:{billing:report}:ran").Val() == 0 },
				"the claim did not expire")
			lock, err := locker.Lock(ctx, "report")
			require.NoError(t, err)
			require.NoError(t, lock.Unlock(ctx))
		})
		t.Run("unlock still releases when the job's context was cancelled", func(t *testing.T) {
			other, err := gocronlock.New(b.rdb, gocronlock.WithMinHold(0), gocronlock.WithLockOptions(quiet))
			require.NoError(t, err)
			jobCtx, cancel := context.WithCancel(ctx)
			lock, err := other.Lock(jobCtx, "shutdown")
			require.NoError(t, err)
			cancel() // the scheduler shuts down
			require.NoError(t, lock.Unlock(jobCtx))
			require.Zero(t, b.rdb.Exists(ctx, "lock:{shutdown}").Val())
		})
	})
}

// failClaims makes the claim's SET fail, as if Redis went away between the
// lock and the claim.
type failClaims struct{}

func (failClaims) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failClaims) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (failClaims) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			err := errors.New("connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func TestAClaimThatFailsReleasesTheLockAndIsNotContention(t *testing.T) {
	mini := miniBackend(t)
	ctx := context.Background()
	rdb := newRedisClient(t, mini.mini.Addr())
	rdb.AddHook(failClaims{})
	locker, err := gocronlock.New(rdb, gocronlock.WithLockOptions(quiet))
	require.NoError(t, err)
	_, err = locker.Lock(ctx, "job")
	require.ErrorContains(t, err, "connection reset by peer")
	require.NotErrorIs(t, err, redislock.ErrNotAcquired, "a Redis error is not a tick someone else ran")
	require.Zero(t, mini.rdb.Exists(ctx, "lock:{job}").Val(), "the lock taken before the claim was released")
	_, ok := locker.Context("job")
	require.False(t, ok)
}

func TestBadInputIsAnErrorNotAPanic(t *testing.T) {
	rdb := miniBackend(t).rdb
	cases := map[string]func() error{
		"a nil redis client": func() error { _, err := gocronlock.New(nil); return err },
		"a typed nil redis client": func() error {
			_, err := gocronlock.New((*redis.Client)(nil))
			return err
		},
		"a nil option":            func() error { _, err := gocronlock.New(rdb, nil); return err },
		"a negative minimum hold": func() error { _, err := gocronlock.New(rdb, gocronlock.WithMinHold(-time.Second)); return err },
		"an invalid lock option": func() error {
			_, err := gocronlock.New(rdb, gocronlock.WithLockOptions(redislock.WithTTL(0)))
			return err
		},
		"a nil lock option": func() error {
			_, err := gocronlock.New(rdb, gocronlock.WithLockOptions(nil))
			return err
		},
		"fail open, which a locker cannot do": func() error {
			_, err := gocronlock.New(rdb, gocronlock.WithLockOptions(redislock.WithFailOpen()))
			return err
		},
		"a nil context": func() error {
			locker, err := gocronlock.New(rdb)
			require.NoError(t, err)
			_, err = locker.Lock(nil, "job")
			return err
		},
		"an empty job name": func() error {
			locker, err := gocronlock.New(rdb)
			require.NoError(t, err)
			_, err = locker.Lock(context.Background(), "")
			return err
		},
	}
	for name, call := range cases {
		t.Run(name+" is rejected", func(t *testing.T) {
			require.ErrorIs(t, call(), redislock.ErrInvalidArgument)
		})
	}
	t.Run("an unknown job has no lock context", func(t *testing.T) {
		locker, err := gocronlock.New(rdb)
		require.NoError(t, err)
		ctx, ok := locker.Context("never-ran")
		require.False(t, ok)
		require.Nil(t, ctx)
	})
}
