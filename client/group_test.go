package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// concurrency counts the calls running at once and remembers the most.
type concurrency struct {
	cur, most atomic.Int64
}

func (c *concurrency) enter() int64 {
	n := c.cur.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			return n
		}
	}
}

func (c *concurrency) leave() { c.cur.Add(-1) }

// recv receives from ch, failing the test after waitLimit.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// checkProgress fails unless p's counts add up.
func checkProgress(t *testing.T, p client.Progress) {
	t.Helper()
	if p.Queued < 0 || p.Waiting < 0 || p.Running < 0 ||
		p.Queued+p.Waiting+p.Running+p.Done+p.Failed+p.Skipped != p.Submitted {
		t.Errorf("inconsistent progress %+v", p)
	}
}

// workerGoroutines counts the goroutines of Group workers.
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "client.(*Group).worker(")
}

func TestGroupRunsEveryTask(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	var ran atomic.Int64
	g := newGroup(t, c, ctx(t), "db", client.WithMaxInFlight(5))
	for range 20 {
		g.Go(func(ctx context.Context) error {
			if client.LeaseFromContext(ctx) == nil {
				t.Error("a task runs without a lease in its context")
			}
			ran.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	p := g.Progress()
	if ran.Load() != 20 || p.Done != 20 || p.Submitted != 20 || p.Finished() != 20 {
		t.Fatalf("ran %d; progress %+v", ran.Load(), p)
	}
	if st := ts.status("db"); st.Granted != 20 || st.Released != 20 || st.Held != 0 {
		t.Fatalf("server: granted=%d released=%d held=%d", st.Granted, st.Released, st.Held)
	}
}

// The global limit holds across two Clients (as it would across two
// processes), each running a Group with more local slots than the limit.
func TestGroupGlobalLimitAcrossClients(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	clients := []*client.Client{ts.dial(), ts.dial()}

	var running concurrency
	var starts atomic.Int64
	reached := make(chan struct{}) // closed when two tasks run at once
	var reachedOnce sync.Once
	task := func(ctx context.Context) error {
		defer running.leave()
		if running.enter() == 2 {
			reachedOnce.Do(func() { close(reached) })
		}
		// The first two tasks to start wait for each other, so that the
		// limit is reached whatever the scheduling.
		if starts.Add(1) <= 2 {
			recv(t, "two tasks at once", reached)
		}
		runtime.Gosched()
		return nil
	}
	var wg sync.WaitGroup
	groups := make([]*client.Group, len(clients))
	for i, c := range clients {
		groups[i] = newGroup(t, c, ctx(t), "db", client.WithMaxInFlight(4))
		wg.Go(func() {
			for range 12 {
				groups[i].Go(task)
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if p := g.Progress(); p.Done != 12 {
			t.Fatalf("progress %+v", p)
		}
	}
	if m := running.most.Load(); m != 2 {
		t.Fatalf("at most %d tasks ran at once; the limit is 2 and it must be reached", m)
	}
	if st := ts.status("db"); st.Granted != 24 || st.Held != 0 {
		t.Fatalf("server: granted=%d held=%d", st.Granted, st.Held)
	}
}

func TestGroupFailFast(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	boom := errors.New("boom")
	fail := make(chan struct{})
	started := make(chan struct{}, 2)
	causeB := make(chan error, 1)
	var extraRan atomic.Int64

	g := newGroup(t, c, ctx(t), "db")
	g.Go(func(ctx context.Context) error { // A: fails when told
		started <- struct{}{}
		<-fail
		return boom
	})
	g.Go(func(ctx context.Context) error { // B: runs until cancelled
		started <- struct{}{}
		<-ctx.Done()
		causeB <- context.Cause(ctx)
		return ctx.Err()
	})
	recv(t, "A started", started)
	recv(t, "B started", started)
	for range 10 { // these wait for a lease that A and B hold
		g.Go(func(context.Context) error {
			extraRan.Add(1)
			return nil
		})
	}
	waitFor(t, "10 waiters at the server", func() bool { return ts.status("db").Waiting == 10 })
	close(fail)

	if err := g.Wait(); err != boom {
		t.Fatalf("Wait returned %v; want the first error", err)
	}
	if cause := recv(t, "B's cause", causeB); cause != boom {
		t.Fatalf("B's context ended with cause %v; want the first error", cause)
	}
	if n := extraRan.Load(); n != 0 {
		t.Fatalf("%d tasks started after the first error", n)
	}
	p := g.Progress()
	checkProgress(t, p)
	if p.Failed != 2 || p.Skipped != 10 || p.Done != 0 {
		t.Fatalf("progress %+v; want 2 failed (A, and B cancelled) and 10 skipped", p)
	}
	// Nothing is left held or waiting on the server.
	waitFor(t, "the server to drop the waiters", func() bool {
		st := ts.status("db")
		return st.Held == 0 && st.Waiting == 0
	})
	// Go after the group stopped does nothing.
	g.Go(func(context.Context) error { t.Error("ran after Wait"); return nil })
	if p := g.Progress(); p.Skipped != 11 {
		t.Fatalf("progress %+v after a late Go", p)
	}
}

func TestGroupFailFastOnAcquireError(t *testing.T) {
	ts := newTestServer(t)
	c := ts.dial()
	g := newGroup(t, c, ctx(t), "nope")
	g.Go(func(context.Context) error { t.Error("ran without a lease"); return nil }, client.WithDescription("first"))
	err := g.Wait()
	mustIs(t, err, apierr.ErrPoolNotFound)
	if !strings.HasPrefix(err.Error(), `task "first": `) {
		t.Fatalf("error %q does not name the task", err)
	}
}

func TestGroupContinueOnError(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 4})
	c := ts.dial()

	// One task in flight at a time, so tasks run in order: 1, 3 and 5
	// fail, the third error stops the group, and 6..9 never start.
	errs := make([]error, 10)
	g := newGroup(t, c, ctx(t), "db", client.WithErrorPolicy(client.ContinueOnError(3)), client.WithMaxInFlight(1))
	var ran []int
	for i := range 10 {
		if i%2 == 1 {
			errs[i] = fmt.Errorf("error %d", i)
		}
		g.Go(func(context.Context) error {
			ran = append(ran, i) // one at a time
			return errs[i]
		}, client.WithDescription(fmt.Sprintf("t%d", i)))
	}
	err := g.Wait()
	for _, i := range []int{1, 3, 5} {
		if !errors.Is(err, errs[i]) {
			t.Errorf("Wait's error %q does not match error %d", err, i)
		}
	}
	for _, i := range []int{7, 9} {
		if errors.Is(err, errs[i]) {
			t.Errorf("Wait's error %q matches error %d, of a task that should not have run", err, i)
		}
	}
	if !strings.Contains(err.Error(), `task "t5": error 5`) {
		t.Errorf("error %q does not name task t5", err)
	}
	if fmt.Sprint(ran) != "[0 1 2 3 4 5]" {
		t.Fatalf("ran %v", ran)
	}
	p := g.Progress()
	checkProgress(t, p)
	if p.Done != 3 || p.Failed != 3 || p.Skipped != 4 {
		t.Fatalf("progress %+v", p)
	}
}

func TestGroupContinueWithoutMaximum(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 3})
	c := ts.dial()

	g := newGroup(t, c, ctx(t), "db", client.WithErrorPolicy(client.ContinueOnError(0)))
	for i := range 12 {
		g.Go(func(context.Context) error {
			if i%3 == 0 {
				return fmt.Errorf("error %d", i)
			}
			return nil
		})
	}
	err := g.Wait()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 4 {
		t.Fatalf("Wait returned %v; want 4 errors joined", err)
	}
	if p := g.Progress(); p.Done != 8 || p.Failed != 4 || p.Skipped != 0 {
		t.Fatalf("progress %+v", p)
	}
}

// Queue-style: tasks keep being added; errors go to the handler as they
// happen and the group never stops because of them.
func TestGroupHandleErrors(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 2})
	c := ts.dial()

	handled := make(chan error, 100)
	g := newGroup(t, c, ctx(t), "db", client.WithErrorPolicy(client.HandleErrors(func(err error) { handled <- err })), client.WithMaxInFlight(3))
	jobs := make(chan int)
	go func() {
		for i := range 30 {
			jobs <- i
		}
		close(jobs)
	}()
	for i := range jobs {
		g.Go(func(context.Context) error {
			if i%10 == 9 {
				return fmt.Errorf("job %d failed", i)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("Wait returned %v; errors went to the handler", err)
	}
	close(handled)
	var got []string
	for err := range handled {
		got = append(got, err.Error())
	}
	if len(got) != 3 {
		t.Fatalf("handled %q; want jobs 9, 19 and 29", got)
	}
	if p := g.Progress(); p.Done != 27 || p.Failed != 3 {
		t.Fatalf("progress %+v", p)
	}
}

// MaxInFlight bounds the goroutines of a group, whatever the pool's limit:
// Go blocks once that many tasks are in flight.
func TestGroupMaxInFlight(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 100})
	c := ts.dial()

	const inFlight, tasks = 3, 12
	var running concurrency
	started := make(chan struct{}, tasks)
	proceed := make(chan struct{})
	var reports []client.Progress
	var mu sync.Mutex
	g := newGroup(t, c, ctx(t), "db", client.WithMaxInFlight(inFlight), client.WithProgress(func(p client.Progress) {
		mu.Lock()
		reports = append(reports, p)
		mu.Unlock()
	}))
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for range tasks {
			g.Go(func(context.Context) error {
				defer running.leave()
				running.enter()
				started <- struct{}{}
				<-proceed
				return nil
			})
		}
	}()
	for i := range tasks {
		recv(t, "a task to start", started)
		if i+1 >= inFlight && i+1 < tasks {
			// inFlight tasks run; the next Go call is blocked.
			waitFor(t, "a blocked Go", func() bool { return g.Progress().Queued == 1 })
			if p := g.Progress(); p.Running != inFlight || p.Submitted != i+2 {
				t.Fatalf("progress %+v with %d tasks started", p, i+1)
			}
		}
		if n := workerGoroutines(); n > inFlight {
			t.Fatalf("%d worker goroutines; MaxInFlight is %d", n, inFlight)
		}
		if i+1 >= inFlight {
			proceed <- struct{}{} // let one finish
		}
	}
	for range inFlight - 1 {
		proceed <- struct{}{}
	}
	<-submitted
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if m := running.most.Load(); m != inFlight {
		t.Fatalf("at most %d ran at once; want %d", m, inFlight)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range reports {
		checkProgress(t, p)
		if p.InFlight() > inFlight {
			t.Fatalf("progress %+v: more than %d in flight", p, inFlight)
		}
	}
	waitFor(t, "no worker goroutines after Wait", func() bool { return workerGoroutines() == 0 })
}

// A task's Priority orders it in the pool's wait queue.
func TestGroupTaskPriority(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()
	held, err := ts.srv.Engine().Acquire(ctx(t), limiter.AcquireRequest{Pool: "db", Weight: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	var order []string
	g := newGroup(t, c, ctx(t), "db")
	g.Go(func(context.Context) error { order = append(order, "low"); return nil }, client.WithPriority(1))
	waitFor(t, "one waiter", func() bool { return ts.status("db").Waiting == 1 })
	g.Go(func(context.Context) error { order = append(order, "high"); return nil }, client.WithPriority(5))
	waitFor(t, "two waiters", func() bool { return ts.status("db").Waiting == 2 })
	if _, err := ts.srv.Engine().Release("db", held.FencingToken); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[high low]" {
		t.Fatalf("ran in order %v; want the higher priority first", order)
	}
}

// When the group's context ends, tasks not started are skipped and Wait
// returns the context's cause.
func TestGroupContextEnds(t *testing.T) {
	ts := newTestServer(t)
	ts.pool(limiter.PoolConfig{Name: "db", ConcurrencyLimit: 1})
	c := ts.dial()

	stop := errors.New("shutting down")
	gctx, cancel := context.WithCancelCause(ctx(t))
	started := make(chan struct{})
	g := newGroup(t, c, gctx, "db", client.WithErrorPolicy(client.HandleErrors(nil)))
	g.Go(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	recv(t, "the first task", started)
	for range 3 {
		g.Go(func(context.Context) error { t.Error("ran after the context ended"); return nil })
	}
	waitFor(t, "3 waiters", func() bool { return ts.status("db").Waiting == 3 })
	cancel(stop)
	if err := g.Wait(); err != stop {
		t.Fatalf("Wait returned %v; want the context's cause", err)
	}
	if p := g.Progress(); p.Failed != 1 || p.Skipped != 3 {
		t.Fatalf("progress %+v", p)
	}
}

func TestGroupWaitWithoutTasks(t *testing.T) {
	ts := newTestServer(t)
	c := ts.dial()
	g := newGroup(t, c, ctx(t), "db")
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
