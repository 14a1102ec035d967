// Command settlement runs the daily-settlement scenario from the redislock
// README: three pods race for the lock "settlement:<date>"; one settles and
// two skip; then the winner is frozen past its TTL (a GC or VM pause),
// another pod takes over with a higher fencing token and settles, and the
// frozen pod's late write is rejected by a SQLite table that checks the
// fence.
//
// By default it runs on an embedded in-memory Redis; -redis host:port uses a
// real server.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/redislock/redislock"
)

func main() {
	redisAddr := flag.String("redis", "", "host:port of a Redis server (default: an embedded in-memory Redis)")
	ttl := flag.Duration("ttl", 2*time.Second, "lock TTL (the watchdog extends every TTL/3)")
	date := flag.String("date", time.Now().Format("2006-01-02"), "the settlement date")
	flag.Parse()
	if err := run(os.Stdout, *redisAddr, *ttl, *date); err != nil {
		fmt.Fprintln(os.Stderr, "settlement:", err)
		os.Exit(1)
	}
}

// timeline prints numbered, timestamped lines; safe for concurrent use.
type timeline struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (t *timeline) say(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%6.2fs  %-7s %s\n", time.Since(t.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// logHandler puts the library's Warn and Error logs on the timeline.
type logHandler struct {
	tl  *timeline
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
	h.tl.say(h.pod, "[log %s] %s %s", r.Level, r.Message, strings.Join(attrs, " "))
	return nil
}

// freezer pauses one pod's Redis traffic, as a stop-the-world pause would:
// while frozen, every command of that pod (its watchdog's too) waits.
type freezer struct {
	mu   sync.Mutex
	gate chan struct{} // nil when not frozen
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *freezer) wait() {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (f *freezer) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.wait()
		return next(ctx, network, addr)
	}
}

func (f *freezer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.wait()
		return next(ctx, cmd)
	}
}

func (f *freezer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f.wait()
		return next(ctx, cmds)
	}
}

type pod struct {
	name   string
	rdb    *redis.Client
	locker *redislock.Client
	frozen freezer
}

func run(out io.Writer, redisAddr string, ttl time.Duration, date string) error {
	tl := &timeline{out: out, start: time.Now()}
	if redisAddr == "" {
		mini := miniredis.NewMiniRedis()
		if err := mini.Start(); err != nil {
			return err
		}
		defer mini.Close()
		mini.ClockTTL(true) // keys age with real time, as on a server
		redisAddr = mini.Addr()
		tl.say("setup", "embedded Redis at %s (use -redis host:port for a real one)", redisAddr)
	} else {
		tl.say("setup", "Redis at %s", redisAddr)
	}

	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database, shared by every pod
	if _, err := db.Exec(`CREATE TABLE settlement (
		settle_date TEXT PRIMARY KEY,
		status      TEXT NOT NULL,
		settled_by  TEXT,
		fence       INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	if _, err := db.Exec(`INSERT INTO settlement (settle_date, status) VALUES (?, 'pending')`, date); err != nil {
		return err
	}
	tl.say("setup", "table settlement: %s pending, fence 0; lock TTL %v, extended every %v", date, ttl, ttl/3)

	pods := make([]*pod, 3)
	for i := range pods {
		p := &pod{name: fmt.Sprintf("pod-%d", i+1)}
		p.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
		p.rdb.AddHook(&p.frozen)
		defer p.rdb.Close()
		p.locker = redislock.New(p.rdb, redislock.WithTTL(ttl), redislock.WithFencing(),
			redislock.WithLogger(slog.New(logHandler{tl, p.name})))
		pods[i] = p
	}

	lockName := "settlement:" + date
	takeoverWrote := make(chan struct{})
	var takeoverOnce sync.Once
	var firstWinner sync.Once
	winners := make(chan *pod, 1)

	// settle is the job: idempotent by status, and every write carries the fence.
	settle := func(ctx context.Context, p *pod, pauseHere bool) error {
		fence, _ := redislock.FenceFromContext(ctx)
		tl.say(p.name, "acquired %s with fence %d, settling", lockName, fence)
		var status string
		var doneFence int64
		if err := db.QueryRowContext(ctx, `SELECT status, fence FROM settlement WHERE settle_date = ?`, date).Scan(&status, &doneFence); err != nil {
			return err
		}
		if status == "done" {
			tl.say(p.name, "already settled (fence %d): nothing to do", doneFence)
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the settlement work itself
		if pauseHere {
			tl.say(p.name, "FROZEN before writing (a long GC pause / frozen VM): no code runs, no extensions")
			p.frozen.freeze()
			select { // the worst case: frozen until another pod has taken over and written
			case <-takeoverWrote:
			case <-time.After(10 * ttl):
			}
			p.frozen.thaw()
			tl.say(p.name, "wakes up and writes its result with fence %d (its lock context was cancelled, but a real pause would have frozen that signal too)", fence)
		}
		res, err := db.Exec(`UPDATE settlement SET status = 'done', settled_by = ?, fence = ?
			WHERE settle_date = ? AND fence < ?`, p.name, fence, date, fence)
		if err != nil {
			return err
		}
		rows, _ := res.RowsAffected()
		if rows == 0 {
			tl.say(p.name, "write REJECTED: a holder with a newer fence has written (0 rows updated)")
			return nil
		}
		tl.say(p.name, "wrote status=done with fence %d (1 row updated)", fence)
		if !pauseHere {
			takeoverOnce.Do(func() { close(takeoverWrote) })
		}
		return nil
	}

	// Round 1: the scheduler fires on all three pods at once.
	tl.say("cron", "00:05 - the scheduler fires on all three pods")
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() {
			<-ready
			err := p.locker.RunWithLock(context.Background(), lockName, func(ctx context.Context) error {
				first := false
				firstWinner.Do(func() { first = true; winners <- p })
				return settle(ctx, p, first)
			})
			switch {
			case errors.Is(err, redislock.ErrNotAcquired):
				tl.say(p.name, "skipped: another pod holds %s", lockName)
			case errors.Is(err, redislock.ErrLockLost):
				var lost *redislock.LostError
				errors.As(err, &lost)
				tl.say(p.name, "RunWithLock reports the lock was lost during the job: %s", lost.Reason)
			case err != nil:
				tl.say(p.name, "error: %v", err)
			}
		})
	}
	close(ready)

	// Round 2: the pods that skipped retry on their next tick; one of them
	// takes over once the frozen pod's lease has expired.
	winner := <-winners
	for _, p := range pods {
		if p == winner {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*ttl)
			defer cancel()
			err := p.locker.RunWithLock(ctx, lockName, func(ctx context.Context) error {
				return settle(ctx, p, false)
			}, redislock.WithRetry(redislock.LinearBackoff(200*time.Millisecond)))
			if err != nil {
				tl.say(p.name, "retry failed: %v", err)
			}
		})
	}
	tl.say("cron", "the skipped pods retry every 200ms (up to %v)", 10*ttl)
	wg.Wait()

	var status, by string
	var fence int64
	if err := db.QueryRow(`SELECT status, settled_by, fence FROM settlement WHERE settle_date = ?`, date).Scan(&status, &by, &fence); err != nil {
		return err
	}
	tl.say("result", "settlement %s: status=%s by %s with fence %d; the frozen pod's stale write was rejected", date, status, by, fence)
	return nil
}
