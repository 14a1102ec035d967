package lockrules

import (
	"strings"
	"time"
)

// The bounds of a lock's lease (its TTL), for the library (WithTTL,
// Lock.Extend) and the redislock command (--ttl) alike, so that both
// refuse the same leases in the same words.
const (
	// MinTTL: below it, the round trip and the drift allowance eat the
	// whole lease, and a lock would be handed out already past its safe
	// deadline.
	MinTTL = 10 * time.Millisecond
	// MaxTTL: a crashed holder blocks the name for its whole TTL, and
	// with the watchdog on the TTL need only cover a crash, not the work.
	// A day lets a lease without the watchdog span a day-long job;
	// anything longer (time.Duration(math.MaxInt64) is 292 years) is a
	// unit mistake or a lock meant never to lapse.
	MaxTTL = 24 * time.Hour
)

// TTLOutOfRange says what is wrong with the lease ttl, "is below the 10ms
// minimum" or "is above the 24h maximum", or returns "" when it is within
// [MinTTL, MaxTTL].
func TTLOutOfRange(ttl time.Duration) string {
	switch {
	case ttl < MinTTL:
		return "is below the " + Duration(MinTTL) + " minimum"
	case ttl > MaxTTL:
		return "is above the " + Duration(MaxTTL) + " maximum"
	}
	return ""
}

// Duration writes d as time.Duration.String does, without its trailing
// zero units: "24h", "1h30m", "10ms".
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
