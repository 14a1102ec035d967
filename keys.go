package redislock

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redislock/redislock/internal/lockrules"
)

// Key names come from internal/lockrules, their one owner.

// lockKeys returns the lock's key and its queue's, "prefix{name}:qx", in one
// string (the key is its first keyLen bytes), or an invalid-argument error.
func lockKeys(prefix, name string) (names string, keyLen int, err error) {
	names, keyLen, err = lockrules.WithExpiry(prefix, name)
	return names, keyLen, keyError(err)
}

// lockKeysShared is lockKeys with the shared holders' set, from the same
// allocation: the release of every kind that hands a lock over names it.
func lockKeysShared(prefix, name string) (names, shared string, keyLen int, err error) {
	names, shared, keyLen, err = lockrules.WithShared(prefix, name)
	return names, shared, keyLen, keyError(err)
}

// keyError is the invalid-argument error of a name lockrules refuses, in
// lockrules' words (lockrules.ErrEmptyName's are "empty lock name").
func keyError(err error) error {
	return invalidIf(err != nil, "%v", err)
}

// handoffTicket names the waiter a release hands the lock to: the first 16
// hex digits of its token's SHA1 (the token, a secret, is not published).
func handoffTicket(token string) string { return sha1Prefix(token) }

// holderID names a hold where operators see it (Info.Holders, log lines,
// Client.BreakHolder): the first 16 hex digits of the SHA1 of "holder:" and
// its token. It is the same for the hold's whole life and tells nothing of
// the token (nor of the hand-over ticket, a hash of the token alone); the
// scripts compute it as redis.sha1hex("holder:" .. token):sub(1, 16).
func holderID(token string) string { return sha1Prefix("holder:" + token) }

// sha1Prefix is the first 16 hex digits of s's SHA1.
func sha1Prefix(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// handoverTagLen: 50 random bits: two Clients' channels all but never meet.
const handoverTagLen = 10

// waiterToken returns a queued waiter's token: its Client's tag, a dot (not
// base32: the release script finds the tag by it), its kind's mark (see
// lockKind.waiterMark), then 130 random bits.
func waiterToken(tag, mark string) string {
	if tag == "" {
		return mark + rand.Text()
	}
	return tag + "." + mark + rand.Text()
}

// handoverChannel is where a release announces a hand-over to a waiter of
// the Client tagged tag: the lock's channel (its hash slot), ':', the tag.
func handoverChannel(key, tag string) string { return lockrules.Released(key) + ":" + tag }
