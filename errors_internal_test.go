package redislock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOneLine pins how an error's lines become one: each run of line
// breaks is one "; ", none at the ends, and a line without breaks (or
// nothing) comes back as it is.
func TestOneLine(t *testing.T) {
	for msg, want := range map[string]string{
		"":                        "",
		"one line":                "one line",
		"first\nsecond":           "first; second",
		"first\r\nsecond":         "first; second",
		"\nfirst\n\n\rsecond\r\n": "first; second",
	} {
		require.Equal(t, want, oneLine(msg), "%q", msg)
	}
}
