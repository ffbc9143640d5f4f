package client_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// BenchmarkRevokeToDone measures how long after an operator's RevokeLease
// call starts the holder's Lease.Done() closes, over loopback: the admin
// call, the engine's revocation, the LeaseEvent on the holder's Session
// stream and the client ending the lease. The target is 100 ms;
// p50-ns and p99-ns are reported beside the mean.
func BenchmarkRevokeToDone(b *testing.B) {
	ts := newTestServer(b)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	adm := tollgatev1.NewAdminServiceClient(c.Conn())
	ctx := b.Context()
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l, err := c.Acquire(ctx, "db", client.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := adm.RevokeLease(ctx, &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: l.ID()}); err != nil {
			b.Fatal(err)
		}
		<-l.Done()
		lats = append(lats, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2]), "p50-ns")
	b.ReportMetric(float64(lats[len(lats)*99/100]), "p99-ns")
}
