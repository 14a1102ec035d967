//go:build unix

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

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

// cause is line(err) without the library's "redislock: " in front, for a
// message that says "redislock:" itself: a prefix is said once.
func cause(err error) string {
	return strings.TrimPrefix(line(err), "redislock: ")
}

// newFlags returns the flag set of "redislock command", with the Redis
// connection's flags (into conn). Errors and help are printed by
// parseCommand (help on stdout), not by package flag.
func newFlags(command string, conn *redisFlags) *flag.FlagSet {
	flags := flag.NewFlagSet("redislock "+command, flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	conn.register(flags)
	return flags
}

// parseCommand parses the args of command (see parseArgs) and returns its
// arguments, those after a "--" too (there a NAME may start with a dash).
// When ok is false the command stops with code: 0 after printing usage
// and the flags for -h, else a usage error's.
func parseCommand(flags *flag.FlagSet, command, usage string, args []string, stdout, stderr io.Writer) (names []string, code int, ok bool) {
	names, rest, _, err := parseArgs(flags, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage+flagDefaults(flags))
		return nil, 0, false
	case err != nil:
		return nil, usageError(stderr, "%s: %s", command, doubleDash(err)), false
	}
	return append(names, rest...), 0, true
}

// parseArgs parses args as kubectl, etcdctl and git do: flags anywhere
// before a "--", so that "status NAME --json" and "run NAME --ttl 3s --
// COMMAND" work. It returns the other arguments before the "--" (names)
// and those after it (rest, nil without a "--"; dashed tells whether there
// was one), which are left alone: flags after "--" are COMMAND's. A flag
// that takes a value takes the next argument, as package flag does.
func parseArgs(flags *flag.FlagSet, args []string) (names, rest []string, dashed bool, err error) {
	var flagArgs []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--":
			return names, args[i+1:], true, flags.Parse(flagArgs)
		case len(arg) < 2 || arg[0] != '-':
			names = append(names, arg) // "-" alone is an argument, as for package flag
			continue
		}
		flagArgs = append(flagArgs, arg)
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if f := flags.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flagArgs = append(flagArgs, args[i])
		}
	}
	return names, nil, false, flags.Parse(flagArgs)
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// durationValue is a time.Duration flag that says what is wrong with a
// value package flag's own would only call a "parse error": above all a
// number without a unit ("--ttl 30").
type durationValue time.Duration

// durationVar defines a durationValue flag.
func durationVar(flags *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	flags.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

var bareNumber = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)$`)

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	switch {
	case err == nil:
		*d = durationValue(v)
		return nil
	case bareNumber.MatchString(s):
		return fmt.Errorf("missing a unit, as in %ss", s)
	}
	return errors.New("not a duration, as in 30s, 1m30s or 500ms")
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
