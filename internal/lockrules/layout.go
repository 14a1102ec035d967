// Package lockrules holds the rules that the core, the redislock command
// and the redislocktest kit must agree on, in one place so that they cannot
// drift apart: the key layout (this file) and the rule that decides when
// Redis counts as unreachable, for fail open (failopen.go).
//
// For the lock called name under prefix:
//
//	prefix{name}            the lock: the holder's token, with the lease as
//	                        TTL; with holder metadata, the token, then
//	                        MetadataSeparator, then the metadata
//	prefix{name}:fence      the fence counter (WithFencing); no expiry
//	prefix{name}:q          the waiters' queue, by arrival (a sorted set)
//	prefix{name}:qx         when each waiter's place lapses (a sorted set)
//	prefix{name}:left:T     a waiter that left while a command of its may
//	                        still be on its way, T its ticket (16 hex digits
//	                        of its token's SHA1): a late command takes nothing
//	prefix{name}:released   the channel a release is announced on
//	prefix{name}:released:T a hand-over to a waiter of the Client tagged T
//	prefix{name}:leader     the channel Elect announces each term's start
//	                        and end on, for Client.ObserveLeader
//	prefix{name}:limit      a semaphore's limit (its key is then a sorted
//	                        set of holders' tokens scored by lease end)
//	prefix{name}:s          a lock's shared holders (AcquireShared), tokens
//	                        scored by lease end; the lock key then holds
//	                        the marker "*shared*" (see lua/shared_acquire.lua)
//
// The name sits inside braces so that it is the keys' Redis Cluster hash
// tag: all of them land in one slot, which the scripts need.
package lockrules

import (
	"errors"
	"fmt"
	"strings"
)

// The suffixes after the lock key.
const (
	FenceSuffix    = ":fence"
	QueueSuffix    = ":q"
	ExpirySuffix   = ":qx"
	ReleasedSuffix = ":released"
	LimitSuffix    = ":limit"
	SharedSuffix   = ":s"
	LeftSuffix     = ":left:"
	LeaderSuffix   = ":leader"
)

// MetadataSeparator comes between the token and the holder's metadata in
// the lock key's value. It is neither in a token (base32) nor allowed in
// metadata (a control character), so the value splits one way only.
const MetadataSeparator = "\x1f"

// SharedMarker begins the lock key's value while the lock is held shared.
const SharedMarker = "*shared*"

// ErrEmptyName is the error of an empty lock name.
var ErrEmptyName = errors.New("empty lock name")

// Lock returns the key of the lock called name, or an error for the
// names the library refuses: the empty name, and a name (or prefix) that
// leaves the key's hash tag empty, which would make Redis Cluster hash the
// whole key and scatter the lock's keys over slots. The tag ends at the
// first '}' after the first '{', so the names that break it start with '}'
// or come after a prefix holding "{}".
func Lock(prefix, name string) (string, error) {
	names, keyLen, err := WithExpiry(prefix, name)
	if err != nil {
		return "", err
	}
	return names[:keyLen], nil
}

// WithExpiry is Lock with the queue's keys after the lock key in one
// string, "prefix{name}:qx" (one allocation): the lock key is its first
// keyLen bytes, the queue its first keyLen+2.
func WithExpiry(prefix, name string) (names string, keyLen int, err error) {
	return keys(prefix, name, false)
}

// WithShared is WithExpiry and the shared holders' set, "prefix{name}:s",
// from the same allocation.
func WithShared(prefix, name string) (names, shared string, keyLen int, err error) {
	all, keyLen, err := keys(prefix, name, true)
	if err != nil {
		return "", "", 0, err
	}
	n := keyLen + len(ExpirySuffix)
	return all[:n], all[n:], keyLen, nil
}

// keys is WithExpiry's string, followed by the shared holders' set's key
// when shared is set.
func keys(prefix, name string, shared bool) (all string, keyLen int, err error) {
	if name == "" {
		return "", 0, ErrEmptyName
	}
	var p, open, n, close, s string
	if shared {
		p, open, n, close, s = prefix, "{", name, "}", SharedSuffix
	}
	all = prefix + "{" + name + "}" + ExpirySuffix + p + open + n + close + s
	key := all[:len(prefix)+len(name)+2]
	if err := refused(prefix, name, key); err != nil {
		return "", 0, err
	}
	return all, len(key), nil
}

// refused is the error of the lock key key of name under prefix, one that
// leaves its hash tag empty; nil for a key the library takes.
func refused(prefix, name, key string) error {
	if HashTag(key) == "" {
		return fmt.Errorf("lock name %q with prefix %q leaves the key %q an empty hash tag, so its keys could land in different cluster slots; avoid a '}' at the start of the name and \"{}\" in the prefix", name, prefix, key)
	}
	return nil
}

// AllWithExpiry is WithExpiry of each of names, from one
// allocation for them all: it calls each with a name's place in names,
// its string and its keyLen, in order, until a name is refused: then it
// returns that name's place and WithExpiry's error.
func AllWithExpiry(prefix string, names []string, each func(i int, names string, keyLen int)) (int, error) {
	size := 0
	for _, name := range names {
		size += len(prefix) + len(name) + len("{}") + len(ExpirySuffix)
	}
	var b strings.Builder
	b.Grow(size)
	for _, name := range names {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(name)
		b.WriteByte('}')
		b.WriteString(ExpirySuffix)
	}
	all, start := b.String(), 0
	for i, name := range names {
		keyLen := len(prefix) + len(name) + 2
		if name == "" {
			return i, ErrEmptyName
		}
		if err := refused(prefix, name, all[start:start+keyLen]); err != nil {
			return i, err
		}
		end := start + keyLen + len(ExpirySuffix)
		each(i, all[start:end], keyLen)
		start = end
	}
	return 0, nil
}

// Name is Lock's inverse: the name of the lock whose key under prefix is
// key, and false for every other key (a fence counter, a queue and each
// other key above: all end in a suffix, and no suffix ends in '}'; a key
// under another prefix; a name Lock refuses).
func Name(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	name, ok2 := strings.CutSuffix(rest, "}")
	if !ok || !ok2 {
		return "", false
	}
	if lock, err := Lock(prefix, name); err != nil || lock != key {
		return "", false
	}
	return name, true
}

// Fence returns the fence counter's key of the lock key.
func Fence(lockKey string) string { return lockKey + FenceSuffix }

// Queue returns the waiters' queue of the lock key.
func Queue(lockKey string) string { return lockKey + QueueSuffix }

// Expiry returns the queue's expiries of the lock key.
func Expiry(lockKey string) string { return lockKey + ExpirySuffix }

// Left returns the mark of the waiter with ticket that left the lock key's queue.
func Left(lockKey, ticket string) string { return lockKey + LeftSuffix + ticket }

// Shared returns the shared holders' set of the lock key.
func Shared(lockKey string) string { return lockKey + SharedSuffix }

// Released returns the release channel of the lock key.
func Released(lockKey string) string { return lockKey + ReleasedSuffix }

// Leader returns the channel of the terms of the election at the lock key.
func Leader(lockKey string) string { return lockKey + LeaderSuffix }

// HashTag returns the part of key that Redis Cluster hashes when it has a
// non-empty {tag}, or "" when it has none.
func HashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					return key[i+1 : j]
				}
			}
			return ""
		}
	}
	return ""
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) int {
	if tag := HashTag(key); tag != "" {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
