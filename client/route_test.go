package client

import (
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/connectivity"
)

// TestLinksAreBounded routes 100 shards to 100 servers: links stop at
// maxLinks, and a link no shard routes to any more is retired and its
// connection closed.
func TestLinksAreBounded(t *testing.T) {
	c, err := Dial("127.0.0.1:1") // never connects: only routes
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 100
	r := &routes{count: n, shards: make([]atomic.Pointer[route], n)}
	c.routes.Store(r)
	c.mu.Lock()
	routed := 0
	for i := range n {
		if c.setRouteLocked(r, i, "127.0.0.1:"+strconv.Itoa(10000+i), 1, false) {
			routed++
		}
	}
	links := len(c.links)
	first := r.shards[0].Load().ln
	// Shard 0 moves to the server of shard 1 (a higher epoch).
	moved := c.setRouteLocked(r, 0, "127.0.0.1:10001", 2, false)
	after := len(c.links)
	// A planned move's target (epoch 0) is taken, keeping the epoch; an
	// older epoch is not.
	target := c.setRouteLocked(r, 1, "127.0.0.1:10002", 0, false)
	targetEpoch := r.shards[1].Load().epoch
	c.setRouteLocked(r, 2, "127.0.0.1:10002", 5, false)
	older := c.setRouteLocked(r, 2, "127.0.0.1:10003", 3, false)
	olderAddr := r.shards[2].Load().addr
	c.mu.Unlock()
	if routed != maxLinks || links != maxLinks {
		t.Errorf("%d shards routed, %d links; want %d of each", routed, links, maxLinks)
	}
	if !moved || after != maxLinks-1 {
		t.Errorf("moved %v, %d links after the move; want true, %d", moved, after, maxLinks-1)
	}
	if s := first.conn.GetState(); s != connectivity.Shutdown {
		t.Errorf("the retired link's connection is %v, want SHUTDOWN", s)
	}
	if !target || targetEpoch != 1 {
		t.Errorf("a move's target: taken %v, epoch %d; want true, 1", target, targetEpoch)
	}
	if older || olderAddr != "127.0.0.1:10002" {
		t.Errorf("an older epoch: taken %v, route %s; want false, 127.0.0.1:10002", older, olderAddr)
	}
}
