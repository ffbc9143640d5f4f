package election

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/testwait"
)

// counted is an etcd client that counts the requests it sends: unary
// calls and streams opened (a KeepAliveOnce opens a stream).
type counted struct {
	*clientv3.Client
	n atomic.Int64

	mu      sync.Mutex
	methods map[string]int
}

func (cc *counted) add(method string) {
	cc.n.Add(1)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.methods[method]++
}

func (cc *counted) byMethod() map[string]int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return maps.Clone(cc.methods)
}

func newCountedClient(t *testing.T, ep string) *counted {
	t.Helper()
	cc := &counted{methods: map[string]int{}}
	unary := func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		cc.add(method)
		return invoke(ctx, method, req, reply, conn, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cc.add(method)
		return streamer(ctx, desc, conn, method, opts...)
	}
	opts := append(DialOptions(testTTL), grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc.Client = c
	return cc
}

// settled reports whether every shard is led by exactly one of es, its
// desired owner, and no key but the leader's is queued. It moves each
// shard that has a successor (as a campaign does, without a term).
func settled(t *testing.T, es []*Election) bool {
	n := es[0].Shards()
	for _, e := range es {
		for i := range n {
			if _, ok := e.Successor(i); ok {
				if err := e.Release(context.Background(), e.ShardTenure(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i := range n {
		leaders := 0
		for _, e := range es {
			if e.ShardTenure(i) != nil {
				leaders++
				if v := e.View().Shards[i]; v.Desired != e.cfg.Advertise {
					return false
				}
			}
		}
		if leaders != 1 {
			return false
		}
	}
	for _, e := range es {
		e.mu.Lock()
		for i := range e.shard {
			if len(e.shard[i].queue) != 1 {
				e.mu.Unlock()
				return false
			}
		}
		e.mu.Unlock()
	}
	return true
}

// At steady state a server sends a keep-alive and one read per third of
// the TTL, whatever the number of shards: 256 shards on three servers
// cost no more requests than one.
func TestShardsCostAKeepAliveAndAReadPerServer(t *testing.T) {
	etcd := etcdtest.Start(t)
	const shards = 256
	var es []*Election
	var cs []*counted
	for i := range 3 {
		c := newCountedClient(t, etcd.Endpoint())
		cs = append(cs, c)
		es = append(es, start(t, Config{Client: c.Client, Advertise: fmt.Sprintf("10.0.0.%d:7070", i+1), Shards: shards}))
	}
	waitForAny(t, es, "the shards shared, each led by its desired owner", func() bool { return settled(t, es) })
	for _, e := range es {
		n := 0
		for i := range shards {
			if e.ShardTenure(i) != nil {
				n++
			}
		}
		if n > (shards+2)/3 {
			t.Fatalf("%s leads %d shards, above ceil(256/3)", e.cfg.Advertise, n)
		}
	}
	// The responses of the moves' watch events may still be coming: a key
	// put after them marks their end, and the count starts once every
	// server has taken it.
	mark, err := cs[0].Put(context.Background(), prefix+"shards/mark", "")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "every server to have taken the moves' watch responses", func() bool {
		for _, e := range es {
			if e.watched.Load() < mark.Header.Revision {
				return false
			}
		}
		return true
	})
	before := make([]int64, len(cs))
	methods := make([]map[string]int, len(cs))
	for i, c := range cs {
		before[i] = c.n.Load()
		methods[i] = c.byMethod()
	}
	began := time.Now()
	time.Sleep(2 * testTTL) // a window to count in: no assertion depends on its length
	window := time.Since(began)
	total := int64(0)
	ticks := int64(window/(testTTL/3)) + 1
	for i, c := range cs {
		sent := c.n.Load() - before[i]
		total += sent
		if sent > 2*ticks+2 {
			now := c.byMethod()
			for m, n := range methods[i] {
				now[m] -= n
			}
			t.Errorf("%s sent %d requests in %v (%v); a keep-alive and a read per %v is at most %d", es[i].cfg.Advertise, sent, window, now, testTTL/3, 2*ticks)
		}
	}
	t.Logf("256 shards, 3 servers, TTL %v: %d etcd requests in %v, %.2f per second (%.2f per server)", testTTL, total, window.Round(time.Millisecond),
		float64(total)/window.Seconds(), float64(total)/window.Seconds()/3)
}
