//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"

	"github.com/redis/go-redis/v9"
	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/lockrules"
)

const defaultRedisURL = "redis://127.0.0.1:6379"

// redisFlags are the connection flags shared by run and status.
type redisFlags struct {
	url    string
	mode   string
	prefix string
}

func (f *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "redis", "", "Redis `URL`: redis://[user:password@]host:port[/db], rediss:// for TLS,\n"+
		"unix:///path/to/redis.sock, with go-redis query options (?dial_timeout=3s...)\n"+
		"(default $REDIS_URL, else "+defaultRedisURL+")")
	fs.StringVar(&f.mode, "redis-mode", "standalone", "how to read --redis; `MODE` is standalone (one server), cluster (Redis Cluster;\n"+
		"more seed nodes with ?addr=host:port), or sentinel (?master_name=NAME&addr=host:port,\n"+
		"the URL's host being a Sentinel)")
	fs.StringVar(&f.prefix, "prefix", redislock.DefaultKeyPrefix, "key `PREFIX`: the lock key is PREFIX{NAME}, its fence counter PREFIX{NAME}:fence")
}

// resolvedURL returns --redis, else $REDIS_URL, else the local default.
func (f *redisFlags) resolvedURL() string {
	if f.url != "" {
		return f.url
	}
	if env := os.Getenv("REDIS_URL"); env != "" {
		return env
	}
	return defaultRedisURL
}

// client returns a go-redis client for the flags, or a usage error. The
// client honours context deadlines (ContextTimeoutEnabled), so --wait and
// status's timeout bound the network calls too.
func (f *redisFlags) client() (redis.UniversalClient, error) {
	raw := f.resolvedURL()
	switch f.mode {
	case "standalone":
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return nil, badURL(err)
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClient(opts), nil
	case "cluster":
		opts, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, badURL(err)
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opts), nil
	case "sentinel":
		opts, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return nil, badURL(err)
		}
		if opts.MasterName == "" {
			return nil, errors.New("invalid Redis URL: sentinel mode needs ?master_name=NAME")
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(opts), nil
	}
	return nil, fmt.Errorf("invalid --redis-mode %q: want standalone, cluster or sentinel", f.mode)
}

// badURL describes a URL that did not parse without repeating the URL,
// which may hold a password.
func badURL(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		err = urlErr.Err
	}
	return fmt.Errorf("invalid Redis URL: %v", err)
}

// lockKey returns the key redislock uses for the lock called name (see
// internal/lockrules, the one owner of the layout), or an error for the
// names the library rejects: the empty name, and names that leave the key's
// Redis Cluster hash tag empty.
func lockKey(prefix, name string) (string, error) {
	return lockrules.Lock(prefix, name)
}

// isUnreachable tells an error that means Redis could not be reached or
// could not serve (the cases fail open runs the command without the lock)
// from errors where Redis answered and refused (WRONGTYPE, NOPERM, TRYAGAIN,
// a wrong password), the lock being held, or bad input: the rule
// RunWithLock applies for WithFailOpen, from internal/lockrules.
func isUnreachable(err error) bool {
	return lockrules.Unreachable(err, redislock.ErrNotAcquired, redislock.ErrInvalidArgument, redislock.ErrClosed)
}

// newLogger returns the logger of the library and of go-redis: text on
// stderr, at Warn, or at Debug when verbose. go-redis' own messages (a
// connection pool failing to dial...) go to it at Debug: the error they
// describe is reported once, by redislock.
func newLogger(stderr io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	redis.SetLogger(goRedisLogger{logger})
	return logger
}

// goRedisLogger passes go-redis' internal log lines to slog at Debug.
type goRedisLogger struct{ logger *slog.Logger }

func (l goRedisLogger) Printf(ctx context.Context, format string, args ...any) {
	l.logger.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, args...))
}
