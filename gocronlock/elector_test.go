package gocronlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/gocronlock"
	"github.com/redislock/redislock/internal/faultproxy"
)

// runLog records which pod ran the job, in order.
type runLog struct {
	mu   sync.Mutex
	pods []int
}

func (r *runLog) add(pod int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, pod)
}

func (r *runLog) snapshot() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pods)
}

// electedPod is one scheduler with its Elector, on a Redis connection of
// its own through a proxy that can cut it.
type electedPod struct {
	elector   *gocronlock.Elector
	scheduler gocron.Scheduler
	proxy     *faultproxy.Proxy
}

func startElectedPod(t *testing.T, addr string, index int, runs *runLog) *electedPod {
	t.Helper()
	proxy, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	elector, err := gocronlock.NewElector(rdb, "report-jobs", quiet, redislock.WithTTL(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, elector.Start(context.Background()))
	t.Cleanup(func() { _ = elector.Stop() })
	scheduler, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	require.NoError(t, err)
	_, err = scheduler.NewJob(gocron.DurationJob(20*time.Millisecond), gocron.NewTask(func() { runs.add(index) }))
	require.NoError(t, err)
	scheduler.Start()
	t.Cleanup(func() { _ = scheduler.Shutdown() })
	return &electedPod{elector: elector, scheduler: scheduler, proxy: proxy}
}

func TestThreeSchedulersWithElectorsOnlyTheLeaderRunsTheJobs(t *testing.T) {
	faults := []struct {
		name   string
		depose func(t *testing.T, b *backend, leader *electedPod)
	}{
		{"Elector stops", func(t *testing.T, _ *backend, leader *electedPod) { require.NoError(t, leader.elector.Stop()) }},
		{"Redis connection is cut", func(t *testing.T, b *backend, leader *electedPod) {
			leader.proxy.SetMode(faultproxy.Refuse)
			leader.proxy.ResetAll()
			if b.mini != nil {
				// miniredis's keys expire on its own clock: once the leader
				// knows its lease may be over, so does the server.
				eventually(t, 10*time.Second, func() bool { return leader.elector.IsLeader(context.Background()) != nil },
					"the cut leader still leads")
				b.mini.FastForward(2 * time.Second)
			}
		}},
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, fault := range faults {
			t.Run("when the leader's "+fault.name+", another takes over", func(t *testing.T) {
				if b.mini != nil {
					b.mini.FlushAll()
				}
				runs := &runLog{}
				var pods []*electedPod
				for i := range 3 {
					pods = append(pods, startElectedPod(t, b.rdb.Options().Addr, i, runs))
				}
				eventually(t, 10*time.Second, func() bool { return len(runs.snapshot()) >= 5 }, "the job did not run")
				first := runs.snapshot()
				leader := first[0]
				for i, pod := range first {
					require.Equal(t, leader, pod, "run %d of %v on another pod than the leader", i, first)
				}
				for i, p := range pods {
					if i == leader {
						require.NoError(t, p.elector.IsLeader(context.Background()))
					} else {
						require.ErrorIs(t, p.elector.IsLeader(context.Background()), gocronlock.ErrNotLeader)
					}
				}

				fault.depose(t, b, pods[leader])
				// Another pod leads within the TTL (2s), and from its first
				// run on, only it runs the job.
				var next int
				eventually(t, 10*time.Second, func() bool {
					all := runs.snapshot()
					i := slices.IndexFunc(all, func(pod int) bool { return pod != leader })
					if i < 0 {
						return false
					}
					next = all[i]
					return len(all)-i >= 5
				}, "no other pod ran the job")
				all := runs.snapshot()
				after := all[slices.IndexFunc(all, func(pod int) bool { return pod != leader }):]
				for i, pod := range after {
					require.Equal(t, next, pod, "run %d after the takeover on another pod than the new leader: %v", i, after)
				}
				require.NoError(t, pods[next].elector.IsLeader(context.Background()))
				require.ErrorIs(t, pods[leader].elector.IsLeader(context.Background()), gocronlock.ErrNotLeader)
			})
		}
	})
}

func TestElectorBadInputAndLifecycle(t *testing.T) {
	b := miniBackend(t)
	_, err := gocronlock.NewElector(nil, "jobs")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	_, err = gocronlock.NewElector(b.rdb, "")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	_, err = gocronlock.NewElector(b.rdb, "jobs", redislock.WithTTL(0))
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	_, err = gocronlock.NewElector(b.rdb, "jobs", redislock.WithRetry(redislock.NoRetry()))
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)

	e, err := gocronlock.NewElector(b.rdb, "jobs", quiet)
	require.NoError(t, err)
	require.ErrorIs(t, e.IsLeader(context.Background()), gocronlock.ErrNotLeader, "not started")
	require.NoError(t, e.Stop(), "stopping an Elector never started does nothing")
	//lint:ignore SA1012 the point of the test
	require.ErrorIs(t, e.Start(nil), redislock.ErrInvalidArgument) //nolint:staticcheck
	require.NoError(t, e.Start(context.Background()))
	require.Error(t, e.Start(context.Background()), "started twice")
	eventually(t, 10*time.Second, func() bool { return e.IsLeader(context.Background()) == nil }, "never led")
	require.NoError(t, e.Stop())
	require.NoError(t, e.Stop(), "a second Stop")
	err = e.IsLeader(context.Background())
	require.ErrorIs(t, err, gocronlock.ErrNotLeader)
	require.ErrorContains(t, err, "stopped")
	require.Zero(t, b.rdb.Exists(context.Background(), "lock:{jobs}").Val(), "leadership given up")

	t.Run("a campaign that Redis refuses ends, and Stop says why", func(t *testing.T) {
		require.NoError(t, b.rdb.HSet(context.Background(), "lock:{broken}", "f", "v").Err())
		e, err := gocronlock.NewElector(b.rdb, "broken", quiet)
		require.NoError(t, err)
		require.NoError(t, e.Start(context.Background()))
		eventually(t, 10*time.Second, func() bool {
			err := e.IsLeader(context.Background())
			return errors.Is(err, gocronlock.ErrNotLeader) && strings.Contains(err.Error(), "stopped")
		}, "the campaign did not end")
		require.ErrorContains(t, e.Stop(), "WRONGTYPE")
	})
}
