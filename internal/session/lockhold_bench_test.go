//go:build lockhold

package session

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// BenchmarkLockHoldPerGrant measures how long a pool's lock is held per
// acquire that waited, on a Session stream: each round queues an acquire
// behind the one lease of a pool of one permit, releases that lease (which
// grants the waiter) and reads the grant. lock-ns/grant is the median over
// the rounds of the time under any pool's lock in the round, with every
// lock taken on the way (the acquire's, the release's, the wait's): the
// median, as a holder preempted by the OS on a busy machine counts the time
// it was off the CPU; lock-ns/grant-mean is the mean. locks/grant counts
// the locks.
// Run it with the lockhold tag: go test -tags lockhold -run '^$' -bench
// LockHold ./internal/session/
func BenchmarkLockHoldPerGrant(b *testing.B) {
	env := newStreamEnv(b, nil, limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1, MaxWaiters: 10})
	env.send(acquireReq(1, "db"))
	held := env.next(b).GetAcquire().GetLease().GetId()
	if held == "" {
		b.Fatal("no first grant")
	}
	b.ReportAllocs()
	holds0, held0 := limiter.LockHeld()
	rounds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		_, before := limiter.LockHeld()
		id := 2 + 2*uint64(i)
		env.send(acquireReq(id, "db"))
		env.send(releaseReq(id+1, "db", held))
		held = ""
		for range 2 {
			r := env.next(b)
			if e := r.GetError(); e != nil {
				b.Fatalf("request %d: %v", r.GetRequestId(), e)
			}
			if l := r.GetAcquire().GetLease(); l != nil {
				held = l.GetId()
			}
		}
		if held == "" {
			b.Fatal("the waiter was not granted")
		}
		_, after := limiter.LockHeld()
		rounds = append(rounds, after-before)
	}
	b.StopTimer()
	holds1, held1 := limiter.LockHeld()
	slices.Sort(rounds)
	b.ReportMetric(float64(rounds[len(rounds)/2]), "lock-ns/grant")
	b.ReportMetric(float64(held1-held0)/float64(b.N), "lock-ns/grant-mean")
	b.ReportMetric(float64(holds1-holds0)/float64(b.N), "locks/grant")
}
