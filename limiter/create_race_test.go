package limiter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// CreatePool's answer is read before the pool can be locked by anyone
// else: an acquire of a pool that has just appeared does not race with it
// (go test -race).
func TestCreatePoolRacesNoAcquire(t *testing.T) {
	te := newTestEngine(t)
	var next atomic.Int64 // the pool the acquirer tries
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("p%d", next.Load())
			if l, err := te.Acquire(context.Background(), AcquireRequest{Pool: name, Weight: 1, NoWait: true}); err == nil {
				_, _ = te.Release(name, l.FencingToken)
			}
		}
	}()
	for i := range 300 {
		next.Store(int64(i))
		te.mustCreate(t, PoolConfig{Name: fmt.Sprintf("p%d", i), ConcurrencyLimit: 1})
	}
	close(stop)
	<-done
}
