// Package redislock provides distributed locks on Redis for Go services
// whose instances must not run the same critical section at once.
//
// A lock is taken with one command, SET key token NX PX ttl, under a random
// token only its holder knows, and extended and released by Lua scripts
// that check the token first. While it is held, a watchdog extends it
// every TTL/3, and its context ([Lock.Context]) is cancelled, with a
// [*LostError] as its cause, as soon as it can no longer be trusted: at
// once when Redis says the key is gone or another's, and at the latest at
// the safe deadline (the send time of the last confirmed extension plus
// the TTL, less a drift allowance), even if Redis never answers.
//
// What a lock cannot promise: a paused process (a long GC, a frozen VM)
// stops its watchdog and timers too, so it can act after its lease
// expired; and Redis replication is asynchronous, so a failover can lose a
// lock just taken. Where a second holder would do harm, take a fencing
// token ([WithFencing]) and have the protected resource reject stale ones.
//
// A hold ends exactly once: by [Lock.Release] (locally first, so a lock is
// never left being extended), a loss, the maximum hold ([WithMaxHold]), or
// [Client.Close]. [Lock.Valid] reads the safe deadline at the call, right
// before an irreversible write. [WithMetadata] stores a description of the
// holder with the lock, [Client.Inspect] reads any lock's state without
// its token (its waiters too), and [Client.Break] ends a stuck lock, for
// operators, or [Client.BreakHolder] one stuck holder of it.
//
// Besides the exclusive lock: [Client.AcquireShared] takes a reader's hold
// (writers are not starved), [Client.AcquireSemaphore] lets at most a limit
// of holders in, and [Client.AcquireMulti] takes a set of names, all or
// none, as one Lock; each has its RunWithLock.
//
// A [Client] is safe for concurrent use and should be shared; Close it on
// shutdown so that its locks pass to other instances at once. A [Lock] is
// safe for concurrent use, is not tied to the goroutine that acquired it,
// and must not be copied.
package redislock
