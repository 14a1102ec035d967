package redislock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// requireBroken waits for l's next extension (every 100 ms, see
// heldUntilBroken) to find it lost, for reason: 10 s is a hundred
// extension intervals, beyond any stall of a loaded machine.
func requireBroken(t *testing.T, l *redislock.Lock, reason redislock.LostReason) *redislock.LostError {
	t.Helper()
	waitDone(t, l.Context(), 10*time.Second)
	return requireLost(t, l.Context(), reason)
}

// heldUntilBroken are a holder's options here: it finds a break at its next
// extension, every 100 ms; its long TTL cannot run out first, however long
// a stall.
func heldUntilBroken(metadata string) []redislock.Option {
	return []redislock.Option{redislock.WithTTL(time.Minute), redislock.WithExtendInterval(100 * time.Millisecond), redislock.WithMetadata(metadata)}
}

// BreakHolder ends one hold, of every kind, as its own release would: the
// others keep theirs, the next waiter gets what it freed, and the broken
// holder's Lock is lost at its next extension.
func TestBreakHolder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := &logRecorder{}
		operator := redislock.New(b.rdb, redislock.WithLogger(slogTo(rec)))
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// wait starts acquire on a Client of its own that waits, and
		// returns once it is in line (one round trip: 10 s only bounds a
		// hang on a loaded machine).
		wait := func(name string, acquire func(c *redislock.Client) (*redislock.Lock, error)) chan *redislock.Lock {
			got := make(chan *redislock.Lock, 1)
			go func() {
				l, _ := acquire(redislock.New(b.rdb, quiet, redislock.WithRetry(redislock.LinearBackoff(20*time.Millisecond))))
				got <- l
			}()
			eventually(t, 10*time.Second, func() bool {
				info, err := operator.Inspect(ctx, name)
				return err == nil && info.Waiters == 1
			}, "the waiter to queue on %s", name)
			return got
		}
		requireHeld := func(l *redislock.Lock) {
			t.Helper()
			require.NoError(t, l.Extend(ctx, time.Minute), l.Metadata())
		}

		t.Run("a semaphore: one slot, handed to the next waiter", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			var held []*redislock.Lock
			for i := range 3 {
				l, err := c.AcquireSemaphore(ctx, "pool", 3, heldUntilBroken(fmt.Sprintf("slot-%d", i))...)
				require.NoError(t, err)
				held = append(held, l)
			}
			next := wait("pool", func(c *redislock.Client) (*redislock.Lock, error) {
				return c.AcquireSemaphore(waitCtx, "pool", 3, redislock.WithMetadata("next"))
			})
			info, err := operator.BreakHolder(ctx, "pool", redislock.HolderID(held[1]))
			require.NoError(t, err)
			require.Equal(t, "semaphore", info.Kind)
			require.Equal(t, 3, info.Count, "what it held before")
			require.Equal(t, 1, info.Waiters)
			got := <-next
			require.NotNil(t, got, "the waiter got the freed slot")
			requireBroken(t, held[1], redislock.Expired)
			requireHeld(held[0])
			requireHeld(held[2])
			now, err := operator.Inspect(ctx, "pool")
			require.NoError(t, err)
			require.Equal(t, 3, now.Count)
			line, ok := rec.find(slog.LevelWarn, "redislock: holder broken")
			require.True(t, ok)
			require.Contains(t, line, "holder="+redislock.HolderID(held[1]))
			require.NotContains(t, line, held[1].Token())
			for _, l := range append(held, got) {
				_ = l.Release(ctx)
			}
		})

		t.Run("shared holders: one share; the last one's lock goes to the writer", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			first, err := c.AcquireShared(ctx, "doc", heldUntilBroken("reader-1")...)
			require.NoError(t, err)
			second, err := c.AcquireShared(ctx, "doc", heldUntilBroken("reader-2")...)
			require.NoError(t, err)
			writer := wait("doc", func(c *redislock.Client) (*redislock.Lock, error) { return c.Acquire(waitCtx, "doc") })
			info, err := operator.BreakHolder(ctx, "doc", redislock.HolderID(first))
			require.NoError(t, err)
			require.Equal(t, "shared", info.Kind)
			require.Equal(t, 2, info.Count)
			requireBroken(t, first, redislock.Expired)
			requireHeld(second)
			now, err := operator.Inspect(ctx, "doc")
			require.NoError(t, err)
			require.Equal(t, 1, now.Shared)
			require.Equal(t, 1, now.Waiters, "the writer still waits")

			_, err = operator.BreakHolder(ctx, "doc", redislock.HolderID(second))
			require.NoError(t, err)
			got := <-writer
			require.NotNil(t, got, "the writer got the lock")
			requireBroken(t, second, redislock.Taken)
			require.NoError(t, got.Release(ctx))
		})

		t.Run("an exclusive lock: handed to the next waiter; the holder learns Taken", func(t *testing.T) {
			held, err := redislock.New(b.rdb, quiet).Acquire(ctx, "job", heldUntilBroken("stuck")...)
			require.NoError(t, err)
			next := wait("job", func(c *redislock.Client) (*redislock.Lock, error) {
				return c.Acquire(waitCtx, "job", redislock.WithMetadata("next"))
			})
			info, err := operator.BreakHolder(ctx, "job", redislock.HolderID(held))
			require.NoError(t, err)
			require.Equal(t, "stuck", info.Metadata)
			got := <-next
			require.NotNil(t, got)
			requireBroken(t, held, redislock.Taken)
			require.NoError(t, got.Release(ctx))
		})

		t.Run("an election: the leader's term ends, the next campaigner leads", func(t *testing.T) {
			campaign, stop := context.WithCancel(ctx)
			defer stop()
			terms := make(chan *redislock.Lock, 8) // never full: a term more than the test reads
			ended := make(chan error, 8)
			lead := func(ctx context.Context) error {
				l, _ := redislock.LockFromContext(ctx)
				terms <- l
				<-ctx.Done()
				ended <- context.Cause(ctx)
				return nil
			}
			done := make(chan error, 2)
			for _, pod := range []string{"pod-1", "pod-2"} {
				go func() {
					done <- redislock.New(b.rdb, quiet).Elect(campaign, "relay", lead, heldUntilBroken(pod)...)
				}()
			}
			leader := <-terms
			// The other pod's campaign queues in one round trip.
			eventually(t, 10*time.Second, func() bool {
				info, err := operator.Inspect(ctx, "relay")
				return err == nil && info.Waiters == 1
			}, "the other campaigner to queue")
			info, err := operator.BreakHolder(ctx, "relay", redislock.HolderID(leader))
			require.NoError(t, err)
			require.Equal(t, leader.Metadata(), info.Metadata)
			next := <-terms
			require.NotEqual(t, leader.Metadata(), next.Metadata(), "the other pod leads")
			var lost *redislock.LostError
			require.ErrorAs(t, <-ended, &lost, "the old leader's term was lost")
			require.Equal(t, redislock.Taken, lost.Reason)
			stop()
			for range 2 {
				<-done
			}
		})

		t.Run("a multi lock: that name only; its Lock is lost", func(t *testing.T) {
			held, err := redislock.New(b.rdb, quiet).AcquireMulti(ctx, []string{"from", "to"}, heldUntilBroken("transfer")...)
			require.NoError(t, err)
			_, err = operator.BreakHolder(ctx, "from", redislock.HolderID(held))
			require.NoError(t, err)
			free, err := operator.Inspect(ctx, "from")
			require.NoError(t, err)
			require.False(t, free.Held)
			require.Equal(t, "from", requireBroken(t, held, redislock.Expired).Name)
			_ = held.Release(ctx) // lets go of "to"
		})

		t.Run("a semaphore whose limit key is gone: the slot is freed, the others kept", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			kept, err := c.AcquireSemaphore(ctx, "nolimit", 2, heldUntilBroken("kept")...)
			require.NoError(t, err)
			stuck, err := c.AcquireSemaphore(ctx, "nolimit", 2, heldUntilBroken("stuck")...)
			require.NoError(t, err)
			require.NoError(t, b.rdb.Del(ctx, "lock:{nolimit}:limit").Err())
			_, err = operator.BreakHolder(ctx, "nolimit", redislock.HolderID(stuck))
			require.NoError(t, err)
			requireBroken(t, stuck, redislock.Expired)
			requireHeld(kept)
			require.NoError(t, kept.Release(ctx))
		})

		t.Run("an unknown ID is an error that says so; nothing changes", func(t *testing.T) {
			c := redislock.New(b.rdb, quiet)
			slot, err := c.AcquireSemaphore(ctx, "pool2", 2, heldUntilBroken("kept")...)
			require.NoError(t, err)
			other, err := c.Acquire(ctx, "elsewhere", heldUntilBroken("elsewhere")...)
			require.NoError(t, err)
			for name, id := range map[string]string{"pool2": redislock.HolderID(other), "free": redislock.HolderID(other), "elsewhere": "0123456789abcdef"} {
				_, err = operator.BreakHolder(ctx, name, id)
				require.ErrorIs(t, err, redislock.ErrNotHeld, name)
				require.ErrorContains(t, err, id)
			}
			requireHeld(slot)
			requireHeld(other)

			// A slot whose lease ended (its score, a server time, has
			// passed) is no running hold: its release tidies it away.
			ended, err := c.AcquireSemaphore(ctx, "pool2", 2, redislock.WithWatchdog(false))
			require.NoError(t, err)
			member := b.rdb.ZRange(ctx, "lock:{pool2}", 0, -1).Val()
			require.Len(t, member, 2)
			for _, m := range member {
				if strings.HasPrefix(m, ended.Token()) {
					require.NoError(t, b.rdb.ZAddXX(ctx, "lock:{pool2}", redis.Z{Score: 1, Member: m}).Err())
				}
			}
			_, err = operator.BreakHolder(ctx, "pool2", redislock.HolderID(ended))
			require.ErrorIs(t, err, redislock.ErrNotHeld)
			require.Equal(t, int64(1), b.rdb.ZCard(ctx, "lock:{pool2}").Val(), "tidied away; the other slot kept")
			requireHeld(slot)
			require.NoError(t, slot.Release(ctx))
			require.NoError(t, other.Release(ctx))
		})
	})
}

func TestBreakHolderRejectsBadInput(t *testing.T) {
	c := redislock.New(newMini(t), quiet)
	ctx := context.Background()
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err := c.BreakHolder(nil, "job", "0123456789abcdef") //nolint:staticcheck
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
	for _, name := range []string{"", "}job"} {
		_, err = c.BreakHolder(ctx, name, "0123456789abcdef")
		require.ErrorIs(t, err, redislock.ErrInvalidArgument, name)
	}
	for _, id := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg", strings.Repeat(" ", 16)} {
		_, err = c.BreakHolder(ctx, "job", id)
		require.ErrorIs(t, err, redislock.ErrInvalidArgument, id)
	}
	_, err = redislock.New(nil).BreakHolder(ctx, "job", "0123456789abcdef")
	require.ErrorIs(t, err, redislock.ErrInvalidArgument)
}

// On a quorum Client, BreakHolder ends the hold on every node that has it,
// and an ID no node has is ErrNotHeld.
func TestQuorumBreakHolder(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := "miniredis"
		if real {
			name = "redis-server"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var nodes []*redis.Client
			if real {
				nodes = startQuorumServers(t, 3).nodes
			} else {
				for range 3 {
					nodes = append(nodes, newMini(t))
				}
			}
			c := newQuorum(t, []redis.UniversalClient{nodes[0], nodes[1], nodes[2]})
			l, err := c.Acquire(ctx, "q", heldUntilBroken("host=q1")...)
			require.NoError(t, err)
			_, err = c.BreakHolder(ctx, "q", "0123456789abcdef")
			require.ErrorIs(t, err, redislock.ErrNotHeld)
			require.NoError(t, nodes[2].Del(ctx, l.Key()).Err()) // one node lost it already

			info, err := c.BreakHolder(ctx, "q", redislock.HolderID(l))
			require.NoError(t, err)
			require.True(t, info.Held)
			require.Equal(t, "host=q1", info.Metadata)
			require.Len(t, info.Nodes, 3)
			for i, n := range nodes {
				require.Zero(t, n.Exists(ctx, l.Key()).Val(), "node %d", i)
			}
			requireBroken(t, l, redislock.Expired)
		})
	}
}
