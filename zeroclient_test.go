package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
)

// A Client that did not come from New (a zero value, or a nil pointer)
// has no Redis client: every method says to use New, with
// ErrInvalidArgument, instead of panicking.
func TestAClientNotMadeByNewSaysToUseNew(t *testing.T) {
	ctx := context.Background()
	noop := func(context.Context) error { return nil }
	calls := map[string]func(c *redislock.Client) error{
		"Acquire": func(c *redislock.Client) error { _, err := c.Acquire(ctx, "a"); return err },
		"AcquireShared": func(c *redislock.Client) error {
			_, err := c.AcquireShared(ctx, "a")
			return err
		},
		"AcquireSemaphore": func(c *redislock.Client) error {
			_, err := c.AcquireSemaphore(ctx, "a", 2)
			return err
		},
		"AcquireMulti": func(c *redislock.Client) error {
			_, err := c.AcquireMulti(ctx, []string{"a", "b"})
			return err
		},
		"RunWithLock":       func(c *redislock.Client) error { return c.RunWithLock(ctx, "a", noop) },
		"RunWithSharedLock": func(c *redislock.Client) error { return c.RunWithSharedLock(ctx, "a", noop) },
		"RunWithSemaphore":  func(c *redislock.Client) error { return c.RunWithSemaphore(ctx, "a", 2, noop) },
		"RunWithLockMulti":  func(c *redislock.Client) error { return c.RunWithLockMulti(ctx, []string{"a"}, noop) },
		"Elect":             func(c *redislock.Client) error { return c.Elect(ctx, "a", noop) },
		"Inspect":           func(c *redislock.Client) error { _, err := c.Inspect(ctx, "a"); return err },
		"Break":             func(c *redislock.Client) error { _, err := c.Break(ctx, "a"); return err },
		"Close":             func(c *redislock.Client) error { return c.Close(ctx) },
		"List": func(c *redislock.Client) error {
			for _, err := range c.List(ctx, "a") {
				return err
			}
			return nil
		},
		"BreakHolder": func(c *redislock.Client) error {
			_, err := c.BreakHolder(ctx, "a", "0123456789abcdef")
			return err
		},
		"Leader": func(c *redislock.Client) error { _, _, err := c.Leader(ctx, "a"); return err },
		"ObserveLeader": func(c *redislock.Client) error {
			for range c.ObserveLeader(ctx, "a") {
				return errors.New("ObserveLeader yielded")
			}
			_, _, err := c.Leader(ctx, "a") // ObserveLeader logs this error and yields nothing
			return err
		},
	}

	t.Run("every exported method of Client is covered", func(t *testing.T) {
		var methods []string
		typ := reflect.TypeFor[*redislock.Client]()
		for i := range typ.NumMethod() {
			methods = append(methods, typ.Method(i).Name)
		}
		var covered []string
		for name := range calls {
			covered = append(covered, name)
		}
		slices.Sort(covered)
		require.Equal(t, methods, covered)
	})

	var zero redislock.Client
	for _, tc := range []struct {
		what   string
		client func() *redislock.Client
	}{
		{"var c redislock.Client", func() *redislock.Client { return &zero }},
		{"&redislock.Client{}", func() *redislock.Client { return &redislock.Client{} }},
		{"a nil *Client", func() *redislock.Client { return nil }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			for name, call := range calls {
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panicked: %v", p)
						}
					}()
					return call(tc.client())
				}()
				require.ErrorIs(t, err, redislock.ErrInvalidArgument, name)
				require.ErrorContains(t, err, "redislock.New", name)
				// Twice: a first call must not half-set the Client up.
				require.ErrorIs(t, call(tc.client()), redislock.ErrInvalidArgument, name)
			}
		})
	}
}
