package redislock

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"

	"github.com/redislock/redislock/internal/lockrules"
)

// Key names come from internal/lockrules, which the redislock command and the
// redislocktest kit share: the one owner of the layout.

// lockKeys returns the key of the lock called name with the queue's keys
// after it, "prefix{name}:qx", in one string (the key is its first keyLen
// bytes), or an invalid-argument error when the name is empty or would
// not keep the lock's keys in one Redis Cluster hash slot (see
// lockrules.WithExpiry).
func lockKeys(prefix, name string) (names string, keyLen int, err error) {
	names, keyLen, err = lockrules.WithExpiry(prefix, name)
	if err != nil {
		if errors.Is(err, lockrules.ErrEmptyName) {
			return "", 0, invalidf("empty lock name")
		}
		return "", 0, invalidf("%v", err)
	}
	return names, keyLen, nil
}

// handoffTicket is how the release script names the waiter it hands the
// lock to: the first 16 hex digits of its token's SHA1. The token itself
// is a secret and is not published.
func handoffTicket(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}
