package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which a SentinelSet's sentinels monitor the
// primary.
const MasterName = "mymaster"

// SentinelSet is a primary, one replica and three redis-sentinel processes
// (quorum 2), all on free 127.0.0.1 ports, with every file in temporary
// directories of the test. The two data servers swap roles on every
// failover: use Primary and Replica to tell which is which.
type SentinelSet struct {
	servers   [2]*Server
	dirs      [2]string
	sentinels []*sentinelProcess
}

// sentinelProcess is one redis-sentinel.
type sentinelProcess struct {
	port   int
	cmd    *exec.Cmd
	exited chan error
}

func (p *sentinelProcess) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *sentinelProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

// StartSentinel starts the primary, its replica and three sentinels, and
// waits until the sentinels agree on the primary and know the replica and
// each other. Sentinels declare the primary down after 500ms without a
// reply. Everything is stopped in t.Cleanup. It skips (or fails, with
// REDISLOCK_REQUIRE_REDIS set) when redis-server or redis-sentinel is
// missing.
func StartSentinel(t testing.TB) *SentinelSet {
	t.Helper()
	sentinelBin := Binary(t, "redis-sentinel")
	s := &SentinelSet{dirs: [2]string{t.TempDir(), t.TempDir()}}
	s.servers[0] = Start(t, s.serverArgs(0)...)
	s.servers[1] = Start(t, append(s.serverArgs(1), "--replicaof", "127.0.0.1", strconv.Itoa(s.servers[0].Port()))...)
	for range 3 {
		p, err := startSentinel(t, sentinelBin, s.servers[0].Port())
		if err != nil {
			t.Fatalf("starting redis-sentinel: %v", err)
		}
		t.Cleanup(p.kill)
		s.sentinels = append(s.sentinels, p)
	}
	s.WaitHealthy(t)
	return s
}

// serverArgs are the arguments of data server i: its own directory (a
// replica writes the RDB it receives there), and a full sync that starts at
// once instead of waiting 5s for more replicas.
func (s *SentinelSet) serverArgs(i int) []string {
	return []string{"--dir", s.dirs[i], "--repl-diskless-sync-delay", "0"}
}

func startSentinel(t testing.TB, bin string, primaryPort int) (*sentinelProcess, error) {
	var err error
	for range 5 { // a free port can be taken by someone else before we bind it
		dir := t.TempDir()
		p := &sentinelProcess{port: FreePort(t)}
		conf := fmt.Sprintf(`bind 127.0.0.1
port %d
daemonize no
dir %s
loglevel warning
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s 500
sentinel failover-timeout %[3]s 2000
sentinel parallel-syncs %[3]s 1
`, p.port, dir, MasterName, primaryPort)
		path := filepath.Join(dir, "sentinel.conf")
		if err = os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, path)
		cmd.Dir = dir
		if err = cmd.Start(); err != nil {
			return nil, err
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		p.cmd, p.exited = cmd, exited
		if err = waitPing(p.addr(), exited); err == nil {
			return p, nil
		}
		p.kill()
	}
	return nil, err
}

// waitPing waits up to 10s for addr to answer PING, or for the process to
// exit.
func waitPing(addr string, exited chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // kill waits on it too
			return fmt.Errorf("exited: %v", err)
		default:
		}
		err := ping(addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval while it boots
	}
}

// SentinelAddrs returns the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		addrs[i] = p.addr()
	}
	return addrs
}

// FailoverOptions returns options for redis.NewFailoverClient on this set.
func (s *SentinelSet) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs()}
}

// Client returns a failover client on the set, closed in t.Cleanup.
func (s *SentinelSet) Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Primary returns the server the sentinels currently name as primary.
func (s *SentinelSet) Primary(t testing.TB) *Server {
	t.Helper()
	addr, err := s.primaryAddr(context.Background(), s.sentinels[0])
	if err != nil {
		t.Fatalf("asking sentinel for the primary: %v", err)
	}
	for _, srv := range s.servers {
		if srv.Addr() == addr {
			return srv
		}
	}
	t.Fatalf("sentinel names %s as primary, which is none of ours", addr)
	return nil
}

// Replica returns the server that is not the primary.
func (s *SentinelSet) Replica(t testing.TB) *Server {
	t.Helper()
	if p := s.Primary(t); p == s.servers[0] {
		return s.servers[1]
	}
	return s.servers[0]
}

func (s *SentinelSet) primaryAddr(ctx context.Context, p *sentinelProcess) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr()})
	defer sc.Close()
	hostPort, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hostPort) != 2 {
		return "", fmt.Errorf("unexpected reply %q", hostPort)
	}
	return net.JoinHostPort(hostPort[0], hostPort[1]), nil
}

// WaitHealthy waits (up to 30s) until every sentinel names the same live
// primary, that primary has the other server as an online replica, and
// every sentinel sees the primary and the replica up, and the two other
// sentinels: the state in which a failover can happen.
func (s *SentinelSet) WaitHealthy(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var problem string
	for time.Now().Before(deadline) {
		if problem = s.health(context.Background()); problem == "" {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	t.Fatalf("the sentinel set did not become healthy within 30s: %s", problem)
}

func (s *SentinelSet) health(ctx context.Context) string {
	var primary string
	for _, p := range s.sentinels {
		addr, err := s.primaryAddr(ctx, p)
		switch {
		case err != nil:
			return fmt.Sprintf("sentinel %s: %v", p.addr(), err)
		case primary == "":
			primary = addr
		case addr != primary:
			return fmt.Sprintf("sentinels disagree on the primary: %s and %s", primary, addr)
		}
	}
	var replica string
	for _, srv := range s.servers {
		if srv.cmd == nil {
			return srv.Addr() + " is not running"
		}
		if srv.Addr() != primary {
			replica = srv.Addr()
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: primary})
	info, err := rdb.Info(ctx, "replication").Result()
	_ = rdb.Close()
	_, replicaPort, _ := net.SplitHostPort(replica)
	switch {
	case err != nil:
		return fmt.Sprintf("primary %s: %v", primary, err)
	case !strings.Contains(info, "role:master"):
		return primary + " is named primary but is not one yet"
	case !strings.Contains(info, "port="+replicaPort+",state=online"):
		return "the replica " + replica + " is not online on " + primary
	}
	for _, p := range s.sentinels {
		if problem := sentinelView(ctx, p, replica); problem != "" {
			return fmt.Sprintf("sentinel %s: %s", p.addr(), problem)
		}
	}
	return ""
}

// sentinelView returns "" when the sentinel sees the primary up, the
// replica up, and two other sentinels; otherwise what it misses.
func sentinelView(ctx context.Context, p *sentinelProcess, replica string) string {
	sc := redis.NewSentinelClient(&redis.Options{Addr: p.addr()})
	defer sc.Close()
	master, err := sc.Master(ctx, MasterName).Result()
	if err != nil {
		return err.Error()
	}
	if master["flags"] != "master" {
		return "primary flags " + master["flags"]
	}
	others, err := sc.Sentinels(ctx, MasterName).Result()
	if err != nil {
		return err.Error()
	}
	if len(others) != 2 {
		return fmt.Sprintf("knows %d other sentinels", len(others))
	}
	replicas, err := sc.Replicas(ctx, MasterName).Result()
	if err != nil {
		return err.Error()
	}
	for _, r := range replicas {
		if r["name"] == replica {
			// Not master-link-status: the sentinel refreshes it only every
			// 10s, and during a failover every second, before it picks the
			// replica to promote.
			if r["flags"] != "slave" {
				return fmt.Sprintf("replica %s flags %q", replica, r["flags"])
			}
			return ""
		}
	}
	return "does not know the replica " + replica
}

// WaitPromotion waits (up to 60s) until every sentinel names a primary other
// than old and that server has taken the role.
func (s *SentinelSet) WaitPromotion(t testing.TB, old *Server) *Server {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		promoted := ""
		for _, p := range s.sentinels {
			addr, err := s.primaryAddr(ctx, p)
			if err != nil || addr == old.Addr() || (promoted != "" && addr != promoted) {
				promoted = ""
				break
			}
			promoted = addr
		}
		if promoted != "" {
			rdb := redis.NewClient(&redis.Options{Addr: promoted})
			role, err := rdb.Do(ctx, "ROLE").Slice()
			_ = rdb.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				for _, srv := range s.servers {
					if srv.Addr() == promoted {
						return srv
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	t.Fatalf("no replica was promoted within 1m after %s went down", old.Addr())
	return nil
}

// Rejoin restarts the stopped server old, empty, as a replica of the
// current primary, and waits until the set is healthy again.
func (s *SentinelSet) Rejoin(t testing.TB, old *Server) {
	t.Helper()
	primary := s.Primary(t)
	if primary == old {
		t.Fatalf("%s is still the primary", old.Addr())
	}
	i := 0
	if old == s.servers[1] {
		i = 1
	}
	old.Kill()
	old.extra = append(s.serverArgs(i), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	if err := old.start(); err != nil {
		t.Fatalf("restarting %s as a replica: %v", old.Addr(), err)
	}
	s.WaitHealthy(t)
}
