package redislock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// One node's failure stays on that node. On a Cluster, what the library
// sends for many locks at once (the watchdog's extensions, the give-backs
// of Close and the janitor) goes out as one round trip per node, each
// node's replies handled as they arrive: one go-redis pipeline across the
// Cluster returns only once its slowest node's part has given up, and with
// a dead primary that was after the locks on the other primaries had run
// out (issue 36).

// nodeOf names the primary of key's slot as the cluster client's map has it
// ("" when it has none, and for any other client). The batcher's lanes, the
// watchdog's rounds and eachNode split by it.
func nodeOf(ctx context.Context, c *redis.ClusterClient, key string) string {
	if c != nil {
		if node, err := c.MasterForKey(ctx, key); err == nil {
			return node.Options().Addr
		}
	}
	return ""
}

// node names the node of key's slot on a Cluster (see nodeOf).
func (s singleStore) node(key string) string {
	c, _ := s.rdb.(*redis.ClusterClient)
	return nodeOf(context.Background(), c, key)
}

// eachNode runs send for each node's part of refs at once, and returns
// when all have: the replies and errors in refs' order.
func (s singleStore) eachNode(refs []*lockRef, send func(refs []*lockRef) ([]int64, []error)) ([]int64, []error) {
	groups := map[string][]int{}
	for i, ref := range refs {
		node := s.node(ref.key)
		groups[node] = append(groups[node], i)
	}
	if len(groups) < 2 {
		return send(refs)
	}
	replies, errs := make([]int64, len(refs)), make([]error, len(refs))
	var wg sync.WaitGroup
	for _, at := range groups {
		wg.Go(func() {
			part := make([]*lockRef, len(at))
			for j, i := range at {
				part[j] = refs[i]
			}
			r, e := send(part)
			for j, i := range at {
				replies[i], errs[i] = r[j], e[j]
			}
		})
	}
	wg.Wait()
	return replies, errs
}
