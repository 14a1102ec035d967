package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/gocronlock"
)

func Example() {
	// An in-memory Redis for the example; in production, your go-redis client.
	mini, _ := miniredis.Run()
	defer mini.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()

	ran, skipped := make(chan string, 2), make(chan error, 2)
	// Two pods, each with its own scheduler and locker, on the same Redis.
	for _, podName := range []string{"pod-1", "pod-2"} {
		locker, err := gocronlock.New(rdb,
			gocronlock.WithNamePrefix("billing:"), // lock "billing:settlement", key "lock:{billing:settlement}"
			gocronlock.WithLockOptions(redislock.WithLogger(slog.New(slog.DiscardHandler))))
		if err != nil {
			fmt.Println(err)
			return
		}
		scheduler, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		defer scheduler.Shutdown()
		_, _ = scheduler.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func(ctx context.Context) {
				// A long job would watch its lock too:
				//   lockCtx, _ := locker.Context("settlement")
				ran <- podName
			}),
			gocron.WithName("settlement"), // the lock name: name your jobs
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				skipped <- err
			})),
		)
		scheduler.Start()
	}

	<-ran
	err := <-skipped
	fmt.Println("the job ran on one pod; the other skipped:", errors.Is(err, redislock.ErrNotAcquired))
	// Output:
	// the job ran on one pod; the other skipped: true
}

func ExampleNewElector() {
	// An in-memory Redis for the example; in production, your go-redis client.
	mini, _ := miniredis.Run()
	defer mini.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer rdb.Close()

	runs := make(chan string, 64)
	// Two pods, each with its own scheduler and elector for the same
	// election: only the leader's scheduler runs the jobs.
	for _, podName := range []string{"pod-1", "pod-2"} {
		elector, err := gocronlock.NewElector(rdb, "billing-scheduler",
			redislock.WithTTL(10*time.Second), // a dead leader is replaced within 10s
			redislock.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = elector.Start(context.Background())
		defer elector.Stop() // on shutdown: leadership goes to the other pod at once
		scheduler, _ := gocron.NewScheduler(gocron.WithDistributedElector(elector))
		defer scheduler.Shutdown()
		_, _ = scheduler.NewJob(gocron.DurationJob(10*time.Millisecond), gocron.NewTask(func() {
			select {
			case runs <- podName:
			default:
			}
		}))
		scheduler.Start()
	}

	leader := <-runs
	sameLeader := true
	for range 10 {
		sameLeader = sameLeader && <-runs == leader
	}
	fmt.Println("every run on the leader:", sameLeader)
	// Output:
	// every run on the leader: true
}
