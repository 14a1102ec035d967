//go:build unix

package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/examples/internal/podproc"
)

// podMain is one pod: it adds 1 to the counter under the lock, with the
// check its environment names, and returns the exit code.
func podMain(name string) int {
	tl, ttl, err := podproc.PodSetup(envStart, envTTL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	c, ok := checks[os.Getenv(envCheck)]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: %s: unknown check %q\n", name, envCheck, os.Getenv(envCheck))
		return 2
	}
	opts, err := redis.ParseURL(os.Getenv(envRedis))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, envRedis, err)
		return 2
	}
	db, err := podproc.OpenDB(os.Getenv(envDB))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer db.Close()
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithTTL(ttl), redislock.WithFencing(),
		redislock.WithLogger(slog.New(slog.DiscardHandler))) // the loss is reported below
	p := pod{name: name, tl: tl, db: db, check: c, pause: os.Getenv(envPause)}

	// Wait for the lock as long as a frozen holder's lease can last.
	ctx, cancel := context.WithTimeout(context.Background(), 10*ttl)
	defer cancel()
	err = locker.RunWithLock(ctx, lockName, func(ctx context.Context) error {
		fence, _ := redislock.FenceFromContext(ctx)
		tl.Say(name, "acquired %s with fence %d", lockName, fence)
		return p.increment(fence)
	}, redislock.WithRetry(redislock.LinearBackoff(50*time.Millisecond)))
	var lost *redislock.LostError
	switch {
	case errors.As(err, &lost):
		tl.Say(name, "RunWithLock: the lock was lost during the increment: %s", lost.Reason)
	case err != nil:
		tl.Say(name, "error: %v", err)
		return 1
	}
	if err := locker.Close(context.Background()); err != nil {
		tl.Say(name, "close: %v", err)
		return 1
	}
	return 0
}

type pod struct {
	name  string
	tl    *podproc.Timeline
	db    *sql.DB
	check check
	pause string
}

// increment adds 1 to the counter: fence in (if the check does), read,
// pause where the scenario says, write. The statements do not take the
// lock's context: they stand for work already under way when a pause hits,
// which only the database can refuse.
func (p pod) increment(fence int64) error {
	if p.check.fenceIn != "" {
		res, err := p.db.Exec(p.check.fenceIn, named(p.check.fenceIn, fence, 0)...)
		if err != nil {
			return err
		}
		if rows, err := res.RowsAffected(); err != nil {
			return err
		} else if rows != 1 {
			p.tl.Say(p.name, "fence in REJECTED: a newer holder has fenced the row in (0 rows updated): stop")
			return nil
		}
		p.tl.Say(p.name, "fenced the row in with fence %d (1 row updated)", fence)
	}
	var value int64
	err := p.db.QueryRow(p.check.read, named(p.check.read, fence, 0)...).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		p.tl.Say(p.name, "read nothing: the row is fenced by a newer holder: stop")
		return nil
	} else if err != nil {
		return err
	}
	p.tl.Say(p.name, "read value=%d", value)

	switch p.pause {
	case pauseFreeze:
		p.tl.Say(p.name, "%s before writing value=%d: SIGSTOP stops every thread, its watchdog's too, past its lease", frozenMark, value+1)
		if err := podproc.Freeze(); err != nil {
			return err
		}
		p.tl.Say(p.name, "woke up (SIGCONT): it writes value=%d, computed before the freeze", value+1)
	case pauseGate:
		p.tl.Say(p.name, "%s: its write waits for the runner, so that pod-1 wakes in between", workingMark)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the runner: %w", err)
		}
	}

	// The write and its entry in the log of accepted increments commit
	// together, or not at all.
	tx, err := p.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.Exec(p.check.write, named(p.check.write, fence, value+1)...)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil {
		return err
	} else if rows != 1 {
		p.tl.Say(p.name, "write REJECTED by the database: the row carries a newer fence than %d (0 rows updated)", fence)
		return nil
	}
	if _, err := tx.Exec(`INSERT INTO increments (pod, fence, value) VALUES (?, ?, ?)`, p.name, fence, value+1); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	p.tl.Say(p.name, "wrote value=%d with fence %d (1 row updated)", value+1, fence)
	return nil
}
