package lockrules_test

import (
	"errors"
	"testing"

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
