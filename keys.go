package redislock

import (
	"crypto/sha1"
	"encoding/hex"
)

func fenceKeyFor(lockKey string) string { return lockKey + ":fence" }

// hashTag returns the part of key that Redis Cluster hashes when it has a
// non-empty {tag}, or "" when it has none.
func hashTag(key string) string {
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

func releaseChannel(key string) string { return key + ":released" }

// handoffTicket is how the release script names the waiter it hands the
// lock to: the first 16 hex digits of its token's SHA1. The token itself
// is a secret and is not published.
func handoffTicket(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// lockKeys returns the key of the lock called name with the queue's keys
// after it, "prefix{name}:qx", in one string (the key is its first keyLen
// bytes), or an error when the name is empty or would not keep the lock's
// keys in one Redis Cluster hash slot. The name sits inside braces so that
// it is the key's hash tag; the tag ends at the first '}' after the first
// '{', so the only names (and prefixes) that break it are those that leave
// the tag empty, which would make Redis hash the whole key instead.
func lockKeys(prefix, name string) (names string, keyLen int, err error) {
	if name == "" {
		return "", 0, invalidf("empty lock name")
	}
	names = prefix + "{" + name + "}" + expirySuffix // one allocation
	key := names[:len(names)-len(expirySuffix)]
	if hashTag(key) == "" {
		return "", 0, invalidf("lock name %q with prefix %q leaves the key %q an empty hash tag, so its keys could land in different cluster slots; avoid a '}' at the start of the name and \"{}\" in the prefix", name, prefix, key)
	}
	return names, len(key), nil
}

// expirySuffix names the queue's expiries, key + ":qx"; its prefix,
// key + ":q", is the queue itself (see lua/acquire.lua).
const expirySuffix = ":qx"

// withQueueKeys returns the key of the queue's expiries (see expirySuffix).
func withQueueKeys(key string) string { return key + expirySuffix }
