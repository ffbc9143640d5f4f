package server

import (
	"context"
	"fmt"
	"net"
	stdhttp "net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/limits"
	"github.com/tollgate/tollgate/internal/metrics"
	"github.com/tollgate/tollgate/internal/session"

	"github.com/tollgate/tollgate/internal/pagetoken"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/server/store"
)

// manyPools is the number of pools of BenchmarkManyPools, and of
// TestManyPoolsRestoreAndList with TOLLGATE_MANY_POOLS=1 (under -race it
// takes about a minute, so go test ./... checks testedPools instead).
const (
	manyPools   = 100_000
	testedPools = 10_000
)

func manyPoolName(i int) string { return fmt.Sprintf("pool-%06d", i) }

// TestManyPoolsRestoreAndList: a data directory of 100,000 pools (written
// through the store, in one transaction) restores at start-up without a
// write; the engine lists them all a page at a time, in name order; the
// API's pages (ListPools, GetStats) start and continue anywhere; and the
// pools serve. Without TOLLGATE_MANY_POOLS=1 it checks 10,000 pools.
func TestManyPoolsRestoreAndList(t *testing.T) {
	n := testedPools
	if os.Getenv("TOLLGATE_MANY_POOLS") != "" {
		n = manyPools
	}
	name := manyPoolName
	d := newDurableEnv(t)
	st, err := store.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	seed := make([]limiter.SavedPool, n)
	for i := range seed {
		if seed[i], err = limiter.NewSavedPool(limiter.PoolConfig{Name: name(i), ConcurrencyLimit: 4}, testStart); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.LoadOrSeed(seed); err != nil {
		t.Fatal(err)
	}
	st.Close()

	d.start(nil)
	if c := d.srv.store.(*store.Store).Commits(); c != 0 {
		t.Fatalf("restoring %d pools made %d transactions, want none", n, c)
	}
	listed, after := 0, ""
	for {
		infos, more := d.srv.Engine().ListPools(after, MaxPageSize)
		for i, info := range infos {
			if info.Config.Name != name(listed+i) {
				t.Fatalf("listed %q at %d, want %q", info.Config.Name, listed+i, name(listed+i))
			}
		}
		listed += len(infos)
		if !more {
			break
		}
		after = infos[len(infos)-1].Config.Name
	}
	if listed != n {
		t.Fatalf("listed %d pools, want %d", listed, n)
	}
	for _, from := range []int{-1, n / 2, n - 11} {
		token := ""
		if from >= 0 {
			token = pagetoken.Encode(name(from))
		}
		const page = 100
		want := min(page, n-from-1)
		pools, err := d.adm.ListPools(d.ctx(), &tollgatev1.ListPoolsRequest{PageSize: page, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		stats, err := d.adm.GetStats(d.ctx(), &tollgatev1.GetStatsRequest{PageSize: page, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(pools.GetPools()) != want || pools.GetPools()[0].GetName() != name(from+1) || len(stats.GetStats()) != want ||
			(pools.GetNextPageToken() == "") != (from+1+want == n) {
			t.Fatalf("the page after pool %d: %d pools from %q, %d statistics, next page %q; want %d from %q",
				from, len(pools.GetPools()), pools.GetPools()[0].GetName(), len(stats.GetStats()), pools.GetNextPageToken(), want, name(from+1))
		}
	}
	resp, err := d.lim.Acquire(d.ctx(), &tollgatev1.AcquireRequest{Pool: name(n - 1)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetLease().GetFencingToken() == 0 {
		t.Fatalf("a grant in the last pool: %v", resp)
	}
}

// BenchmarkManyPools measures, with manyPools pools in a data directory on
// disk, the start-up (Open restores them) and what each listing costs:
// its time, the bytes of its answer and the memory it allocates. It also
// reports the live heap per restored (idle) pool. Run it once: -benchtime
// 1x.
func BenchmarkManyPools(b *testing.B) {
	const n = manyPools
	dir := b.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	seed := make([]limiter.SavedPool, n)
	for i := range seed {
		if seed[i], err = limiter.NewSavedPool(limiter.PoolConfig{Name: manyPoolName(i), ConcurrencyLimit: 4}, testStart); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := st.LoadOrSeed(seed); err != nil {
		b.Fatal(err)
	}
	st.Close()

	for b.Loop() {
		heap0, rss0 := memNow()
		start := time.Now()
		srv, err := Open(Config{Limits: limits.Limits{ClientRate: -1}}, dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-restore")
		heap1, rss1 := memNow()
		b.ReportMetric((float64(heap1)-float64(heap0))/n, "B/idle-pool")
		b.ReportMetric((float64(rss1)-float64(rss0))/n, "RSS-B/idle-pool")

		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis) }()
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		adm := tollgatev1.NewAdminServiceClient(conn)
		http := srv.HTTPHandler()
		all := promhttp.HandlerFor(metrics.New(metricsSource{srv}, session.KindNames[:], -1).Registry(), promhttp.HandlerOpts{})
		get := func(h stdhttp.Handler, path string) int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(stdhttp.MethodGet, path, nil))
			if w.Code != stdhttp.StatusOK {
				b.Fatalf("GET %s: %d %s", path, w.Code, w.Body.String())
			}
			return w.Body.Len()
		}
		middle := pagetoken.Encode(manyPoolName(n / 2))
		for _, l := range []struct {
			name string
			call func() int
		}{
			{"metrics", func() int { return get(http, "/metrics") }},
			{"metrics-all", func() int { return get(all, "/metrics") }},
			{"api-pools", func() int { return get(http, "/api/pools?after="+manyPoolName(n/2)) }},
			{"api-pools-10k", func() int { return get(http, "/api/pools?limit=10000&after="+manyPoolName(n/2)) }},
			{"ListPools-1k", func() int {
				r, err := adm.ListPools(ctx, &tollgatev1.ListPoolsRequest{PageSize: MaxPageSize, PageToken: middle})
				if err != nil {
					b.Fatal(err)
				}
				return proto.Size(r)
			}},
			{"GetStats-1k", func() int {
				r, err := adm.GetStats(ctx, &tollgatev1.GetStatsRequest{PageSize: MaxPageSize, PageToken: middle})
				if err != nil {
					b.Fatal(err)
				}
				return proto.Size(r)
			}},
		} {
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			start := time.Now()
			size := l.call()
			took := time.Since(start)
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(took.Microseconds())/1000, "ms-"+l.name)
			b.ReportMetric(float64(size)/1024, "KB-"+l.name)
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20), "allocMB-"+l.name)
		}
		conn.Close()
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}
