package limiter

import "context"

// Wait is an acquire (T is Lease) or a take (T is TakeResult) that could
// not be decided at once, as StartAcquire and StartTake return it. Its
// outcome comes once, after the pool's lock is released: to Await, which
// waits for it, or to the function given to Notify, which the goroutine
// that ended the wait (a release, a timer, Cancel) calls once it has
// unlocked the pool, so that function may take its time and call the
// engine. Use either Await or Notify, once.
type Wait[T Lease | TakeResult] struct {
	p    *pool
	kind waitKind[T] // the acquire's record in the queue, or the take's reservation
	// Guarded by p.mu; neither changes once the wait has ended.
	then func(T, error) // Notify's
	out  *outcome[T]    // the outcome once ended; made earlier by Await
}

// outcome is how a wait ended.
type outcome[T any] struct {
	ready chan struct{} // Await's: closed once the outcome is delivered; nil otherwise
	ended bool
	val   T
	err   error
	prev  delivery // the wait that ended before it under the same lock, until delivered
}

// waitKind is what an acquire and a take do differently when their owner
// gives up.
type waitKind[T any] interface {
	// quitLocked ends the wait, which has not ended, given up with cause
	// (context.Canceled or context.DeadlineExceeded; nil: the engine
	// stops its waits).
	quitLocked(cause error)
	// lateLocked returns what Await reports when it gave up with cause
	// after the wait had ended with out.
	lateLocked(out *outcome[T], cause error) (T, error)
}

// delivery is an ended wait whose outcome the pool's unlock hands over.
// The waits that end under one lock form a list through their outcomes
// (the pool's outbox holds the last), so that ending one allocates
// nothing more.
type delivery interface {
	deliver()
	// unlink returns the wait that ended before it under the same lock,
	// if any, and forgets it.
	unlink() delivery
}

// Await waits for the outcome until ctx is done or the engine stops its
// waits (StopWaits, Close), and returns it. If it gives up first, it ends
// the wait as Cancel would; an acquire granted meanwhile is undone, a
// take keeps the tokens it waited for.
func (w *Wait[T]) Await(ctx context.Context) (T, error) {
	p := w.p
	p.mu.Lock()
	if !w.endedLocked() {
		w.out = &outcome[T]{ready: make(chan struct{})}
	}
	out := w.out
	p.unlock()
	if out.ready == nil { // ended before Await
		return out.val, out.err
	}
	select {
	case <-out.ready:
		return out.val, out.err
	case <-ctx.Done():
	case <-p.e.stopping:
	case <-p.e.done:
	}
	cause := ctx.Err()
	if cause == nil {
		select {
		case <-out.ready: // ended, even if waits stopped meanwhile
			return out.val, out.err
		default:
		}
	}
	p.mu.Lock()
	defer p.unlock()
	if !w.endedLocked() {
		w.kind.quitLocked(cause)
		return out.val, out.err
	}
	return w.kind.lateLocked(out, cause)
}

// Notify has then called once with the outcome, with no lock held: by
// the goroutine that ends the wait, or at once by Notify's caller if the
// wait has ended. StopWaits does not end a notified wait: its owner ends
// it with Cancel.
func (w *Wait[T]) Notify(then func(T, error)) {
	p := w.p
	p.mu.Lock()
	if !w.endedLocked() {
		w.then = then
		p.unlock()
		return
	}
	out := w.out
	p.unlock()
	then(out.val, out.err)
}

// Cancel gives the wait up as the end of the call's ctx with cause
// (context.Canceled or context.DeadlineExceeded) would; a nil cause is
// the engine stopping its waits (apierr.ErrShuttingDown). Its outcome, the
// error, is delivered as any other. A wait that has ended is left as it
// ended.
func (w *Wait[T]) Cancel(cause error) {
	p := w.p
	p.mu.Lock()
	defer p.unlock()
	if !w.endedLocked() {
		w.kind.quitLocked(cause)
	}
}

// endedLocked reports whether the wait has ended.
func (w *Wait[T]) endedLocked() bool { return w.out != nil && w.out.ended }

// endLocked ends the wait with its outcome, once; the pool's unlock
// delivers it.
func (w *Wait[T]) endLocked(v T, err error) {
	if w.endedLocked() {
		return
	}
	if w.out == nil {
		w.out = &outcome[T]{}
	}
	w.out.ended, w.out.val, w.out.err = true, v, err
	if w.then != nil || w.out.ready != nil {
		w.out.prev, w.p.out.waits = w.p.out.waits, w
	}
}

// deliver hands the outcome to Notify's function or to Await. It is
// called once, with no lock held, after endLocked.
func (w *Wait[T]) deliver() {
	if w.then != nil {
		w.then(w.out.val, w.out.err)
		return
	}
	close(w.out.ready)
}

func (w *Wait[T]) unlink() delivery {
	prev := w.out.prev
	w.out.prev = nil
	return prev
}

// deliverWaits delivers the outcomes of the waits that ended under one
// lock, last the one that ended last.
func deliverWaits(last delivery) {
	var buf [8]delivery
	ds := buf[:0]
	for d := last; d != nil; d = d.unlink() {
		ds = append(ds, d)
	}
	for i := len(ds) - 1; i >= 0; i-- {
		ds[i].deliver()
	}
}
