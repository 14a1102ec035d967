package gocronlock_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/gocronlock"
	"github.com/redislock/redislock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = redislock.WithLogger(slog.New(slog.DiscardHandler))

// backend is one Redis the tests run against.
type backend struct {
	rdb  *redis.Client
	mini *miniredis.Miniredis // nil on a real server
}

// forEachBackend runs test on miniredis and on a real redis-server.
func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		mini := miniredis.RunT(t)
		test(t, &backend{rdb: newRedisClient(t, mini.Addr()), mini: mini})
	})
	t.Run("redis-server", func(t *testing.T) {
		server := redistest.Start(t)
		test(t, &backend{rdb: newRedisClient(t, server.Addr())})
	})
}

// miniBackend returns a fresh miniredis and a client on it.
func miniBackend(t *testing.T) *backend {
	t.Helper()
	mini := miniredis.RunT(t)
	return &backend{rdb: newRedisClient(t, mini.Addr()), mini: mini}
}

func newRedisClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// pod is one instance of the service: its own scheduler, clock and locker,
// on the shared Redis.
type pod struct {
	name      string
	scheduler gocron.Scheduler
	clock     *clockwork.FakeClock // nil on the real clock
	locker    *gocronlock.Locker

	mu        sync.Mutex
	runs      int
	lockErrs  []error
	outcomes  chan string // "ran" after a run's job function, "skipped" after a failed Lock
	lockErred chan error
	// shutdown stops the scheduler once: gocron's Shutdown called again
	// soon after the first can wait for a stop that never comes (it sees
	// the scheduler still started) and fail after its 12 s timeout.
	shutdown func() error
}

// newPod starts a scheduler with a gocronlock.Locker on rdb, running job
// (called with the pod) as the job "tick-job" on the crontab every second.
// With a non-nil clock the scheduler runs on it.
func newPod(t *testing.T, name string, rdb redis.UniversalClient, clock *clockwork.FakeClock,
	job func(ctx context.Context, p *pod), opts ...gocronlock.Option,
) *pod {
	t.Helper()
	locker, err := gocronlock.New(rdb, opts...)
	require.NoError(t, err)
	p := &pod{name: name, clock: clock, locker: locker,
		outcomes: make(chan string, 100), lockErred: make(chan error, 100)}
	schedOpts := []gocron.SchedulerOption{gocron.WithDistributedLocker(locker), gocron.WithLocation(time.UTC)}
	if clock != nil {
		schedOpts = append(schedOpts, gocron.WithClock(clock))
	}
	p.scheduler, err = gocron.NewScheduler(schedOpts...)
	require.NoError(t, err)
	_, err = p.scheduler.NewJob(gocron.CronJob("* * * * * *", true),
		gocron.NewTask(func(ctx context.Context) {
			job(ctx, p)
			p.mu.Lock()
			p.runs++
			p.mu.Unlock()
			p.outcomes <- "ran"
		}),
		gocron.WithName("tick-job"),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			p.mu.Lock()
			p.lockErrs = append(p.lockErrs, err)
			p.mu.Unlock()
			p.outcomes <- "skipped"
		})),
	)
	require.NoError(t, err)
	p.scheduler.Start()
	p.shutdown = sync.OnceValue(p.scheduler.Shutdown)
	t.Cleanup(func() { require.NoError(t, p.shutdown()) })
	return p
}

// fire advances the pod's clock to its next tick, one second on, once its
// scheduler has armed the timer, and returns what the pod did.
func (p *pod) fire(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.clock.BlockUntilContext(ctx, 1), "%s: the scheduler armed no timer", p.name)
	p.clock.Advance(time.Second)
	select {
	case outcome := <-p.outcomes:
		return outcome
	case <-ctx.Done():
		t.Fatalf("%s: neither ran nor skipped", p.name)
		return ""
	}
}

func (p *pod) errs() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.lockErrs...)
}

// requireLost checks that ctx was cancelled with a *LostError of reason.
func requireLost(t testing.TB, ctx context.Context, reason redislock.LostReason) {
	t.Helper()
	var lost *redislock.LostError
	require.True(t, errors.As(context.Cause(ctx), &lost), "cause %v is not a *LostError", context.Cause(ctx))
	require.Equal(t, reason, lost.Reason, "loss reason")
}
