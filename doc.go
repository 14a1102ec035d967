// Package redislock provides distributed locks on Redis for Go services
// whose instances must not run the same critical section at once.
//
// A lock is taken with one command, SET key token NX PX ttl, under a random
// token that only its holder knows; it is extended and released by Lua
// scripts that check the token first, so a holder never extends or deletes
// a lock that has passed to someone else. While a lock is held, a watchdog
// extends it every TTL/3, and the lock's context ([Lock.Context]) is
// cancelled, with a [*LostError] as its cause, as soon as the lock can no
// longer be trusted: at once when Redis says the key is gone or holds
// another token, and at the latest at the safe deadline (the send time of
// the last confirmed extension plus the TTL, less an allowance for clock
// drift) even if Redis never answers.
//
// What a lock cannot promise: a process that is paused (a long GC, a frozen
// VM) stops its watchdog and its timers too, so it can wake up after its
// lease expired and act before it notices; and Redis replication is
// asynchronous, so a failover can lose a lock that was just taken. Where a
// second holder would do harm (a double charge, not just work done twice),
// take a fencing token with the lock ([WithFencing]) and have the protected
// resource reject stale ones; see [FenceFromContext].
//
// A [Client] is safe for concurrent use and should be shared. A [Lock] is
// safe for concurrent use, is not tied to the goroutine that acquired it,
// and must not be copied.
package redislock
