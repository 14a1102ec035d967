//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/examples/internal/podproc"
)

// frozenMark is in the line a pod prints just before it stops itself; the
// runner waits for it.
const frozenMark = "FROZEN"

// podMain is one pod: it runs the nightly settlement under the lock, as
// every pod's scheduler does at 00:05, and returns the exit code.
func podMain(name string) int {
	tl, ttl, err := podproc.PodSetup(envStart, envTTL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	date := os.Getenv(envDate)

	db, err := podproc.OpenDB(os.Getenv(envDB))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer db.Close()
	opts, err := redisOptions(os.Getenv(envRedis)) // checked by the runner
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithTTL(ttl), redislock.WithFencing(),
		redislock.WithLogger(slog.New(logHandler{tl, name})))
	lockName := "settlement:" + date

	// settle is the job: it fences the row in, works, and marks the day
	// done under its fence. The pod that wins the first round freezes
	// before its final write.
	settle := func(ctx context.Context, freeze bool) error {
		fence, _ := redislock.FenceFromContext(ctx)
		tl.Say(name, "acquired %s with fence %d", lockName, fence)
		res, err := db.ExecContext(ctx, fenceInSQL, fence, date, fence)
		if err != nil {
			return err
		}
		if rows, err := res.RowsAffected(); err != nil {
			return err
		} else if rows == 0 {
			var by string
			var doneFence int64
			if err := db.QueryRowContext(ctx, `SELECT settled_by, fence FROM settlement WHERE settle_date = ?`, date).Scan(&by, &doneFence); err != nil {
				return err
			}
			tl.Say(name, "already settled by %s with fence %d (fence in: 0 rows updated): nothing to do", by, doneFence)
			return nil
		}
		tl.Say(name, "fenced the row in (1 row updated), settling")
		time.Sleep(100 * time.Millisecond) // the settlement work itself
		if freeze {
			tl.Say(name, "%s before writing: SIGSTOP stops every thread, its watchdog's too, as a long GC pause or a frozen VM would", frozenMark)
			if err := podproc.Freeze(); err != nil {
				return err
			}
			tl.Say(name, "woke up (SIGCONT): it was past its last look at the lock, so it writes with fence %d", fence)
		}
		// Not ctx: this write stands for one already under way when the
		// pause hit. Only the database can refuse it now.
		res, err = db.Exec(settleSQL, name, date, fence)
		if err != nil {
			return err
		}
		if rows, err := res.RowsAffected(); err != nil {
			return err
		} else if rows == 0 {
			tl.Say(name, "write REJECTED by the database: a newer fence than %d has fenced the row in (0 rows updated)", fence)
			return nil
		}
		tl.Say(name, "wrote status=done with fence %d (1 row updated)", fence)
		return nil
	}

	// The scheduler fires: one attempt, as a scheduled job should (skip if
	// another pod has it).
	err = locker.RunWithLock(context.Background(), lockName, func(ctx context.Context) error {
		return settle(ctx, true)
	})
	if errors.Is(err, redislock.ErrNotAcquired) {
		// This demo's pods then wait their turn, to show the takeover.
		tl.Say(name, "skipped: another pod holds %s; waiting for it (up to %v)", lockName, 10*ttl)
		ctx, cancel := context.WithTimeout(context.Background(), 10*ttl)
		defer cancel()
		err = locker.RunWithLock(ctx, lockName, func(ctx context.Context) error {
			return settle(ctx, false)
		}, redislock.WithRetry(redislock.LinearBackoff(200*time.Millisecond)))
	}
	var lost *redislock.LostError
	switch {
	case errors.As(err, &lost):
		tl.Say(name, "RunWithLock: the lock was lost during the job: %v", lost)
		tl.Say(name, "(%s)", whyLost(lost))
	case err != nil:
		tl.Say(name, "error: %v", err)
		return 1
	}

	// Graceful shutdown: Close releases whatever the pod still holds at
	// once (the next pod takes over without waiting for the TTL; see
	// ExampleClient_Close for the hand-over) and stops the watchdog.
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := locker.Close(shutdown); err != nil {
		tl.Say(name, "close: %v", err)
		return 1
	}
	return 0
}

// whyLost says what a loss means for the frozen pod. Which reason it gets
// is a race on waking: its watchdog's first extension finds the key gone
// (Expired), or its safe-deadline timer, already past, fires first
// (Unreachable, with the pause its timers saw).
func whyLost(lost *redislock.LostError) string {
	switch lost.Reason {
	case redislock.Expired:
		return "its first extension after waking found the key gone: the lease ran out while it was frozen"
	case redislock.Unreachable:
		if lost.Paused > 0 {
			return "its safe deadline passed while it was frozen: its timers fired " + lost.Paused.Round(10*time.Millisecond).String() + " late, so it knows it did not run, and does not blame Redis"
		}
		return "its safe deadline passed while it was frozen; Redis was up, but a pause too short to tell from an outage is reported as one"
	case redislock.Taken:
		return "another pod held the key when it woke"
	}
	return "see the log"
}

// logHandler puts the library's Warn and Error logs on the timeline.
type logHandler struct {
	tl  *podproc.Timeline
	pod string
}

func (h logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h logHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h logHandler) WithGroup(string) slog.Handler                { return h }
func (h logHandler) Handle(_ context.Context, r slog.Record) error {
	var attrs []string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" || a.Key == "name" {
			attrs = append(attrs, a.Key+"="+a.Value.String())
		}
		return true
	})
	h.tl.Say(h.pod, "[log %s] %s %s", r.Level, r.Message, strings.Join(attrs, " "))
	return nil
}
