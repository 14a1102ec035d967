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
// A hold ends in one of four ways, each exactly once: [Lock.Release] (which
// ends it locally first, so a lock is never left being extended, even when
// the release cannot reach Redis or its ctx is already done), a loss (the
// key gone or taken, or the safe deadline passed without a confirmed
// extension), the maximum hold ([WithMaxHold]), or [Client.Close]. Right
// before an irreversible write, [Lock.Valid] reads the safe deadline from
// the clock at the call; [LockFromContext] finds the Lock behind a
// RunWithLock function's context.
//
// Who holds a lock: [WithMetadata] stores a description of the holder with
// the lock, in the same command, and [Client.Inspect] reads any lock's
// state (held, lease left, metadata, last fence, waiters) in one round trip
// without its token. [Client.Break] is for operators: it ends a stuck lock
// whatever its token, as its release would, and the holder learns at its
// next extension.
//
// Other kinds: [Client.AcquireShared] takes a reader's hold (any number at
// once, none while an exclusive holder holds the name, and a queued
// exclusive waiter goes before later readers); [Client.AcquireSemaphore]
// lets at most a limit of holders in at once, each with a Lock of its own;
// [Client.AcquireMulti] takes a set of names, all or none, as one Lock
// (lost if any name is lost), on a Cluster slot by slot in one global
// order, so that overlapping sets never deadlock. Each has its
// RunWithLock: [Client.RunWithSharedLock], [Client.RunWithSemaphore] and
// [Client.RunWithLockMulti].
//
// A [Client] is safe for concurrent use and should be shared; Close it on
// shutdown so that its locks pass to other instances at once. A [Lock] is
// safe for concurrent use, is not tied to the goroutine that acquired it,
// and must not be copied.
package redislock
