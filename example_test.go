package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
)

// exampleRedis starts an in-memory Redis for the examples; in production,
// pass your own go-redis client. Its clock is frozen at 2026-12-04 00:00
// UTC, so that fences, which follow the server's clock (see
// Example_fencing), print the same in every run.
func exampleRedis() (*redis.Client, func()) {
	mini, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	mini.SetTime(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	return rdb, func() { _ = rdb.Close(); mini.Close() }
}

func ExampleClient_Acquire() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	lock, err := locker.Acquire(ctx, "token-refresh")
	if errors.Is(err, redislock.ErrNotAcquired) {
		fmt.Println("another instance is refreshing the token")
		return
	} else if err != nil {
		fmt.Println("redis error:", err)
		return
	}
	defer lock.Release(ctx)

	fmt.Println("holding", lock.Key())
	// Work under lock.Context(): it is cancelled if the lock is lost.
	fmt.Println("still ours:", lock.Context().Err() == nil)
	// Output:
	// holding lock:{token-refresh}
	// still ours: true
}

func ExampleClient_RunWithLock() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	podA := redislock.New(rdb, quiet)
	podB := redislock.New(rdb, quiet)

	name := "settlement:2026-12-02"
	err := podA.RunWithLock(ctx, name, func(ctx context.Context) error {
		fmt.Println("pod A: settling")
		// Meanwhile pod B's scheduler fires too; it skips.
		err := podB.RunWithLock(ctx, name, func(ctx context.Context) error {
			fmt.Println("pod B: settling")
			return nil
		})
		if errors.Is(err, redislock.ErrNotAcquired) {
			fmt.Println("pod B: skipped, another pod holds", name)
		}
		return nil
	})
	fmt.Println("pod A:", err)
	// Output:
	// pod A: settling
	// pod B: skipped, another pod holds settlement:2026-12-02
	// pod A: <nil>
}

// settlementTable stands for a SQL table whose writes carry the fence:
//
//	UPDATE settlement SET status = :status, fence = :fence
//	WHERE  settle_date = :date AND fence < :fence;
type settlementTable struct{ status, fence map[string]int64 }

func (t *settlementTable) update(date string, status, fence int64) (rowsAffected int) {
	if t.fence[date] >= fence {
		return 0 // a holder with a newer fence has written already
	}
	t.status[date], t.fence[date] = status, fence
	return 1
}

// A fence is the lock's counter, raised to the server's clock in
// microseconds when it is below: numbers about 1.8e15, strictly growing
// for each name even when the counter is lost (restart, eviction,
// FLUSHALL). Here the server's clock is frozen, so B's is A's plus one.
func Example_fencing() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithFencing(), redislock.WithWatchdog(false),
		redislock.WithLogger(slog.New(slog.DiscardHandler)))
	table := &settlementTable{status: map[string]int64{}, fence: map[string]int64{}}

	a, _ := locker.Acquire(ctx, "settlement:2026-12-02")
	fmt.Println("A holds fence", a.Fence())
	// A pauses (GC, frozen VM) past its TTL; the lease expires...
	rdb.Del(ctx, a.Key())
	// ...and B takes the lock with a higher fence and writes first.
	b, _ := locker.Acquire(ctx, "settlement:2026-12-02")
	fmt.Println("B holds fence", b.Fence(), "and writes:", table.update("2026-12-02", 2, b.Fence()), "row")
	// A wakes up unaware and writes with its old fence: no row matches.
	fmt.Println("A writes:", table.update("2026-12-02", 1, a.Fence()), "rows")
	_ = b.Release(ctx)
	// Output:
	// A holds fence 1796342400000000
	// B holds fence 1796342400000001 and writes: 1 row
	// A writes: 0 rows
}

func ExampleWithRetry() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	holder, _ := locker.Acquire(ctx, "order:42")
	time.AfterFunc(20*time.Millisecond, func() { _ = holder.Release(ctx) })

	// Wait up to 2s, retrying after 1ms, 2ms, 4ms... (jittered, at most
	// 50ms), and never longer than the holder's remaining TTL.
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lock, err := locker.Acquire(waitCtx, "order:42",
		redislock.WithRetry(redislock.ExponentialBackoff(time.Millisecond, 50*time.Millisecond)))
	if err != nil {
		fmt.Println("gave up:", err)
		return
	}
	fmt.Println("acquired order:42 after the holder released it")
	_ = lock.Release(ctx)
	// Output:
	// acquired order:42 after the holder released it
}

func ExampleLock_Context() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithExtendInterval(10*time.Millisecond),
		redislock.WithLogger(slog.New(slog.DiscardHandler)))

	lock, _ := locker.Acquire(ctx, "nightly-report")
	rdb.Del(ctx, lock.Key()) // an operator deletes the key, or it expired

	<-lock.Context().Done() // the watchdog notices at its next extension
	var lost *redislock.LostError
	if errors.As(context.Cause(lock.Context()), &lost) {
		fmt.Println("stop working:", lost.Reason)
	}
	fmt.Println(errors.Is(context.Cause(lock.Context()), redislock.ErrLockLost))
	// Output:
	// stop working: expired
	// true
}

// On SIGTERM, Close the Client: its locks are released at once, so the
// next pod takes over now instead of after the TTL, and work still running
// under a lock sees its context cancelled with ErrClosed.
func ExampleClient_Close() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	podA := redislock.New(rdb, quiet)
	podB := redislock.New(rdb, quiet)

	lock, _ := podA.Acquire(ctx, "leader")
	_, err := podB.Acquire(ctx, "leader")
	fmt.Println("pod B before:", errors.Is(err, redislock.ErrNotAcquired))

	// SIGTERM on pod A.
	shutdown, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println("pod A close:", podA.Close(shutdown))
	fmt.Println("pod A's work told:", errors.Is(context.Cause(lock.Context()), redislock.ErrClosed))
	_, err = podA.Acquire(ctx, "leader")
	fmt.Println("pod A after:", errors.Is(err, redislock.ErrClosed))

	next, err := podB.Acquire(ctx, "leader")
	fmt.Println("pod B after:", err)
	_ = next.Release(ctx)
	// Output:
	// pod B before: true
	// pod A close: <nil>
	// pod A's work told: true
	// pod A after: true
	// pod B after: <nil>
}

// Check Valid right before a write that cannot be undone: unlike
// Context().Err(), it reads the clock at the call, so a process that was
// paused past its lease knows it the instant it resumes.
func ExampleLock_Valid() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	err := locker.RunWithLock(ctx, "charge:order-42", func(ctx context.Context) error {
		lock, _ := redislock.LockFromContext(ctx)
		if !lock.Valid() {
			return errors.New("lease may have run out: not charging")
		}
		fmt.Println("charging order 42 under", lock.Name())
		return nil
	})
	fmt.Println(err)
	// Output:
	// charging order 42 under charge:order-42
	// <nil>
}

func ExampleClient_Inspect() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	worker := redislock.New(rdb, quiet, redislock.WithMetadata("host=worker-7 pid=4242"))
	lock, err := worker.Acquire(ctx, "reindex", redislock.WithFencing(), redislock.WithTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)

	// Anyone, anywhere: no lock needed, nothing changed, one round trip.
	info, err := redislock.New(rdb, quiet).Inspect(ctx, "reindex")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", info.Held)
	fmt.Println("by:", info.Metadata)
	fmt.Println("lease left:", info.TTL)
	fmt.Println("last fence:", info.Fence == lock.Fence())
	fmt.Println("waiting:", info.Waiters)
	// Output:
	// held: true
	// by: host=worker-7 pid=4242
	// lease left: 1m0s
	// last fence: true
	// waiting: 0
}

func ExampleClient_Break() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	stuck, err := redislock.New(rdb, quiet).Acquire(ctx, "reindex", redislock.WithMetadata("host=worker-7"))
	if err != nil {
		fmt.Println(err)
		return
	}

	// An operator, sure that the holder is stuck:
	info, err := redislock.New(rdb, quiet).Break(ctx, "reindex")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("broke the lock held by", info.Metadata)

	// The holder is told at its next extension; asked now, Redis says so.
	fmt.Println("holder's release:", stuck.Release(ctx))
	// Output:
	// broke the lock held by host=worker-7
	// holder's release: redislock: lock not held: "reindex": expired
}

// Every pod campaigns for leadership from start to shutdown; one leads at a
// time. When the leader shuts down (its ctx ends, or Client.Close), it
// gives leadership up at once and the next pod leads; when it dies, the
// next leads once its lease runs out.
func ExampleClient_Elect() {
	rdb, stop := exampleRedis()
	defer stop()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))

	terms := make(chan string)
	campaign := func(ctx context.Context, pod string, done chan<- error) {
		locker := redislock.New(rdb, quiet, redislock.WithTTL(10*time.Second), redislock.WithFencing())
		done <- locker.Elect(ctx, "report-scheduler", func(ctx context.Context) error {
			// Runs while this pod leads; ctx ends when it stops leading.
			fence, _ := redislock.FenceFromContext(ctx)
			terms <- fmt.Sprintf("%s leads, fence %d", pod, fence)
			<-ctx.Done()
			return ctx.Err()
		})
	}

	podA, shutdownA := context.WithCancel(context.Background())
	podB, shutdownB := context.WithCancel(context.Background())
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go campaign(podA, "pod-a", doneA)
	fmt.Println(<-terms)
	go campaign(podB, "pod-b", doneB) // waits: pod-a leads

	shutdownA() // SIGTERM on pod-a: it gives leadership up
	fmt.Println("pod-a:", <-doneA)
	fmt.Println(<-terms) // pod-b took over, with a higher fence
	shutdownB()
	fmt.Println("pod-b stopped:", errors.Is(<-doneB, context.Canceled))
	// Output:
	// pod-a leads, fence 1796342400000000
	// pod-a: redislock: elect "report-scheduler": context canceled
	// pod-b leads, fence 1796342400000001
	// pod-b stopped: true
}

func ExampleClient_AcquireSemaphore() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	// At most 2 exports run at once, across every process that uses the
	// name with this limit.
	first, _ := locker.AcquireSemaphore(ctx, "exports", 2)
	second, _ := locker.AcquireSemaphore(ctx, "exports", 2)
	_, err := locker.AcquireSemaphore(ctx, "exports", 2)
	fmt.Println("third while two run:", errors.Is(err, redislock.ErrNotAcquired))
	_, err = locker.AcquireSemaphore(ctx, "exports", 3)
	fmt.Println("another limit:", errors.Is(err, redislock.ErrLimitMismatch))

	_ = first.Release(ctx)
	third, err := locker.AcquireSemaphore(ctx, "exports", 2)
	fmt.Println("third after a release:", err == nil)
	// Each holder works under its own lock's context, cancelled if its
	// slot is lost.
	fmt.Println("second still ours:", second.Context().Err() == nil)
	_ = second.Release(ctx)
	_ = third.Release(ctx)
	// Output:
	// third while two run: true
	// another limit: true
	// third after a release: true
	// second still ours: true
}

func ExampleClient_RunWithSemaphore() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	// An export runs in one of 2 slots; the slot is given back when the
	// function returns, and the function's context ends if it is lost.
	export := func(ctx context.Context) error {
		slot, _ := redislock.LockFromContext(ctx)
		fmt.Println("exporting in a slot of", slot.Name())
		// The other slot is free: a second export runs beside this one.
		err := locker.RunWithSemaphore(ctx, "exports", 2, func(context.Context) error { return nil })
		fmt.Println("a second export runs beside it:", err == nil)
		return nil
	}
	err := locker.RunWithSemaphore(ctx, "exports", 2, export)
	fmt.Println("done:", err)
	// Output:
	// exporting in a slot of exports
	// a second export runs beside it: true
	// done: <nil>
}

func ExampleClient_AcquireShared() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	// Any number of readers of the price list at once...
	first, _ := locker.AcquireShared(ctx, "price-list")
	second, _ := locker.AcquireShared(ctx, "price-list")
	info, _ := locker.Inspect(ctx, "price-list")
	fmt.Println("shared holders:", info.Shared)
	// ...and no writer while they read.
	_, err := locker.Acquire(ctx, "price-list")
	fmt.Println("writer while they read:", errors.Is(err, redislock.ErrNotAcquired))

	_ = first.Release(ctx)
	_ = second.Release(ctx)
	writer, err := locker.Acquire(ctx, "price-list")
	fmt.Println("writer once they left:", err == nil)
	_, err = locker.AcquireShared(ctx, "price-list")
	fmt.Println("reader while it writes:", errors.Is(err, redislock.ErrNotAcquired))
	_ = writer.Release(ctx)
	// Output:
	// shared holders: 2
	// writer while they read: true
	// writer once they left: true
	// reader while it writes: true
}

func ExampleClient_AcquireMulti() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	// A transfer holds both accounts, or neither.
	other, _ := locker.Acquire(ctx, "account:2")
	_, err := locker.AcquireMulti(ctx, []string{"account:1", "account:2"})
	fmt.Println("while account:2 is held:", errors.Is(err, redislock.ErrNotAcquired))
	inspect, _ := locker.Inspect(ctx, "account:1")
	fmt.Println("account:1 left held:", inspect.Held)
	_ = other.Release(ctx)

	transfer, err := locker.AcquireMulti(ctx, []string{"account:1", "account:2"}, redislock.WithFencing())
	if err != nil {
		fmt.Println(err)
		return
	}
	from, _ := transfer.FenceOf("account:1")
	to, _ := transfer.FenceOf("account:2")
	fmt.Println("a fence per account:", from > 0 && to > 0)
	// One context for the whole set, cancelled if any name is lost.
	fmt.Println("held:", transfer.Context().Err() == nil)
	_ = transfer.Release(ctx)
	// Output:
	// while account:2 is held: true
	// account:1 left held: false
	// a fence per account: true
	// held: true
}

func ExampleClient_List() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))

	report, _ := locker.Acquire(ctx, "report:daily", redislock.WithMetadata("host=web-1"))
	upload, _ := locker.AcquireSemaphore(ctx, "uploads", 3, redislock.WithMetadata("host=web-2"))

	// Every lock whose name starts with "report:", of every kind; the
	// prefix is literal, and the scan stops when the loop breaks.
	for info, err := range locker.List(ctx, "report:") {
		if err != nil {
			fmt.Println(err)
			break
		}
		holder := info.Holders[0]
		fmt.Println(info.Name, info.Kind, holder.Metadata, "holder ID is 16 hex digits:", len(holder.ID) == 16)
	}
	var names []string
	for info, err := range locker.List(ctx, "") {
		if err == nil {
			names = append(names, info.Name)
		}
	}
	slices.Sort(names) // List yields in no order
	fmt.Println(names)
	_ = report.Release(ctx)
	_ = upload.Release(ctx)
	// Output:
	// report:daily lock host=web-1 holder ID is 16 hex digits: true
	// [report:daily uploads]
}

// Three calls to a partner API may be in flight at once; one of them hangs.
// An operator ends that one hold only: the others keep their slots, and the
// freed one goes to the next caller.
func ExampleClient_BreakHolder() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locker := redislock.New(rdb, redislock.WithLogger(slog.New(slog.DiscardHandler)))
	var calls []*redislock.Lock
	for _, job := range []string{"job=1", "job=2", "job=3"} {
		call, err := locker.AcquireSemaphore(ctx, "partner-api", 3, redislock.WithMetadata(job))
		if err != nil {
			fmt.Println(err)
			return
		}
		calls = append(calls, call)
	}

	// The stuck hold's ID, as Inspect (HolderInfo.ID) and "redislock
	// status" show it: here, the call with job=2.
	var stuck string
	held, _ := locker.Inspect(ctx, "partner-api")
	for _, h := range held.Holders {
		if h.Metadata == "job=2" {
			stuck = h.ID
		}
	}
	before, err := locker.BreakHolder(ctx, "partner-api", stuck)
	if err != nil {
		fmt.Println(err)
		return
	}
	after, _ := locker.Inspect(ctx, "partner-api")
	fmt.Printf("slots held: %d, then %d\n", before.Count, after.Count)
	// The stuck call is told at its next extension; asked now, Redis says so.
	fmt.Println("stuck call's release:", errors.Is(calls[1].Release(ctx), redislock.ErrNotHeld))
	_, err = locker.AcquireSemaphore(ctx, "partner-api", 3)
	fmt.Println("a new call gets the freed slot:", err == nil)
	_, err = locker.BreakHolder(ctx, "partner-api", stuck)
	fmt.Println("again:", errors.Is(err, redislock.ErrNotHeld))
	// Output:
	// slots held: 3, then 2
	// stuck call's release: true
	// a new call gets the freed slot: true
	// again: true
}

func ExampleClient_ObserveLeader() {
	rdb, stop := exampleRedis()
	defer stop()
	quiet := redislock.WithLogger(slog.New(slog.DiscardHandler))
	ctx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()

	// A pod running the outbox relay while it leads, until shut down.
	pod := func(name string) (shutdown func()) {
		locker := redislock.New(rdb, quiet, redislock.WithMetadata(name))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = locker.Elect(ctx, "outbox-relay", func(ctx context.Context) error {
				<-ctx.Done() // relays messages until leadership ends
				return ctx.Err()
			})
		}()
		return func() { cancel(); <-done }
	}

	// A dashboard, on a Client of its own, follows the election.
	dashboard := redislock.New(rdb, quiet)
	var shutdown func()
	step := 0
	for leader := range dashboard.ObserveLeader(ctx, "outbox-relay") {
		if leader == (redislock.HolderInfo{}) {
			fmt.Println("nobody leads")
		} else {
			fmt.Println(leader.Metadata, "leads")
		}
		switch step++; step {
		case 1:
			shutdown = pod("pod-a")
		case 2:
			shutdown() // pod-a gives leadership up, nobody is in line
		case 3:
			shutdown = pod("pod-b")
		default:
			shutdown()
			stopObserving() // or break: the loop ends either way
		}
	}
	// Output:
	// nobody leads
	// pod-a leads
	// nobody leads
	// pod-b leads
}
