//go:build unix

package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// line formats err on one line: errors.Join, and the library's errors
// joined with ctx.Err(), put a newline between their parts, which would
// split one message in two for a log collector reading stderr by lines.
func line(err error) string {
	var parts []string
	for part := range strings.SplitSeq(err.Error(), "\n") {
		if part = strings.TrimSpace(part); part != "" {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, "; ")
}

// singleDash matches a flag named with one dash, as package flag writes it
// in its errors ("flag provided but not defined: -nope").
var singleDash = regexp.MustCompile(`(^|[\s:])-([a-z][a-z-]*)`)

// doubleDash is line(err) with package flag's "-name" written "--name",
// the style of the help and the docs.
func doubleDash(err error) string {
	return singleDash.ReplaceAllString(line(err), "${1}--${2}")
}

// flagDefaults returns the flag list of flags: "--name PLACEHOLDER" (the
// usage's back-quoted word), the usage, and the default unless it is the
// zero value.
func flagDefaults(flags *flag.FlagSet) string {
	var b strings.Builder
	flags.VisitAll(func(f *flag.Flag) {
		placeholder, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if placeholder != "" {
			fmt.Fprintf(&b, " %s", placeholder)
		}
		b.WriteString("\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "false", "0", "0s":
		default:
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	return b.String()
}

// urlSource names where the Redis URL came from, for error messages.
func (f *redisFlags) urlSource() string {
	switch {
	case f.url != "":
		return "--redis"
	case os.Getenv("REDIS_URL") != "":
		return "REDIS_URL"
	}
	return "the default Redis URL"
}

// connect returns a client for the Redis URL. Its errors name where the URL
// came from (--redis or REDIS_URL), and never repeat the URL, which may
// hold a password.
func (f *redisFlags) connect() (redis.UniversalClient, error) {
	switch f.mode {
	case "standalone", "cluster", "sentinel":
	default:
		return f.client() // the error names --redis-mode
	}
	if !strings.Contains(f.resolvedURL(), "://") {
		return nil, fmt.Errorf("%s must look like redis://host:port (rediss://host:port for TLS, unix:///path/to/redis.sock for a socket)", f.urlSource())
	}
	rdb, err := f.client()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.urlSource(), err)
	}
	return rdb, nil
}
