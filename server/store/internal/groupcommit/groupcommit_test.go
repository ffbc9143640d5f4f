package groupcommit

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testwait"
)

// recorder is a commit function that records its batches and, while
// gate is set, blocks each commit until the test lets it go.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{} // nil: do not block
	started chan struct{} // a commit began
	fail    func(item int) error
}

func newRecorder(block bool) *recorder {
	r := &recorder{started: make(chan struct{}, 100)}
	if block {
		r.gate = make(chan struct{})
	}
	return r
}

func (r *recorder) commit(items []int) []error {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	r.mu.Unlock()
	r.started <- struct{}{}
	if r.gate != nil {
		<-r.gate
	}
	if r.fail == nil {
		return nil
	}
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = r.fail(it)
	}
	return errs
}

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// waitQueued waits until n writes are queued behind the running batch.
func waitQueued[T any](t *testing.T, c *Committer[T], n int) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("%d writes to queue", n), func() bool {
		c.mu.Lock()
		q := len(c.queue)
		c.mu.Unlock()
		if q > n {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
		return q == n
	})
}

// TestWritesQueuedDuringACommitShareTheNext: while one batch commits, the
// writes that arrive all go in the next one.
func TestWritesQueuedDuringACommitShareTheNext(t *testing.T) {
	r := newRecorder(true)
	c := New(r.commit, 100, time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, 11)
	wg.Go(func() { errs[0] = c.Now(0) })
	<-r.started
	for i := 1; i <= 10; i++ {
		wg.Go(func() { errs[i] = c.Now(i) })
	}
	waitQueued(t, c, 10)
	close(r.gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	b := r.got()
	if len(b) != 2 || len(b[0]) != 1 || len(b[1]) != 10 {
		t.Fatalf("batches %v; want [0] then the 10 others together", b)
	}
	if c.Batches() != 2 {
		t.Fatalf("Batches() = %d, want 2", c.Batches())
	}
}

// TestBatchesAreBounded: past maxBatch, the queue is committed in several
// batches, in order.
func TestBatchesAreBounded(t *testing.T) {
	r := newRecorder(true)
	c := New(r.commit, 3, time.Hour)
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Now(0) })
	<-r.started
	for i := 1; i <= 7; i++ {
		wg.Go(func() { _ = c.Now(i) })
		waitQueued(t, c, i) // in order
	}
	close(r.gate)
	wg.Wait()
	want := [][]int{{0}, {1, 2, 3}, {4, 5, 6}, {7}}
	if b := r.got(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", b, want)
	}
}

// TestEachWriteGetsItsOutcome: a failed batch fails each of its writes,
// and per-write errors reach their writers.
func TestEachWriteGetsItsOutcome(t *testing.T) {
	r := newRecorder(true)
	bad := errors.New("disk full")
	r.fail = func(item int) error {
		if item%2 == 1 {
			return bad
		}
		return nil
	}
	c := New(r.commit, 100, time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	wg.Go(func() { errs[0] = c.Now(0) })
	<-r.started
	for i := 1; i < 6; i++ {
		wg.Go(func() { errs[i] = c.Now(i) })
	}
	waitQueued(t, c, 5)
	close(r.gate)
	wg.Wait()
	for i, err := range errs {
		if want := i%2 == 1; (err != nil) != want || (err != nil && !errors.Is(err, bad)) {
			t.Fatalf("write %d: %v, want failed %v", i, err, want)
		}
	}
}

// TestLaterWaitsForANowWrite: a background write waits (here: an hour)
// until a write a caller waits for commits it too.
func TestLaterWaitsForANowWrite(t *testing.T) {
	r := newRecorder(false)
	c := New(r.commit, 100, time.Hour)
	done := make(chan error)
	go func() { done <- c.Later(1) }()
	waitQueued(t, c, 1)
	if err := c.Now(2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b := r.got(); len(b) != 1 || !slices.Equal(b[0], []int{1, 2}) {
		t.Fatalf("batches %v; want one with both writes", b)
	}
}

// TestLaterCommitsAfterTheDelay: alone, a background write commits once
// it has waited the delay; a full queue of them commits at once.
func TestLaterCommitsAfterTheDelay(t *testing.T) {
	r := newRecorder(false)
	c := New(r.commit, 2, time.Millisecond)
	if err := c.Later(1); err != nil {
		t.Fatal(err)
	}
	c2 := New(r.commit, 2, time.Hour)
	var wg sync.WaitGroup
	wg.Go(func() { _ = c2.Later(2) })
	waitQueued(t, c2, 1)
	wg.Go(func() { _ = c2.Later(3) })
	wg.Wait()
	want := [][]int{{1}, {2, 3}}
	if b := r.got(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", b, want)
	}
}

// TestBatchesCountsACommitBeforeItsWritesReturn: a writer that has its
// answer finds its batch counted.
func TestBatchesCountsACommitBeforeItsWritesReturn(t *testing.T) {
	c := New(func(items []int) []error { return nil }, 8, time.Hour)
	for i := range 200 {
		if err := c.Now(i); err != nil {
			t.Fatal(err)
		}
		if n := c.Batches(); n != uint64(i+1) {
			t.Fatalf("after write %d returned: %d batches counted, want %d", i, n, i+1)
		}
	}
}
