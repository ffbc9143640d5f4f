package client_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
)

// Every report adds up (Submitted = Queued + Waiting + Running + Done +
// Failed + Skipped), finished tasks never un-finish, and the last report
// is the final state.
func TestGroupProgressIsConsistent(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	const tasks = 40
	var mu sync.Mutex
	var reports []client.Progress
	g := newGroup(t, c, ctx(t), "db", client.WithErrorPolicy(client.ContinueOnError(0)), client.WithMaxInFlight(4),
		client.WithProgress(func(p client.Progress) {
			mu.Lock()
			reports = append(reports, p)
			mu.Unlock()
		}))
	// Read the counts while they change, too.
	polled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			checkProgress(t, g.Progress())
			runtime.Gosched()
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	for i := range tasks {
		g.Go(func(context.Context) error {
			if i%5 == 0 {
				return errors.New("fails")
			}
			return nil
		})
	}
	if err := g.Wait(); err == nil {
		t.Fatal("Wait returned nil; 8 tasks failed")
	}
	close(done)
	<-polled

	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 {
		t.Fatal("no progress reported")
	}
	prev := client.Progress{}
	for _, p := range reports {
		checkProgress(t, p)
		if p.Submitted < prev.Submitted || p.Done < prev.Done || p.Failed < prev.Failed || p.Skipped < prev.Skipped {
			t.Fatalf("progress went back: %+v after %+v", p, prev)
		}
		prev = p
	}
	want := client.Progress{Submitted: tasks, Done: 32, Failed: 8}
	if last := reports[len(reports)-1]; last != want {
		t.Fatalf("last report %+v; want %+v", last, want)
	}
	if p := g.Progress(); p != want {
		t.Fatalf("Progress() = %+v; want %+v", p, want)
	}
}
