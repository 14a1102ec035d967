//go:build unix

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redislock/redislock/internal/redistest"
)

// -redis takes what redislock's CLI takes in --redis, a redis:// URL
// (rediss:// for TLS, unix:// for a socket), and still a bare host:port.
func TestTheRedisFlagTakesAURLOrHostPort(t *testing.T) {
	for in, addr := range map[string]string{
		"127.0.0.1:6379":                    "127.0.0.1:6379",
		"redis://127.0.0.1:6390/2":          "127.0.0.1:6390",
		"rediss://user:s3cret@example:6380": "example:6380",
		"redis://localhost":                 "localhost:6379",
	} {
		opts, err := redisOptions(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if opts.Addr != addr {
			t.Errorf("%s: address %s, want %s", in, opts.Addr, addr)
		}
	}
	for _, in := range []string{"localhost", "redis://user:s3cret@[::1", "ftp://127.0.0.1:21"} {
		_, err := redisOptions(in)
		if err == nil {
			t.Errorf("%s: no error", in)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error repeats the password: %v", in, err)
		}
	}
}

func TestTheDemoRunsOnARedisURL(t *testing.T) {
	srv := redistest.Start(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := run(&out, exe, "redis://"+srv.Addr()+"/3", 500*time.Millisecond, "2026-12-03"); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"setup   Redis at " + srv.Addr(), "(1 row updated)", "write REJECTED by the database"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if n, err := srv.Client(t).DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Errorf("database 0 holds %d keys (%v): the URL's /3 was not used", n, err)
	}
}

// A Redis that cannot be reached is said at once, before any pod starts,
// not as "no pod froze" after every pod gave up.
func TestTheDemoSaysWhenRedisCannotBeReached(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = run(&out, exe, "redis://127.0.0.1:1", 500*time.Millisecond, "2026-12-03")
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at 127.0.0.1:1") {
		t.Fatalf("error %v, want one that says Redis cannot be reached\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "cron") {
		t.Errorf("pods were started:\n%s", out.String())
	}
}
