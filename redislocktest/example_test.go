package redislocktest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/redislocktest"
)

// syncJob is the code under test: it copies batches under the lock
// "inventory-sync" until there are no more, and must stop as soon as its
// context is cancelled, which RunWithLock does when the lock is lost.
func syncJob(ctx context.Context, locker *redislock.Client, batches <-chan int, done chan<- int) error {
	return locker.RunWithLock(ctx, "inventory-sync", func(ctx context.Context) error {
		copied := 0
		defer func() { done <- copied }()
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case _, more := <-batches:
				if !more {
					return nil
				}
				copied++
			}
		}
	})
}

// exampleT stands in for the *testing.T of a real test, so that this
// example can print what the test checks. In your test, pass t.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// The body of a test of syncJob's "stop when the lock is lost" path: start
// the job, let it work, steal its lock, and check that it stopped and
// reported the loss.
func Example() {
	t := &exampleT{} // in a test: func TestSyncJobStopsWhenItsLockIsStolen(t *testing.T) {
	defer t.finish()

	env := redislocktest.New(t)
	batches, done := make(chan int), make(chan int, 1)
	result := make(chan error, 1)
	go func() { result <- syncJob(context.Background(), env.Client, batches, done) }()

	batches <- 1 // the job is working, under its lock
	batches <- 2
	env.Steal("inventory-sync") // another instance takes the lock

	err := <-result // the watchdog notices within DefaultExtendInterval
	fmt.Println("batches copied before stopping:", <-done)
	fmt.Println("error matches ErrLockLost:", errors.Is(err, redislock.ErrLockLost))
	var lost *redislock.LostError
	if errors.As(err, &lost) {
		fmt.Println("reason:", lost.Reason)
	}
	_, held := env.Holder("inventory-sync")
	fmt.Println("the new holder's lock is untouched:", held)
	// Output:
	// batches copied before stopping: 2
	// error matches ErrLockLost: true
	// reason: taken by another holder
	// the new holder's lock is untouched: true
}
