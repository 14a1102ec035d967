//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock/internal/lockrules"
)

const statusUsage = `Usage: redislock status [flags] NAME

Shows whether the lock NAME is held, its remaining TTL, and its fence
counter (the last fencing token handed out; "none" before the first fenced
acquisition). It reads PREFIX{NAME} and PREFIX{NAME}:fence in one
transaction and never shows the holder's token. Exits 0 whether or not the
lock is held, 64 on a usage error, 69 when Redis fails.

Text output, one "field: value" per line:
  name:  NAME
  key:   lock:{NAME}
  held:  yes | no
  ttl:   1.5s | - (not held) | none (the key has no expiry)
  fence: 12 | none
With --json, one object: {"name","key","held","ttl_ms","fence"}, where ttl_ms
is null when not held and -1 when the key has no expiry, and fence is null
when there is no counter.

Flags:
`

// lockStatus is what status reports; its JSON form is part of the CLI's
// stable output.
type lockStatus struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// TTLMillis is the remaining lease in ms, nil when not held, -1 when the
	// key has no expiry.
	TTLMillis *int64 `json:"ttl_ms"`
	// Fence is the fence counter, nil when it does not exist.
	Fence *int64 `json:"fence"`
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	var (
		conn    redisFlags
		asJSON  bool
		timeout time.Duration
	)
	flags := flag.NewFlagSet("redislock status", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	conn.register(flags)
	flags.BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	flags.DurationVar(&timeout, "timeout", 5*time.Second, "give up on Redis after this `DURATION`")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, statusUsage+flagDefaults(flags))
			return 0
		}
		return usageError(stderr, "status: %s", doubleDash(err))
	}
	if flags.NArg() != 1 {
		return usageError(stderr, "status: want exactly one NAME (flags go before it), got %d arguments", flags.NArg())
	}
	if timeout <= 0 {
		return usageError(stderr, "status: --timeout %v must be positive", timeout)
	}
	name := flags.Arg(0)
	key, err := lockKey(conn.prefix, name)
	if err != nil {
		return usageError(stderr, "status: %v", err)
	}
	rdb, err := conn.connect()
	if err != nil {
		return usageError(stderr, "status: %v", err)
	}
	newLogger(stderr, false)
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := readStatus(ctx, rdb, name, key)
	if err != nil {
		fmt.Fprintf(stderr, "redislock: status of %q: %s\n", name, line(err))
		return exitUnavailable
	}
	if asJSON {
		out, _ := json.Marshal(st) // plain strings, bools and integers: cannot fail
		fmt.Fprintf(stdout, "%s\n", out)
		return 0
	}
	fmt.Fprint(stdout, st.text())
	return 0
}

// readStatus reads the lock key's TTL and its fence counter in one
// MULTI/EXEC, so both describe the same instant (they share a hash slot, so
// this works on Redis Cluster too).
func readStatus(ctx context.Context, rdb redis.UniversalClient, name, key string) (lockStatus, error) {
	var ttl *redis.DurationCmd
	var fence *redis.StringCmd
	var keyType, fenceType *redis.StatusCmd
	_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		keyType = pipe.Type(ctx, key)
		fenceType = pipe.Type(ctx, key+":fence")
		ttl = pipe.PTTL(ctx, key)
		fence = pipe.Get(ctx, lockrules.Fence(key))
		return nil
	})
	// A key of another type is someone else's data under our name, not a
	// lock: say so, rather than "held" (PTTL works on any type) or
	// WRONGTYPE (GET on the counter).
	if t := keyType.Val(); t != "" && t != "string" && t != "none" {
		return lockStatus{}, fmt.Errorf("%s holds a %s, not a lock", key, t)
	}
	if t := fenceType.Val(); t != "" && t != "string" && t != "none" {
		return lockStatus{}, fmt.Errorf("%s:fence holds a %s, not a fence counter", key, t)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return lockStatus{}, err
	}
	st := lockStatus{Name: name, Key: key}
	switch remaining := ttl.Val(); {
	case remaining == -2: // go-redis keeps Redis' -2 (no key) as a Duration
	case remaining < 0:
		st.Held, st.TTLMillis = true, ptr(int64(-1))
	default:
		st.Held, st.TTLMillis = true, ptr(remaining.Milliseconds())
	}
	if raw, err := fence.Result(); err == nil {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return lockStatus{}, fmt.Errorf("fence counter %s holds %q, not an integer", lockrules.Fence(key), raw)
		}
		st.Fence = &n
	} else if !errors.Is(err, redis.Nil) {
		return lockStatus{}, err
	}
	return st, nil
}

func ptr[T any](v T) *T { return &v }

// text formats st as aligned "field: value" lines.
func (st lockStatus) text() string {
	held, ttl, fence := "no", "-", "none"
	if st.Held {
		held = "yes"
		if *st.TTLMillis < 0 {
			ttl = "none (the key has no expiry)"
		} else {
			ttl = (time.Duration(*st.TTLMillis) * time.Millisecond).String()
		}
	}
	if st.Fence != nil {
		fence = strconv.FormatInt(*st.Fence, 10)
	}
	return fmt.Sprintf("name:  %s\nkey:   %s\nheld:  %s\nttl:   %s\nfence: %s\n", st.Name, st.Key, held, ttl, fence)
}
