//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisOptions reads -redis as redislock's CLI reads --redis: a redis://
// URL (rediss:// for TLS, unix:// for a socket, with go-redis' query
// options), or a bare host:port. Its errors never repeat the value, which
// may hold a password.
func redisOptions(s string) (*redis.Options, error) {
	if !strings.Contains(s, "://") {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, errors.New("-redis: want host:port or a URL (redis://[user:password@]host:port[/db], rediss:// for TLS)")
		}
		return &redis.Options{Addr: s}, nil
	}
	opts, err := redis.ParseURL(s)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, fmt.Errorf("-redis: invalid Redis URL: %v", err)
	}
	return opts, nil
}

// checkRedis pings the server of opts once, so that a Redis that cannot be
// reached is said before any pod starts.
func checkRedis(opts *redis.Options) error {
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	return nil
}
