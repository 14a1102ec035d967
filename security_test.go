package redislock_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// tokenAlphabet is the alphabet of crypto/rand.Text: base32, 5 bits a
// character.
const tokenAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// requireTokenShape asserts that token carries at least 128 random bits in
// the rand.Text alphabet.
func requireTokenShape(t testing.TB, token string) {
	t.Helper()
	require.GreaterOrEqual(t, len(token)*5, 128, "token %q is too short for 128 bits", token)
	for _, r := range token {
		require.True(t, strings.ContainsRune(tokenAlphabet, r), "token %q has %q outside the base32 alphabet", token, r)
	}
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func commonSuffix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

func hamming(a, b string) int {
	d := 0
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			d++
		}
	}
	return d + max(len(a), len(b)) - min(len(a), len(b))
}

// scriptStub is a redis.UniversalClient that answers at once, in process,
// as a Redis where every lock is free would: the cheap way to draw many
// tokens through the real Acquire. It records the token each acquisition
// sends (by SET NX or by the acquire script). The embedded client is never
// used for I/O.
type scriptStub struct {
	*redis.Client
	mu   sync.Mutex
	sent []string
}

// Process answers SET with OK, the acquire script (recognised by its
// SHA1) with 0 (acquired, no fence) and any other script (the release) with 1.
func (s *scriptStub) Process(_ context.Context, cmd redis.Cmder) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return fmt.Errorf("scriptStub: unexpected command type %T", cmd)
	}
	args := cmd.Args()
	argString := func(i int) string {
		switch v := args[i].(type) {
		case string:
			return v
		case *string:
			return *v
		}
		return fmt.Sprint(args[i])
	}
	switch {
	case strings.EqualFold(argString(0), "set"):
		s.record(argString(2))
		c.SetVal("OK")
	case strings.EqualFold(argString(0), "evalsha") && argString(1) == acquireSHA:
		numKeys, err := strconv.Atoi(argString(2))
		if err != nil {
			return err
		}
		s.record(argString(3 + numKeys)) // EVALSHA sha numkeys keys... token ...
		c.SetVal(int64(0))
	default:
		c.SetVal(int64(1))
	}
	return nil
}

func (s *scriptStub) record(token string) {
	s.mu.Lock()
	s.sent = append(s.sent, token)
	s.mu.Unlock()
}

// acquireSHA is the SHA1 of the acquire script, as EVALSHA names it.
var acquireSHA, _ = redislock.Script("acquire")

func TestTokensAreDistinctAndRandom(t *testing.T) {
	t.Parallel()
	const total, workers = 100_000, 4
	stub := &scriptStub{Client: redis.NewClient(&redis.Options{Addr: deadAddr(t)})}
	t.Cleanup(func() { _ = stub.Close() })
	ctx := context.Background()
	c := redislock.New(stub, quiet, redislock.WithWatchdog(false))

	// Each worker keeps its tokens in acquisition order, so that
	// consecutive tokens of one client can be compared.
	streams := make([][]string, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			name := "token-" + strconv.Itoa(w)
			for range total / workers {
				l, err := c.Acquire(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				streams[w] = append(streams[w], l.Token())
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, stub.sent, total, "every acquisition sent its token")

	seen := make(map[string]struct{}, total)
	var counts [26][32]int
	tokenLen := len(streams[0][0])
	require.LessOrEqual(t, tokenLen, len(counts), "token %q", streams[0][0])
	for _, stream := range streams {
		for _, token := range stream {
			requireTokenShape(t, token)
			require.Len(t, token, tokenLen)
			seen[token] = struct{}{}
			for i := range token {
				counts[i][strings.IndexByte(tokenAlphabet, token[i])]++
			}
		}
	}
	require.Len(t, seen, total, "every acquisition got a token of its own")
	for _, token := range stub.sent {
		_, ok := seen[token]
		require.True(t, ok, "the token sent to Redis is the one Lock.Token returns")
	}

	t.Run("each character is uniform over the alphabet", func(t *testing.T) {
		// Chi-square with 31 degrees of freedom: mean 31, and above 100
		// with probability about 1e-9 for a uniform source. A timestamp or
		// a counter leaves most positions nearly constant (chi-square in
		// the hundred thousands).
		expected := float64(total) / 32
		for pos := range tokenLen {
			chi := 0.0
			for _, n := range counts[pos] {
				d := float64(n) - expected
				chi += d * d / expected
			}
			require.Less(t, chi, 100.0, "position %d of the token is not uniform (chi-square %.1f)", pos, chi)
		}
	})
	t.Run("consecutive tokens share no structure", func(t *testing.T) {
		// For independent tokens a common prefix (or suffix) of 7
		// characters has probability 32^-7 ≈ 3e-11 per pair, and about 25.2
		// of 26 positions differ on average. A token built from the time
		// or a counter shares a long prefix with the previous one and
		// differs in a few places.
		pairs, distance := 0, 0
		for _, stream := range streams {
			for i := 1; i < len(stream); i++ {
				prev, cur := stream[i-1], stream[i]
				require.Less(t, commonPrefix(prev, cur), 7, "tokens %q and %q", prev, cur)
				require.Less(t, commonSuffix(prev, cur), 7, "tokens %q and %q", prev, cur)
				distance += hamming(prev, cur)
				pairs++
			}
		}
		mean := float64(distance) / float64(pairs)
		require.Greater(t, mean, float64(tokenLen)*31/32-0.5, "mean distance between consecutive tokens %.2f", mean)
	})
}

func TestTokensOfClientsStartedAtTheSameInstantDiffer(t *testing.T) {
	t.Run("goroutines", func(t *testing.T) {
		const clients = 64
		mini := newMiniServer(t)
		ctx := context.Background()
		start := make(chan struct{})
		tokens := make([]string, clients)
		errs := make([]error, clients)
		var wg sync.WaitGroup
		for i := range clients {
			c := redislock.New(newRedisClient(t, mini.Addr()), quiet)
			wg.Go(func() {
				<-start
				l, err := c.Acquire(ctx, "same-instant-"+strconv.Itoa(i))
				if err != nil {
					errs[i] = err
					return
				}
				tokens[i] = l.Token()
				errs[i] = l.Release(ctx)
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		seen := map[string]int{}
		for i, token := range tokens {
			requireTokenShape(t, token)
			if j, dup := seen[token]; dup {
				t.Fatalf("clients %d and %d got the same token %q", j, i, token)
			}
			seen[token] = i
		}
	})
	t.Run("processes", func(t *testing.T) {
		// Copies of this test binary, started together, each acquire
		// tokenHelperCount locks on their own miniredis and print the tokens.
		const processes = 3
		cmds := make([]*exec.Cmd, processes)
		outs := make([]*strings.Builder, processes)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^TestTokenHelperProcess$", "-test.count=1")
			cmds[i].Env = append(os.Environ(), "REDISLOCK_TOKEN_HELPER=1")
			outs[i] = &strings.Builder{}
			cmds[i].Stdout = outs[i]
			cmds[i].Stderr = os.Stderr
		}
		for _, cmd := range cmds {
			require.NoError(t, cmd.Start())
		}
		for _, cmd := range cmds {
			require.NoError(t, cmd.Wait())
		}
		seen := map[string]int{}
		for i, out := range outs {
			var got []string
			sc := bufio.NewScanner(strings.NewReader(out.String()))
			for sc.Scan() {
				if token, ok := strings.CutPrefix(sc.Text(), "token "); ok {
					got = append(got, token)
				}
			}
			require.Len(t, got, tokenHelperCount, "process %d output:\n%s", i, out)
			for _, token := range got {
				requireTokenShape(t, token)
				if j, dup := seen[token]; dup {
					t.Fatalf("processes %d and %d drew the same token %q", j, i, token)
				}
				seen[token] = i
			}
		}
	})
}

const tokenHelperCount = 200

// TestTokenHelperProcess is not a test: it is the child process of
// TestTokensOfClientsStartedAtTheSameInstantDiffer/processes (the os/exec
// helper-process pattern), and does nothing unless that test starts it.
func TestTokenHelperProcess(t *testing.T) {
	if os.Getenv("REDISLOCK_TOKEN_HELPER") != "1" {
		return
	}
	rdb := newMini(t)
	c := redislock.New(rdb, quiet, redislock.WithWatchdog(false))
	ctx := context.Background()
	for range tokenHelperCount {
		l, err := c.Acquire(ctx, "job")
		require.NoError(t, err)
		fmt.Println("token " + l.Token())
		require.NoError(t, l.Release(ctx))
	}
}

// The smallest ACL a client of this library needs, with the default "lock:"
// prefix. docs/security.md documents the same line. (+time: a fence is the
// counter raised to the server's clock.)
var minimalACLCommands = []string{"+evalsha", "+eval", "+set", "+get", "+pexpire", "+pttl", "+del", "+incr", "+time"}

// setACLUser creates user (password "pw") with the given rules on top of
// "reset on" (no commands, no keys, no channels).
func setACLUser(t *testing.T, admin *redis.Client, user string, rules ...string) *redis.Client {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, toAny(rules)...)
	require.NoError(t, admin.Do(context.Background(), args...).Err(), "ACL SETUSER %s %v", user, rules)
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: user, Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// lifecycle runs everything the library sends to Redis: a fenced acquire,
// an acquire of a held lock, TTL, Extend, Release, and a RunWithLock.
func lifecycle(ctx context.Context, rdb *redis.Client, name string) error {
	c := redislock.New(rdb, quiet, redislock.WithWatchdog(false), redislock.WithTTL(time.Minute))
	l, err := c.Acquire(ctx, name, redislock.WithFencing())
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer func() { _ = l.Release(ctx) }()
	if l.Fence() < 1 {
		return fmt.Errorf("fence %d", l.Fence())
	}
	if _, err := c.Acquire(ctx, name); !errors.Is(err, redislock.ErrNotAcquired) {
		return fmt.Errorf("acquire of a held lock: %w", err)
	}
	if _, err := l.TTL(ctx); err != nil {
		return fmt.Errorf("TTL: %w", err)
	}
	if err := l.Extend(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("extend: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return c.RunWithLock(ctx, name, func(context.Context) error { return nil })
}

func TestRedisACL(t *testing.T) {
	server := redistest.Start(t)
	admin := newRedisClient(t, server.Addr())
	ctx := context.Background()
	minimal := append([]string{"~lock:*", "resetchannels"}, minimalACLCommands...)
	without := func(drop ...string) []string {
		var rules []string
		for _, r := range minimal {
			if !slices.Contains(drop, r) {
				rules = append(rules, r)
			}
		}
		return rules
	}

	t.Run("a user with the minimal ACL can do everything", func(t *testing.T) {
		rdb := setACLUser(t, admin, "locker", minimal...)
		require.NoError(t, lifecycle(ctx, rdb, "acl-job"))
		// Again with an empty script cache (a restart, SCRIPT FLUSH):
		// EVALSHA misses and EVAL runs the script.
		require.NoError(t, admin.ScriptFlush(ctx).Err())
		require.NoError(t, lifecycle(ctx, rdb, "acl-job"))

		// And the watchdog's extensions.
		clock := &extensionClock{}
		// Every 50 ms, under a long TTL that no stall can run out.
		l, err := redislock.New(rdb, quiet, redislock.WithObserver(clock), redislock.WithTTL(time.Minute), redislock.WithExtendInterval(50*time.Millisecond)).Acquire(ctx, "acl-watchdog")
		require.NoError(t, err)
		eventually(t, 10*time.Second, func() bool { _, n := clock.last(); return n >= 2 }, "the watchdog extended the lock")
		require.NoError(t, l.Context().Err())
		require.NoError(t, l.Release(ctx))
	})

	t.Run("every command of the minimal ACL is needed", func(t *testing.T) {
		for _, cmd := range minimalACLCommands {
			rdb := setACLUser(t, admin, "without-"+cmd[1:], without(cmd)...)
			// Without EVAL, EVALSHA only works while the script is cached.
			require.NoError(t, admin.ScriptFlush(ctx).Err())
			lifeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := lifecycle(lifeCtx, rdb, "needs-"+cmd[1:])
			require.Error(t, err, "the lifecycle works without %s: the minimal ACL is not minimal", cmd)
			require.NoError(t, lifeCtx.Err(), "refused at once, not after a hang")
			cancel()
		}
	})

	t.Run("a user without EVALSHA and EVAL is refused with NOPERM", func(t *testing.T) {
		rdb := setACLUser(t, admin, "no-scripts", without("+evalsha", "+eval")...)
		err := requireRefused(t, admin, rdb, "acl-no-scripts")
		require.ErrorContains(t, err, "NOPERM")
		require.ErrorContains(t, err, "evalsha")
	})

	t.Run("a user without EVAL is refused with NOPERM once the script cache is empty", func(t *testing.T) {
		rdb := setACLUser(t, admin, "no-eval", without("+eval")...)
		require.NoError(t, admin.ScriptFlush(ctx).Err())
		err := requireRefused(t, admin, rdb, "acl-no-eval")
		require.ErrorContains(t, err, "NOPERM")
		require.ErrorContains(t, err, "'eval'")
	})

	t.Run("a user without the key pattern is refused with NOPERM", func(t *testing.T) {
		rdb := setACLUser(t, admin, "other-keys", append([]string{"~other:*", "resetchannels"}, minimalACLCommands...)...)
		err := requireRefused(t, admin, rdb, "acl-other-keys")
		require.ErrorContains(t, err, "NOPERM")
		require.ErrorContains(t, err, "keys")
	})

	t.Run("a key prefix outside the user's pattern is refused with NOPERM", func(t *testing.T) {
		rdb := setACLUser(t, admin, "locker-prefix", minimal...)
		err := requireRefused(t, admin, rdb, "acl-prefix", redislock.WithKeyPrefix("app:"))
		require.ErrorContains(t, err, "NOPERM")
	})

	t.Run("a custom prefix works with the matching pattern", func(t *testing.T) {
		rdb := setACLUser(t, admin, "app-locker", append([]string{"~app:*", "resetchannels"}, minimalACLCommands...)...)
		l, err := redislock.New(rdb, quiet, redislock.WithKeyPrefix("app:")).Acquire(ctx, "acl-app", redislock.WithFencing())
		require.NoError(t, err)
		require.Equal(t, "app:{acl-app}", l.Key())
		require.NoError(t, l.Release(ctx))
	})
}

// requireRefused asserts that an Acquire by rdb fails quickly with a
// permission error, returns no lock and leaves no key.
func requireRefused(t *testing.T, admin, rdb *redis.Client, name string, opts ...redislock.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := redislock.New(rdb, quiet).Acquire(ctx, name, opts...)
	require.Error(t, err)
	require.Nil(t, l, "no lock without permission")
	require.NoError(t, ctx.Err(), "refused at once, not after a hang (%v)", time.Since(start))
	require.NotErrorIs(t, err, redislock.ErrNotAcquired, "a refusal is not 'held by someone else'")
	require.Zero(t, admin.Exists(context.Background(), "lock:{"+name+"}", "app:{"+name+"}").Val(), "nothing was written")

	ran := false
	runErr := redislock.New(rdb, quiet).RunWithLock(ctx, name, func(context.Context) error { ran = true; return nil },
		append(opts, redislock.WithFailOpen())...)
	require.Error(t, runErr)
	require.False(t, ran, "a refusal is not an outage: fail open does not run fn")
	return err
}

// tlsFiles writes a fresh self-signed CA and a server certificate for
// 127.0.0.1 (ECDSA P-256, valid for an hour) to dir, and returns the CA
// pool and the file paths.
func tlsFiles(t *testing.T, dir string) (roots *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redislock test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)

	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return roots, write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", srvKeyDER)
}

func TestTLS(t *testing.T) {
	t.Parallel()
	redistest.Binary(t, "redis-server")
	roots, caFile, certFile, keyFile := tlsFiles(t, t.TempDir())
	tlsPort := redistest.FreePort(t)
	// redistest keeps the plain port for its readiness check; the test's
	// clients use the TLS port only.
	redistest.Start(t, "--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no")
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	ctx := context.Background()

	t.Run("locks work over rediss:// with the test CA", func(t *testing.T) {
		opts, err := redis.ParseURL("rediss://" + tlsAddr)
		require.NoError(t, err)
		require.NotNil(t, opts.TLSConfig, "rediss:// turns TLS on")
		var handshakes atomic.Int32
		opts.TLSConfig.RootCAs = roots
		opts.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.Version < tls.VersionTLS12 || len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("unexpected TLS state: version %x, %d certificates", cs.Version, len(cs.PeerCertificates))
			}
			handshakes.Add(1)
			return nil
		}
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })

		c := redislock.New(rdb, quiet, redislock.WithTTL(3*time.Second), redislock.WithFencing())
		l, err := c.Acquire(ctx, "tls-job")
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		left, err := l.TTL(ctx)
		require.NoError(t, err)
		require.Greater(t, left, 3*time.Second, "the extension reached the server")
		require.NoError(t, l.Release(ctx))
		require.NoError(t, lifecycle(ctx, rdb, "tls-lifecycle"))
		require.Positive(t, handshakes.Load(), "every connection went through a verified TLS handshake")
	})

	t.Run("a plain client on the TLS port gets an error, not a lock", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		l, err := redislock.New(rdb, quiet).Acquire(ctx, "tls-job")
		require.Error(t, err)
		require.Nil(t, l)
	})

	t.Run("a client that does not trust the certificate gets an error, not a lock", func(t *testing.T) {
		opts, err := redis.ParseURL("rediss://" + tlsAddr)
		require.NoError(t, err)
		opts.MaxRetries = -1
		rdb := redis.NewClient(opts) // system roots: the test CA is unknown
		t.Cleanup(func() { _ = rdb.Close() })
		l, err := redislock.New(rdb, quiet).Acquire(ctx, "tls-job")
		require.Error(t, err)
		require.Nil(t, l)
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown, "the refusal says why: %v", err)
	})
}

func TestTokensAreLoggedAtDebugOnly(t *testing.T) {
	t.Parallel()
	logs := &logRecorder{}
	logger := redislock.WithLogger(slog.New(logs))
	mini := newMiniServer(t)
	rdb := newRedisClient(t, mini.Addr())
	ctx := context.Background()
	var tokens []string
	var returned []error
	keep := func(err error) {
		if err != nil {
			returned = append(returned, err)
		}
	}

	// A failed extension (Warn), then a loss found by the watchdog (Error),
	// then a release of the lost lock.
	c := redislock.New(rdb, logger, redislock.WithTTL(10*time.Second), redislock.WithExtendInterval(5*time.Millisecond))
	l, err := c.Acquire(ctx, "logged")
	require.NoError(t, err)
	tokens = append(tokens, l.Token())
	mini.SetError("LOADING Redis is loading the dataset in memory")
	eventually(t, 10*time.Second, func() bool { _, ok := logs.find(slog.LevelWarn, "extension failed"); return ok }, "no failed extension")
	mini.SetError("")
	mini.Del(l.Key())
	waitDone(t, l.Context(), 10*time.Second)
	requireLost(t, l.Context(), redislock.Expired)
	keep(context.Cause(l.Context()))
	keep(l.Release(ctx))
	keep(l.Extend(ctx, time.Second))

	// A loss at the safe deadline while Redis answers with errors (Error,
	// carrying the last Redis error).
	l, err = c.Acquire(ctx, "unreachable", redislock.WithTTL(300*time.Millisecond), redislock.WithExtendInterval(0))
	require.NoError(t, err)
	tokens = append(tokens, l.Token())
	mini.SetError("LOADING Redis is loading the dataset in memory")
	waitDone(t, l.Context(), 10*time.Second)
	requireLost(t, l.Context(), redislock.Unreachable)
	keep(context.Cause(l.Context()))
	keep(l.Release(ctx))
	mini.SetError("")
	keep(l.Release(ctx))

	// A key taken over by someone else, a max hold, a failed release after
	// RunWithLock, and a plain successful run.
	l, err = c.Acquire(ctx, "taken", redislock.WithWatchdog(false))
	require.NoError(t, err)
	tokens = append(tokens, l.Token())
	require.NoError(t, rdb.Set(ctx, l.Key(), "someone-else", 0).Err())
	keep(l.Extend(ctx, time.Second))
	keep(l.Release(ctx))
	l, err = c.Acquire(ctx, "max-hold", redislock.WithMaxHold(time.Millisecond))
	require.NoError(t, err)
	tokens = append(tokens, l.Token())
	waitDone(t, l.Context(), 10*time.Second)
	keep(l.Release(ctx))
	keep(c.RunWithLock(ctx, "release-fails", func(context.Context) error {
		mini.SetError("LOADING Redis is loading the dataset in memory")
		return errors.New("work failed")
	}))
	mini.SetError("")
	keep(c.RunWithLock(ctx, "fine", func(context.Context) error { return nil }, redislock.WithFencing()))

	// Fail open (Warn).
	down := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })
	keep(redislock.New(down, logger).RunWithLock(ctx, "fail-open", func(context.Context) error { return nil }, redislock.WithFailOpen()))

	// The tokens of the RunWithLock locks are known from the Debug
	// records only; every token must be there, or the search below would
	// prove nothing.
	logs.mu.Lock()
	records := append([]slog.Record(nil), logs.records...)
	logs.mu.Unlock()
	for _, rec := range records {
		if rec.Level != slog.LevelDebug || rec.Message != "redislock: acquired" {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "token" {
				tokens = append(tokens, a.Value.String())
			}
			return true
		})
	}
	tokenSet := map[string]bool{}
	for _, token := range tokens {
		requireTokenShape(t, token)
		tokenSet[token] = true
	}
	require.Len(t, tokenSet, 6, "the tokens of the four acquired locks and the two runs")

	levels := map[slog.Level]int{}
	for _, rec := range records {
		levels[rec.Level]++
		text := recordText(rec)
		for token := range tokenSet {
			half := token[:len(token)/2]
			if rec.Level > slog.LevelDebug {
				require.NotContains(t, text, half, "a %v record shows (part of) a token: %s", rec.Level, text)
			}
		}
	}
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelWarn, slog.LevelError} {
		require.Positive(t, levels[level], "the scenario logged at %v (%v)", level, levels)
	}
	debugWithToken := 0
	for _, rec := range records {
		if rec.Level == slog.LevelDebug && strings.Contains(recordText(rec), tokens[0]) {
			debugWithToken++
		}
	}
	require.Positive(t, debugWithToken, "Debug does show the token (the check above can see one)")

	require.NotEmpty(t, returned)
	for _, err := range returned {
		for token := range tokenSet {
			require.NotContains(t, err.Error(), token[:len(token)/2], "a returned error, which callers log, shows a token")
		}
	}
}

// recordText renders a record's message and every attribute, groups and
// error values included, the way any handler could print them.
func recordText(rec slog.Record) string {
	var b strings.Builder
	b.WriteString(rec.Message)
	var add func(prefix string, a slog.Attr)
	add = func(prefix string, a slog.Attr) {
		v := a.Value.Resolve()
		if v.Kind() == slog.KindGroup {
			for _, g := range v.Group() {
				add(prefix+a.Key+".", g)
			}
			return
		}
		fmt.Fprintf(&b, " %s%s=%v", prefix, a.Key, v.Any())
		if err, ok := v.Any().(error); ok {
			fmt.Fprintf(&b, " (%s) %+v %#v", err.Error(), err, err)
		}
	}
	rec.Attrs(func(a slog.Attr) bool { add("", a); return true })
	return b.String()
}
