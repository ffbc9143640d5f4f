package server

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/internal/etcdtest"
	"github.com/tollgate/tollgate/internal/testwait"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// blackhole is a TCP proxy to etcd that can stop forwarding: bytes are
// then read and dropped both ways, as on a link that lost its route.
type blackhole struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	holed  bool
}

func newBlackhole(t *testing.T, target string) *blackhole {
	b := &blackhole{lis: listen(t), target: target}
	t.Cleanup(func() { b.lis.Close() })
	go func() {
		for {
			c, err := b.lis.Accept()
			if err != nil {
				return
			}
			go b.serve(t, c)
		}
	}()
	return b
}

func (b *blackhole) serve(t *testing.T, c net.Conn) {
	defer c.Close()
	u, err := net.Dial("tcp", b.target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { b.copy(u, c); done <- struct{}{} }()
	go func() { b.copy(c, u); done <- struct{}{} }()
	<-done
}

// copy forwards src to dst until src ends, dropping what it reads while
// the hole is open.
func (b *blackhole) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.isHoled() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) isHoled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holed
}

func (b *blackhole) hole() {
	b.mu.Lock()
	b.holed = true
	b.mu.Unlock()
}

// A leader cut off from etcd by a silent partition stops leading (its
// deadline) before the other server can lead (etcd expires its session):
// never do both lead at once.
func TestClusterPartitionedLeaderStopsFirst(t *testing.T) {
	etcd := etcdtest.Start(t)
	fc := fakeclock.New(testStart)
	hole := newBlackhole(t, etcd.Endpoint()[len("http://"):])
	seed := []limiter.PoolConfig{{Name: "db", ConcurrencyLimit: 4}}
	start := func(endpoint string) *member {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), DialOptions: election.DialOptions(clusterTTL)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		lis := listen(t)
		srv, err := OpenCluster(Config{Clock: fc, ShutdownTimeout: 2 * time.Second, Advertise: lis.Addr().String()},
			ClusterConfig{Client: c, SessionTTL: clusterTTL}, seed)
		if err != nil {
			t.Fatal(err)
		}
		return &member{env: serveEnv(t, srv, fc, lis), etcd: c}
	}
	a := start("http://" + hole.lis.Addr().String())
	leader(t, []*member{a}) // a leads before b campaigns
	b := start(etcd.Endpoint())
	testwait.For(t, "b sees a lead", func() bool { return b.srv.leadership.Cluster().Leader == a.addr })

	cut := time.Now()
	hole.hole()
	limit := time.After(waitLimit)
	for {
		ch := b.srv.campaign.Election().Changed()
		if b.srv.campaign.Election().Leading() {
			break
		}
		select {
		case <-ch:
		case <-limit:
			t.Fatal("b did not take over")
		}
	}
	if a.srv.campaign.Election().Leading() || a.srv.leadership.Leading() {
		t.Fatal("two servers lead: the partitioned leader outlived its session")
	}
	t.Logf("take-over after a silent partition of the leader from etcd: %v", time.Since(cut))
	testwait.For(t, "b's term starts", b.srv.leadership.Leading)
	_, err := a.lim.Acquire(a.ctx(), &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true})
	wantStatus(t, err, codes.Unavailable, apierr.ReasonNotLeader)
	b.acquire(&tollgatev1.AcquireRequest{Pool: "db", Weight: i64(1), NoWait: true})
}
