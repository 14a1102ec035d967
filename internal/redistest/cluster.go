package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three primaries and three replicas, each a
// redis-server on its own free 127.0.0.1 port, joined with
// redis-cli --cluster create. Every node keeps its files (nodes.conf, any
// RDB a replica receives) in a temporary directory of the test.
type Cluster struct {
	// Nodes are the six servers, in the order given to redis-cli: the first
	// three start as primaries, the last three as their replicas.
	Nodes []*Server
}

// StartCluster starts the six nodes, creates the cluster and waits until
// every node reports cluster_state:ok and agrees on the owner of every slot.
// The nodes are stopped in t.Cleanup. It skips (or fails, with
// REDISLOCK_REQUIRE_REDIS set) when redis-server or redis-cli is missing.
// extra goes to every node's redis-server after the defaults, which it
// overrides (the last of a setting wins): "--cluster-node-timeout", "1000"
// has a dead primary's replica promoted about twice as fast as the 2000 ms
// default.
func StartCluster(t testing.TB, extra ...string) *Cluster {
	t.Helper()
	cli := Binary(t, "redis-cli")
	c := &Cluster{}
	for range 6 {
		dir := t.TempDir()
		c.Nodes = append(c.Nodes, Start(t, append([]string{
			"--dir", dir,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		}, extra...)...))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(t)
	return c
}

// WaitHealthy waits (up to 30s) until every node reports cluster_state:ok,
// all nodes agree on the owner of every slot, and every replica's link to
// its primary is up.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	var problem string
	for time.Now().Before(deadline) {
		problem = c.health(ctx)
		if problem == "" {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	t.Fatalf("the cluster did not become healthy within 30s: %s", problem)
}

// health returns "" when the cluster is healthy, or what is wrong.
func (c *Cluster) health(ctx context.Context) string {
	var first string
	for _, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr()})
		info, err := rdb.ClusterInfo(ctx).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = rdb.ClusterSlots(ctx).Result()
		}
		var repl string
		if err == nil {
			repl, err = rdb.Info(ctx, "replication").Result()
		}
		_ = rdb.Close()
		switch {
		case err != nil:
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		case !strings.Contains(info, "cluster_state:ok"):
			return n.Addr() + " is not in cluster_state:ok"
		case strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up"):
			return n.Addr() + " is a replica whose link is not up"
		}
		view := slotOwners(slots)
		if first == "" {
			first = view
		} else if view != first {
			return fmt.Sprintf("%s sees slots %s, another node %s", n.Addr(), view, first)
		}
	}
	return ""
}

// slotOwners describes a CLUSTER SLOTS reply as "start-end:primary ..." in
// slot order, so that two nodes' views can be compared.
func slotOwners(slots []redis.ClusterSlot) string {
	parts := make([]string, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%05d-%05d:%s", s.Start, s.End, s.Nodes[0].Addr))
	}
	// CLUSTER SLOTS is not sorted by slot.
	for i := 1; i < len(parts); i++ {
		for j := i; j > 0 && parts[j] < parts[j-1]; j-- {
			parts[j], parts[j-1] = parts[j-1], parts[j]
		}
	}
	return strings.Join(parts, " ")
}

// Addrs returns the addresses of all six nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a go-redis cluster client on the cluster, closed in
// t.Cleanup. It follows MOVED and ASK redirections by itself.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// ClusterNode is one node as CLUSTER NODES describes it.
type ClusterNode struct {
	ID      string
	Addr    string // host:port
	Primary bool
	Of      string   // a replica's primary (its ID); "-" for a primary
	Slots   [][2]int // owned slot ranges, inclusive; primaries only
	Failed  bool     // flagged fail by the node asked (not merely suspected: fail?)
}

// Topology returns the cluster as the first node that answers sees it.
func (c *Cluster) Topology(t testing.TB) []ClusterNode {
	t.Helper()
	var out string
	var err error
	for _, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialerRetries: 1})
		out, err = rdb.ClusterNodes(context.Background()).Result()
		_ = rdb.Close()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	var nodes []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
		fields := strings.Fields(line)
		if len(fields) < 8 {
			t.Fatalf("unexpected CLUSTER NODES line %q", line)
		}
		node := ClusterNode{
			ID:      fields[0],
			Addr:    strings.SplitN(fields[1], "@", 2)[0],
			Primary: strings.Contains(fields[2], "master"),
			Of:      fields[3],
			Failed:  slices.Contains(strings.Split(fields[2], ","), "fail"),
		}
		for _, slot := range fields[8:] {
			if strings.HasPrefix(slot, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, found := strings.Cut(slot, "-")
			if !found {
				hi = lo
			}
			start, err1 := strconv.Atoi(lo)
			end, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				t.Fatalf("unexpected slot range %q in %q", slot, line)
			}
			node.Slots = append(node.Slots, [2]int{start, end})
		}
		nodes = append(nodes, node)
	}
	return nodes
}

// Server returns the node listening on addr (nil when none is).
func (c *Cluster) Server(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Primaries returns the primaries that own slots and are not flagged
// fail, each with its slots. (A node just made a replica may still be
// listed as a primary, without slots, until the news reaches the node
// asked; a dead one is flagged fail.)
func (c *Cluster) Primaries(t testing.TB) []ClusterNode {
	t.Helper()
	var primaries []ClusterNode
	for _, n := range c.Topology(t) {
		if n.Primary && !n.Failed && len(n.Slots) > 0 {
			primaries = append(primaries, n)
		}
	}
	return primaries
}

// Owner returns the primary that owns slot.
func (c *Cluster) Owner(t testing.TB, slot int) ClusterNode {
	t.Helper()
	for _, n := range c.Primaries(t) {
		if n.Owns(slot) {
			return n
		}
	}
	t.Fatalf("no primary owns slot %d", slot)
	return ClusterNode{}
}

// Owns reports whether the node owns slot.
func (n ClusterNode) Owns(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}
