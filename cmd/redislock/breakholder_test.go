//go:build unix

package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// holderIDOf is l's hold's ID as the library documents it (HolderInfo.ID):
// 16 hex digits of SHA1("holder:" + token).
func holderIDOf(l *redislock.Lock) string {
	sum := sha1.Sum([]byte("holder:" + l.Token()))
	return hex.EncodeToString(sum[:8])
}

// break --holder ends one hold; a whole semaphore or shared lock is broken
// only with --yes, after saying what that risks; status lists the waiters.
func TestBreakOneHolderAndTheWholeOnlyWithYes(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	rdb := srv.Client(t)
	environ := serverEnv(srv, dir)
	ctx := context.Background()
	c := quietLocker(rdb)
	hold := []redislock.Option{redislock.WithTTL(time.Minute), redislock.WithWatchdog(false)}
	slots := func(name string, n int) []*redislock.Lock {
		var held []*redislock.Lock
		for i := range n {
			l, err := c.AcquireSemaphore(ctx, name, 3, append(hold, redislock.WithMetadata(fmt.Sprintf("slot=%d", i)))...)
			require.NoError(t, err)
			held = append(held, l)
		}
		return held
	}

	t.Run("a whole semaphore: the risk said, nothing broken without --yes, and no question", func(t *testing.T) {
		held := slots("uploads", 2)
		code, stdout, stderr := runCLIWithInput(t, environ, "y\n", "break", "uploads")
		require.Equal(t, exitDeclined, code, stderr)
		require.Contains(t, stdout, "held:     yes, a semaphore: 2 of 3 slots\n")
		require.Contains(t, stderr, `breaking "uploads" ends all 2 slots at once, but each keeps working until its next extension: meanwhile up to 2 more than its limit may work`)
		require.Contains(t, stderr, `"uploads" not broken (--yes breaks it)`)
		require.NotContains(t, stderr, "[y/N]")
		for _, l := range held {
			require.NoError(t, l.Extend(ctx, time.Minute), "still held")
		}
		code, stdout, stderr = runCLIWithInput(t, environ, "", "break", "uploads", "--yes")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stderr, "ends all 2 slots at once")
		require.Contains(t, stdout, `broke "uploads": its 2 holders (of 3 slots) lost their slots`)
		for _, l := range held {
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		}
	})

	t.Run("a whole shared lock: the same", func(t *testing.T) {
		l, err := c.AcquireShared(ctx, "prices", hold...)
		require.NoError(t, err)
		code, _, stderr := runCLIWithInput(t, environ, "y\n", "break", "prices")
		require.Equal(t, exitDeclined, code, stderr)
		require.Contains(t, stderr, `breaking "prices" ends all 1 share at once, but each keeps working until its next extension: meanwhile a writer may work while they still read`)
		require.NoError(t, l.Release(ctx), "still held")
	})

	t.Run("--holder: that slot only, after asking", func(t *testing.T) {
		held := slots("pool", 3)
		id := holderIDOf(held[1])
		code, _, stderr := runCLIWithInput(t, environ, "n\n", "break", "pool", "--holder", id)
		require.Equal(t, exitDeclined, code, stderr)
		require.Contains(t, stderr, fmt.Sprintf(`Break holder %s of "pool"? Its holder keeps running until its next extension. [y/N]`, id))
		require.NoError(t, held[1].Extend(ctx, time.Minute), "not broken")

		code, stdout, stderr := runCLIWithInput(t, environ, "y\n", "break", "pool", "--holder", id)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf(`broke holder %s of "pool" (semaphore, 3 holders)`, id))
		require.Contains(t, stderr, `msg="redislock: holder broken" name=pool holder=`+id)
		require.NotContains(t, stdout+stderr, held[1].Token())
		require.ErrorIs(t, held[1].Release(ctx), redislock.ErrNotHeld)
		require.NoError(t, held[0].Release(ctx))
		require.NoError(t, held[2].Release(ctx))
	})

	t.Run("--holder: an exclusive lock, with --yes", func(t *testing.T) {
		l := holdLock(t, rdb, "report", redislock.WithMetadata("host=a"))
		code, stdout, stderr := runCLIWithInput(t, environ, "", "break", "--yes", "--holder", holderIDOf(l), "report")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "(lock, 1 holder)")
		require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
	})

	t.Run("--holder: an ID no hold has, or no ID at all", func(t *testing.T) {
		l := holdLock(t, rdb, "kept")
		code, _, stderr := runCLIWithInput(t, environ, "", "break", "kept", "--yes", "--holder", "0123456789abcdef")
		require.Equal(t, exitDeclined, code, stderr)
		require.Contains(t, stderr, `no running hold of "kept" has the ID 0123456789abcdef`)
		for _, bad := range []string{"xyz", "0123456789ABCDEF", strings.Repeat("a", 17)} {
			code, _, stderr = runCLIWithInput(t, environ, "", "break", "kept", "--yes", "--holder", bad)
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, stderr, "is no holder ID")
		}
		require.NoError(t, l.Extend(ctx, time.Minute), "not broken")
	})

	t.Run("status lists every waiter, with its metadata and wait", func(t *testing.T) {
		holdLock(t, rdb, "busy")
		waitCtx, cancel := context.WithTimeout(ctx, testTimeout)
		defer cancel()
		waiting := make(chan error, 2)
		for i, metadata := range []string{"w=first", ""} {
			go func() {
				_, err := quietLocker(rdb).Acquire(waitCtx, "busy", redislock.WithMetadata(metadata), redislock.WithRetry(redislock.LinearBackoff(50*time.Millisecond)))
				waiting <- err
			}()
			eventually(t, "the waiter in the queue", func() bool {
				_, stdout, _ := runCLI(t, environ, "status", "busy")
				return strings.Contains(stdout, fmt.Sprintf("waiters:  %d\n", i+1))
			})
		}
		code, stdout, stderr := runCLI(t, environ, "status", "busy")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `waiters:  2\nwaiter:   w=first \(waited \S+\)\nwaiter:   no metadata \(waited \S+\)\n$`, stdout)
		code, stdout, stderr = runCLI(t, environ, "status", "--json", "busy")
		require.Equal(t, 0, code, stderr)
		var st struct {
			Queue []struct {
				Metadata string `json:"metadata"`
				Waited   *int64 `json:"waited_ms"`
			} `json:"queue"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
		require.Len(t, st.Queue, 2)
		require.Equal(t, "w=first", st.Queue[0].Metadata)
		require.Empty(t, st.Queue[1].Metadata)
		require.GreaterOrEqual(t, *st.Queue[0].Waited, *st.Queue[1].Waited, "the first came first")
		cancel()
		for range 2 {
			require.ErrorIs(t, <-waiting, context.Canceled)
		}
	})
}
