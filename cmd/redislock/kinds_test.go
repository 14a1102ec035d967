//go:build unix

package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// status and break describe every kind of lock: a semaphore (its limit,
// each holder's metadata and lease left) and a lock held shared (how many
// readers, each one's metadata and lease left), in text and in JSON.
func TestStatusAndBreakOfEveryKind(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	rdb := srv.Client(t)
	environ := serverEnv(srv, dir)
	ctx := context.Background()

	t.Run("a semaphore: text, JSON, and break", func(t *testing.T) {
		var runs []*cliProc
		for _, host := range []string{"web-1", "web-2"} {
			runs = append(runs, startCLI(t, environ, "run", "uploads", "--limit", "3", "--metadata", "host="+host, "--ttl", "5s", "--", "sh", "-c", untilStopped))
		}
		eventually(t, "both copies to start", func() bool {
			data, _ := os.ReadFile(filepath.Join(dir, "started"))
			return strings.Count(string(data), "\n") == 2
		})

		code, stdout, stderr := runCLI(t, environ, "status", "uploads")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, regexp.MustCompile(`^name:     uploads\nkey:      lock:\{uploads\}\nheld:     yes, a semaphore: 2 of 3 slots\nttl:      \S+\n`+
			`holder:   [0-9a-f]{16} host=web-\d \(lease \S+\)\nholder:   [0-9a-f]{16} host=web-\d \(lease \S+\)\nfence:    none\nwaiters:  0\n$`), stdout)
		require.Contains(t, stdout, "host=web-1")
		require.Contains(t, stdout, "host=web-2")

		code, stdout, stderr = runCLI(t, environ, "status", "uploads", "--json")
		require.Equal(t, 0, code, stderr)
		var st struct {
			Held     bool    `json:"held"`
			Kind     *string `json:"kind"`
			Count    int     `json:"count"`
			Limit    *int    `json:"limit"`
			Metadata *string `json:"metadata"`
			TTL      *int64  `json:"ttl_ms"`
			Holders  []struct {
				Metadata string `json:"metadata"`
				TTL      int64  `json:"ttl_ms"`
				ID       string `json:"id"`
			} `json:"holders"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
		require.True(t, st.Held)
		require.Equal(t, "semaphore", *st.Kind)
		require.Equal(t, 2, st.Count)
		require.Equal(t, 3, *st.Limit)
		require.Nil(t, st.Metadata, "each holder has its own")
		require.Positive(t, *st.TTL)
		require.Len(t, st.Holders, 2)
		for _, h := range st.Holders {
			require.Regexp(t, `^host=web-\d$`, h.Metadata)
			require.Regexp(t, `^[0-9a-f]{16}$`, h.ID)
			require.Positive(t, h.TTL)
			require.LessOrEqual(t, h.TTL, int64(5000))
		}

		code, stdout, stderr = runCLIWithInput(t, environ, "", "break", "uploads", "--yes")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, "held:     yes, a semaphore: 2 of 3 slots\n")
		require.Contains(t, stdout, `broke "uploads": its 2 holders (of 3 slots) lost their slots`)
		require.Contains(t, stderr, "kind=semaphore holders=2")
		for _, p := range runs {
			require.Equal(t, exitLost, p.wait(t), p.Stderr(t))
		}
		require.NoError(t, os.Remove(filepath.Join(dir, "started")))
	})

	t.Run("a lock held shared: text, JSON, and break", func(t *testing.T) {
		c := quietLocker(rdb)
		var readers []*redislock.Lock
		for i := range 3 {
			l, err := c.AcquireShared(ctx, "prices", redislock.WithTTL(time.Duration(30+10*i)*time.Second), redislock.WithWatchdog(false), redislock.WithMetadata(fmt.Sprintf("reader=%d", i)))
			require.NoError(t, err)
			readers = append(readers, l)
		}
		none, err := c.AcquireShared(ctx, "prices", redislock.WithTTL(2*time.Minute), redislock.WithWatchdog(false))
		require.NoError(t, err)
		readers = append(readers, none)

		code, stdout, stderr := runCLI(t, environ, "status", "prices")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, regexp.MustCompile(`^name:     prices\nkey:      lock:\{prices\}\nheld:     yes, shared by 4 holders\nttl:      \S+\n`+
			`holder:   `+idOf(readers[0])+` reader=0 \(lease \S+\)\nholder:   `+idOf(readers[1])+` reader=1 \(lease \S+\)\nholder:   `+idOf(readers[2])+` reader=2 \(lease \S+\)\nholder:   `+idOf(readers[3])+` no metadata \(lease \S+\)\nfence:    none\nwaiters:  0\n$`), stdout)

		code, stdout, stderr = runCLI(t, environ, "status", "--json", "prices")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^\{"name":"prices","key":"lock:\{prices\}","held":true,"ttl_ms":\d+,"metadata":null,"fence":null,"waiters":0,"kind":"shared","count":4,"limit":null,"holders":\[\{"metadata":"reader=0","ttl_ms":\d+,"id":"`+idOf(readers[0])+`"\},\{"metadata":"reader=1","ttl_ms":\d+,"id":"[0-9a-f]{16}"\},\{"metadata":"reader=2","ttl_ms":\d+,"id":"[0-9a-f]{16}"\},\{"metadata":"","ttl_ms":\d+,"id":"[0-9a-f]{16}"\}\],"queue":\[\]\}\n$`, stdout)

		code, stdout, stderr = runCLIWithInput(t, environ, "", "break", "--yes", "prices")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, `broke "prices": its 4 shared holders lost their shares`)
		for _, l := range readers {
			require.ErrorIs(t, l.Release(ctx), redislock.ErrNotHeld)
		}
	})

	t.Run("an exclusive lock: its kind, and its holder, in JSON", func(t *testing.T) {
		l := holdLock(t, rdb, "report", redislock.WithMetadata("host=a"))
		code, stdout, stderr := runCLI(t, environ, "status", "report", "--json")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^\{"name":"report","key":"lock:\{report\}","held":true,"ttl_ms":\d+,"metadata":"host=a","fence":null,"waiters":0,"kind":"lock","count":1,"limit":null,"holders":\[\{"metadata":"host=a","ttl_ms":\d+,"id":"`+idOf(l)+`"\}\],"queue":\[\]\}\n$`, stdout)
		code, stdout, stderr = runCLI(t, environ, "status", "free", "--json")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, `{"name":"free","key":"lock:{free}","held":false,"ttl_ms":null,"metadata":null,"fence":null,"waiters":0,"kind":null,"count":0,"limit":null,"holders":null,"queue":[]}`+"\n", stdout)
	})
}

// A key that is not a lock of the kind asked for (someone else's data, or
// a lock of another kind under the name) exits 65 (EX_DATAERR), not 69,
// the code for a Redis that cannot be reached, and says what holds it.
func TestAKeyThatIsNotALockExits65(t *testing.T) {
	t.Parallel()
	srv, dir := redistest.Start(t), t.TempDir()
	rdb := srv.Client(t)
	environ := serverEnv(srv, dir)
	ctx := context.Background()
	require.NoError(t, rdb.HSet(ctx, "lock:{profile}", "field", "value").Err())
	sem, err := quietLocker(rdb).AcquireSemaphore(ctx, "pool", 4)
	require.NoError(t, err)
	defer sem.Release(ctx)
	holdLock(t, rdb, "exclusive")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "profile"}, "lock:{profile} holds a hash, not a lock"},
		{[]string{"break", "--yes", "profile"}, "lock:{profile} holds a hash, not a lock"},
		{[]string{"run", "profile", "--", "true"}, "lock:{profile} holds a hash, not a lock"},
		{[]string{"run", "pool", "--", "true"}, `"pool" is a semaphore of 4 slots: use --limit 4`},
		{[]string{"run", "--limit", "2", "exclusive", "--", "true"}, `"exclusive" is held as an exclusive lock, not a semaphore: run it without --limit`},
	} {
		code, stdout, stderr := runCLI(t, environ, tc.args...)
		require.Equal(t, exitNotALock, code, "%q: %s", tc.args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tc.want, tc.args)
		require.NotContains(t, stderr, "fail-open", "--fail-open cannot help: Redis answered")
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	}
	require.True(t, keyExists(t, rdb, "lock:{profile}"), "left alone")
}

// idOf is the ID the library gives l's hold (HolderInfo.ID), computed here
// on its own: 16 hex digits of SHA1("holder:" + token).
func idOf(l *redislock.Lock) string {
	sum := sha1.Sum([]byte("holder:" + l.Token()))
	return hex.EncodeToString(sum[:8])
}
