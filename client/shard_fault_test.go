package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// renewedAt waits until front f has served a renew of l's pool or l has
// ended, and fails the test if l ended.
func renewedAt(t *testing.T, f *shardFront, l *client.Lease) {
	t.Helper()
	waitFor(t, "a renew at the shard's new owner", func() bool { return f.count("renew", l.Pool()) > 0 || l.Err() != nil })
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost while its shard moved away from a server that does not answer: %v", err)
	}
}

// A frozen server (SIGSTOP) that is the dialed target and the owner of a
// lease's shard: the map read after its renew goes unanswered asks the
// other servers too, and the lease is renewed at the shard's new owner
// before its local deadline.
func TestShardOwnerFrozenLeaseRenewsAtTheNewOwner(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 3, 8)
	pools := shardPools(t, m, fronts)
	for _, p := range pools[:2] {
		ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 4})
	}
	c := dialTarget(t, fronts[0].addr)
	warm, err := c.Acquire(ctx(t), pools[1]) // a live stream to the future owner
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.ReleaseAsync()
	l, err := c.Acquire(ctx(t), pools[0], client.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fronts[0].frozen.Store(true)
	m.move(shard.Of(pools[0], m.count), fronts[1].addr, true)
	renewedAt(t, fronts[1], l)
}

// A dead server (kill -9) keeps other shards in the map; the lease of a
// shard that moved to another server is renewed there at once, not at
// its next renew period.
func TestShardMovedFromDeadOwnerRenewsAtOnce(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 3, 8)
	pools := shardPools(t, m, fronts)
	for _, p := range pools[:2] {
		ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 4})
	}
	c := dialTarget(t, fronts[0].addr, fronts[1].addr, fronts[2].addr)
	warm, err := c.Acquire(ctx(t), pools[1])
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.ReleaseAsync()
	const ttl = time.Minute // the next renew is 20s away
	l, err := c.Acquire(ctx(t), pools[0], client.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	m.move(shard.Of(pools[0], m.count), fronts[1].addr, true)
	start := time.Now()
	fronts[0].stop()
	renewedAt(t, fronts[1], l)
	if d := time.Since(start); d >= ttl/3 {
		t.Errorf("renewed at the new owner after %v: at the next period, not when the move was learned", d)
	}
}

// A provider registers at the owner of its pool's shard: a server that
// ends the Provide stream at once with NOT_LEADER (its Send then fails
// with io.EOF) is followed to the owner it names.
func TestShardProviderFollowsNotLeader(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 2, 4)
	pools := shardPools(t, m, fronts)
	p := pools[1]
	ts.pool(limiter.PoolConfig{Name: p, ResourceKind: limiter.ResourcePassive})
	m.mu.Lock()
	m.providePool = p
	m.mu.Unlock()
	c := dialTarget(t, fronts[0].addr)
	prov, err := c.NewProvider(ctx(t), p, "worker-1", client.WithResources(client.Resource{ID: "slot-1"}))
	if err != nil {
		t.Fatalf("NewProvider through a server that does not lead the pool's shard: %v", err)
	}
	defer func() { _ = prov.Close() }()
	if n := fronts[1].count("provide", p); n != 1 {
		t.Errorf("the owner served %d registrations, want 1", n)
	}
	if err := prov.Offer(ctx(t), client.Resource{ID: "slot-2"}); err != nil {
		t.Fatal(err)
	}
}

// The dialed server, cut off from etcd, still answers the map it knew
// (naming itself) and no longer leads; another server knows the shard's
// new owner, with a higher epoch: the map read asks both, and that
// owner wins.
func TestShardMapReadTakesTheHighestEpoch(t *testing.T) {
	ts := newTestServer(t)
	m, fronts := newShardCluster(t, ts, 2, 4)
	pools := shardPools(t, m, fronts)
	for _, p := range pools {
		ts.pool(limiter.PoolConfig{Name: p, ConcurrencyLimit: 4})
	}
	c := dialTarget(t, fronts[0].addr)
	warm, err := c.Acquire(ctx(t), pools[1]) // a live stream to the other server
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.ReleaseAsync()
	cut := fronts[0]
	cut.stale.Store(m.cluster(cut.addr))
	m.mu.Lock()
	m.hint = func(self, pool string) (string, int64, bool) {
		return "", 0, self == cut.addr // it knows no leader any more
	}
	m.mu.Unlock()
	m.move(shard.Of(pools[0], m.count), fronts[1].addr, true)

	actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Acquire(actx, pools[0])
	if err != nil {
		t.Fatalf("acquire while the dialed server answers a stale map: %v", err)
	}
	_ = l.ReleaseAsync()
	if n := fronts[1].count("acquire", pools[0]); n != 1 {
		t.Errorf("the new owner served %d acquires, want 1", n)
	}
}
