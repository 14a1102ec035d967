package redislock

import (
	"strings"

	"github.com/redislock/redislock/internal/lockrules"
	"unicode"
	"unicode/utf8"
)

// MaxMetadata is the longest holder metadata WithMetadata accepts, in bytes.
const MaxMetadata = 4096

// metadataSeparator joins the token and the metadata in the key's value: a
// control character, in no token (base32) and no metadata, so the value
// splits one way only (lua/state.lua and redislocktest split on it too).
const metadataSeparator = lockrules.MetadataSeparator

// WithMetadata stores s with the lock, in the same command that takes it,
// for anyone to read with Client.Inspect (and Lock.Metadata): a short
// description of the holder, such as "host=web-3 pid=4242 job=settle".
// It lives and dies with the key, is no secret, and gives no power over
// the lock. s is at most MaxMetadata bytes of valid UTF-8 that prints as
// one line as written: no control characters, line or paragraph
// separators or bidirectional controls (U+202A-U+202E, U+2066-U+2069),
// which could make a log or a terminal show another holder than the one
// stored; anything else is an invalid argument. It travels with every
// extension and release, so keep it short. Default "": nothing is sent.
func WithMetadata(s string) Option {
	return checked(checkMetadata(s), func(o *options) { o.metadata = s })
}

func checkMetadata(s string) error {
	if len(s) > MaxMetadata {
		return invalidf("metadata of %d bytes is over the %d-byte limit", len(s), MaxMetadata)
	}
	if !utf8.ValidString(s) {
		return invalidf("metadata is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, unprintable); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return invalidf("metadata holds the control character %U at byte %d (it must print as one line, as written)", r, i)
	}
	return nil
}

func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp, unicode.Bidi_Control)
}

func valueOf(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + metadataSeparator + metadata
}

// Metadata returns the metadata the lock was acquired with (see
// WithMetadata), "" when none, and on a nil Lock.
func (l *Lock) Metadata() string { return l.held().opts.metadata }
