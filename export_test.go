package redislock

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock/internal/lockrules"
)

// DisableRestartWatch turns the restart watch off for Clients set up from
// now on, until the returned function turns it back on: the fence trials
// measure the two-holder windows with and without it.
func DisableRestartWatch() (restore func()) {
	restartWatchOff.Store(true)
	return func() { restartWatchOff.Store(false) }
}

// SetLeaveWait sets the least a waiter that gives up waits for its place
// to be given back before it returns (leaveWait), until restore: a test that
// checks the order (given back, then returned) lifts the bound (the link's
// usual round trip), which a loaded machine can reach. Not for parallel tests.
func SetLeaveWait(d time.Duration) (restore func()) {
	old := leaveWait
	leaveWait = d
	return func() { leaveWait = old }
}

// SetQueueRefresh sets how often a queued waiter that nothing wakes comes
// back (queueRefresh), until restore: a test that proves a waiter is woken
// puts it out of reach. Not for parallel tests.
func SetQueueRefresh(d time.Duration) (restore func()) {
	old := queueRefresh
	queueRefresh = d
	return func() { queueRefresh = old }
}

// GiveBackShared runs the shared release script for token as a shared
// waiter that gives up does (see janitor): what its Client would send.
func GiveBackShared(ctx context.Context, rdb redis.UniversalClient, key, token string) error {
	keys := []string{key, lockrules.Queue(key), lockrules.Expiry(key), lockrules.Shared(key)}
	return sharedReleaseScript.Run(ctx, rdb, keys, token, "PUBLISH 1000", "1").Err()
}

// Script returns the SHA1 and the source of the script lua/name.lua as the
// library sends it: with the functions it starts with (see scripts.go).
func Script(name string) (sha, source string) {
	file := lua(name)
	for sha, source := range scriptSources {
		if strings.HasSuffix(source, file) {
			return sha, source
		}
	}
	panic("redislock: no script ends with lua/" + name + ".lua")
}

// ScriptHashes returns the SHA1 of every script the library sends.
func ScriptHashes() []string { return slices.Collect(maps.Keys(scriptSources)) }

// ScriptCalls is a go-redis hook that counts the calls of one of the
// library's scripts, lone or pipelined, once answered (see scriptCount).
type ScriptCalls = scriptCount

// CountAcquireScript returns a hook counting the acquire script's calls:
// a waiter's attempts, and its claims.
func CountAcquireScript() *ScriptCalls { return &scriptCount{sha: acquireSHA.(string)} }

// JanitorPending returns how many give-backs c's janitor has yet to finish
// (one more while a round runs): 0 once it is idle.
func JanitorPending(c *Client) int { return c.cleaner.pending() }

func (j *janitor) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.items.Len()
	if j.busy {
		n++
	}
	return n
}

// HolderID is the ID of l's hold (HolderInfo.ID, see holderID), for the
// tests of Client.BreakHolder.
func HolderID(l *Lock) string { return holderID(l.h.token()) }
