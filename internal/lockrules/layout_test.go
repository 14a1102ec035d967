package lockrules_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
)

func TestLayout(t *testing.T) {
	key, err := lockrules.Lock("lock:", "job")
	if err != nil || key != "lock:{job}" {
		t.Fatalf("Lock = %q, %v", key, err)
	}
	names, n, err := lockrules.WithExpiry("lock:", "job")
	if err != nil || names[:n] != key || names[:n+2] != lockrules.Queue(key) || names != lockrules.Expiry(key) {
		t.Fatalf("WithExpiry = %q, %d, %v", names, n, err)
	}
	names2, shared, n2, err := lockrules.WithShared("lock:", "job")
	if err != nil || names2 != names || n2 != n || shared != lockrules.Shared(key) {
		t.Fatalf("WithShared = %q, %q, %d, %v", names2, shared, n2, err)
	}
	if _, _, _, err := lockrules.WithShared("a{}", "job"); err == nil {
		t.Fatal("WithShared accepted an empty hash tag")
	}
	if lockrules.Fence(key) != "lock:{job}:fence" || lockrules.Released(key) != "lock:{job}:released" {
		t.Fatal("suffixes")
	}
	if _, err := lockrules.Lock("lock:", ""); !errors.Is(err, lockrules.ErrEmptyName) {
		t.Fatalf("empty name: %v", err)
	}
	for _, bad := range [][2]string{{"lock:", "}x"}, {"a{}", "job"}} {
		if _, err := lockrules.Lock(bad[0], bad[1]); err == nil {
			t.Fatalf("prefix %q name %q accepted", bad[0], bad[1])
		}
	}
	// A name with braces of its own: the tag is up to the first '}'.
	if tag := lockrules.HashTag("lock:{a}b}"); tag != "a" {
		t.Fatalf("HashTag = %q", tag)
	}
}

func TestSlotIsRedisClusterKeyslot(t *testing.T) {
	// CLUSTER KEYSLOT's answers for these keys.
	for key, slot := range map[string]int{"foo": 12182, "bar": 5061, "123456789": 12739, "lock:{foo}": 12182, "lock:{foo}:fence": 12182} {
		if got := lockrules.Slot(key); got != slot {
			t.Errorf("Slot(%q) = %d, want %d", key, got, slot)
		}
	}
}

func TestTTLOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{0, "is below the 10ms minimum"},
		{-time.Second, "is below the 10ms minimum"},
		{9 * time.Millisecond, "is below the 10ms minimum"},
		{lockrules.MinTTL, ""},
		{30 * time.Second, ""},
		{lockrules.MaxTTL, ""},
		{lockrules.MaxTTL + time.Nanosecond, "is above the 24h maximum"},
		{math.MaxInt64, "is above the 24h maximum"},
	} {
		if got := lockrules.TTLOutOfRange(tc.ttl); got != tc.want {
			t.Errorf("TTLOutOfRange(%v) = %q, want %q", tc.ttl, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "24h", 90 * time.Minute: "1h30m", time.Minute: "1m", 90 * time.Second: "1m30s",
		30 * time.Second: "30s", 10 * time.Millisecond: "10ms", 0: "0s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := lockrules.Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestNameIsLocksInverse(t *testing.T) {
	for _, prefix := range []string{"lock:", "", "a{b"} {
		for _, name := range []string{"job", "a}b", "x}:fence", "*?[]\\", "{", "é"} {
			key, err := lockrules.Lock(prefix, name)
			if err != nil {
				continue // a name Lock refuses has no key to find
			}
			if got, ok := lockrules.Name(prefix, key); !ok || got != name {
				t.Errorf("Name(%q, %q) = %q, %v; want %q", prefix, key, got, ok, name)
			}
			// Every other key of the lock is no lock's key.
			for _, other := range []string{lockrules.Fence(key), lockrules.Queue(key), lockrules.Expiry(key),
				lockrules.Left(key, "0123456789abcdef"), lockrules.Shared(key), key + lockrules.LimitSuffix, lockrules.Released(key)} {
				if got, ok := lockrules.Name(prefix, other); ok {
					t.Errorf("Name(%q, %q) = %q, true: not a lock key", prefix, other, got)
				}
			}
		}
	}
	for _, key := range []string{"lock:job", "lock:{}", "other:{job}", "lock:{}x}"} {
		if got, ok := lockrules.Name("lock:", key); ok {
			t.Errorf("Name(lock:, %q) = %q, true", key, got)
		}
	}
}
