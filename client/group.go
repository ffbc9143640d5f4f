package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Group runs tasks under a pool's global limit: "limited parallel
// execution" with the limit held by the Tollgate server, so that it holds
// across every process that uses the pool. Each task runs as under Do: it
// waits for a lease from the pool, runs with a context that ends if the
// lease is lost, and always releases the lease.
//
// The group bounds its tasks in this process too: at most WithMaxInFlight (by
// default 64) are in flight at once — waiting for a lease
// or running — each on one of the group's goroutines, never more; Go
// blocks while that many are in flight. So a Group can be handed a
// million tasks without starting a million goroutines.
//
// What a task error does is the group's error policy: FailFast (the
// default: the first error cancels the rest and is returned),
// ContinueOnError (up to a maximum number of errors, all returned), or
// HandleErrors (each error to a callback, for queue-style use). Progress
// can be followed with WithProgress or Progress.
//
// The name follows errgroup.Group, whose Go and Wait it mirrors, because a
// Group is used the same way: create one per batch of work (or one for
// the life of a queue), call Go for each task, then Wait once.
//
// A Group's methods are safe for concurrent use. It must not be copied.
type Group struct {
	c      *Client
	pool   string
	cfg    groupConfig
	ctx    context.Context // parent of the tasks' contexts
	cancel context.CancelCauseFunc

	tasks   chan *task    // unbuffered: Go hands a task to a worker
	stopped chan struct{} // closed when the group stops: blocked Go calls give up
	quit    chan struct{} // closed when Wait returns: workers exit
	workers sync.WaitGroup

	mu        sync.Mutex
	cond      *sync.Cond // broadcast when a task leaves flight or the reporter idles
	p         Progress
	rep       progressReporter
	nWorkers  int
	isStopped bool
	stopCause error              // why it stopped
	waiting   map[*task]struct{} // tasks waiting for their lease
	errs      []error            // FailFast: the first; ContinueOnError: all
	finished  bool               // Wait has returned (or is returning)
	result    error              // Wait's result, once finished

	handlerMu sync.Mutex // serializes HandleErrors calls
}

// task is one function given to Go.
type task struct {
	fn     func(ctx context.Context) error
	opts   []AcquireOption
	desc   string
	cancel context.CancelFunc // cancels the task's acquire and run

	// Set when fn's error has been given to the error policy (before the
	// lease is released, so that a stop takes effect before the permit
	// can go to another task), guarded by the Group's mutex.
	failed bool
	handle error // the error for the HandleErrors callback, if any
}

var (
	// errTooManyErrors is the stop cause of ContinueOnError's maximum.
	errTooManyErrors = errors.New("tollgate: the group reached its maximum number of task errors")
	// errWaitReturned is the stop cause of a group whose Wait returned.
	errWaitReturned = errors.New("tollgate: the group's Wait has returned")
	// errNotStarted is what a task granted after its group stopped returns
	// instead of running (it matches context.Canceled, so that it is
	// classified OutcomeCanceled).
	errNotStarted = fmt.Errorf("tollgate: the group stopped before the task started: %w", context.Canceled)
	// errGoexit is the error of a task whose fn called runtime.Goexit.
	errGoexit = errors.New("tollgate: the task called runtime.Goexit")
)

// NewGroup returns an empty Group whose tasks take their leases from pool.
// The tasks' contexts derive from ctx: when ctx ends, running tasks see it
// and tasks not yet started are skipped. The caller must call Wait.
func (c *Client) NewGroup(ctx context.Context, pool string, opts ...GroupOption) (*Group, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	g := &Group{
		c:       c,
		pool:    pool,
		cfg:     newGroupConfig(opts),
		tasks:   make(chan *task),
		stopped: make(chan struct{}),
		quit:    make(chan struct{}),
		waiting: make(map[*task]struct{}),
	}
	g.ctx, g.cancel = context.WithCancelCause(ctx)
	g.cond = sync.NewCond(&g.mu)
	return g, nil
}

// Go submits a task: fn runs under a lease of the group's pool, acquired
// with the group's acquire options (WithAcquireOptions) followed by opts —
// typically WithPriority (its place in the pool's wait queue) and WithDescription
// (shown to operators, and prefixed to the task's error as `task "<desc>":`).
// fn's context ends when the lease is lost, the group stops under
// FailFast, or the group's context ends; LeaseFromContext gives fn its
// lease.
//
// Go blocks while the group has WithMaxInFlight tasks in flight, until one
// finishes; tasks start locally in the order their Go calls got a slot.
// WithPriority orders them only in the pool's queue, among the tasks of every
// client that wait there. If the group has stopped, or stops while Go is
// blocked, Go returns at once and the task is counted Skipped. A panic in
// fn is not recovered (the lease is released first), as in any goroutine.
func (g *Group) Go(fn func(ctx context.Context) error, opts ...AcquireOption) {
	t := &task{fn: fn, opts: opts, desc: describe(g.cfg.acquireOpts, opts)}
	g.mu.Lock()
	g.p.Submitted++
	if g.stoppedLocked() {
		g.p.Skipped++
		g.changedLocked()
		g.mu.Unlock()
		return
	}
	g.p.Queued++
	if g.nWorkers < g.cfg.maxInFlight {
		g.nWorkers++
		g.workers.Add(1)
		go g.worker()
	}
	g.changedLocked()
	g.mu.Unlock()

	select {
	case g.tasks <- t:
		return
	case <-g.stopped:
	case <-g.ctx.Done():
	}
	g.mu.Lock()
	g.stoppedLocked()
	g.p.Queued--
	g.p.Skipped++
	g.changedLocked()
	g.cond.Broadcast()
	g.mu.Unlock()
}

// Wait waits until every task submitted (including those whose Go call is
// blocked, and those submitted while Wait waits) is over, then ends the
// group: later Go calls do nothing. It returns nil if every task ran and
// succeeded, and otherwise:
//   - FailFast: the first task error; or, if none failed but some were
//     skipped because the group's context ended, its cause;
//   - ContinueOnError: every task error, joined with errors.Join (and the
//     context's cause if tasks were skipped because it ended);
//   - HandleErrors: nil (the errors went to the handler), or the context's
//     cause if tasks were skipped because it ended.
//
// A task error is the task's fn's error, or its acquire's, prefixed with
// `task "<description>": ` when the task has a WithDescription. Wait may be
// called more than once; later calls return the same result.
func (g *Group) Wait() error {
	g.mu.Lock()
	for g.p.Queued+g.p.Waiting+g.p.Running > 0 {
		g.cond.Wait()
	}
	if !g.finished {
		g.finished = true
		g.stoppedLocked()
		g.result = g.resultLocked()
		g.stopLocked(errWaitReturned)
		close(g.quit)
	}
	result := g.result
	g.mu.Unlock()

	g.cancel(errWaitReturned)
	g.workers.Wait()
	g.mu.Lock()
	g.flushProgressLocked()
	g.mu.Unlock()
	return result
}

// Progress returns the group's counts now.
func (g *Group) Progress() Progress {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.p
}

// worker runs the tasks Go hands it until Wait returns.
func (g *Group) worker() {
	quitting := false
	defer func() {
		if !quitting {
			// A task's fn called runtime.Goexit (or panicked) on this
			// goroutine: replace it, so that Go calls blocked for a slot
			// are still served.
			g.workers.Add(1)
			go g.worker()
		}
		g.workers.Done()
	}()
	for {
		select {
		case t := <-g.tasks:
			g.run(t)
		case <-g.quit:
			quitting = true
			return
		}
	}
}

// run runs one task on a worker.
func (g *Group) run(t *task) {
	g.mu.Lock()
	g.p.Queued--
	if g.stoppedLocked() {
		g.p.Skipped++
		g.changedLocked()
		g.cond.Broadcast()
		g.mu.Unlock()
		return
	}
	g.p.Waiting++
	var tctx context.Context
	tctx, t.cancel = context.WithCancel(g.ctx)
	g.waiting[t] = struct{}{}
	g.changedLocked()
	g.mu.Unlock()
	defer t.cancel()

	ran, over := false, false
	defer func() {
		if !over { // fn panicked or called runtime.Goexit
			g.finish(t, ran, errGoexit)
		}
	}()
	opts := append(g.cfg.acquireOpts[:len(g.cfg.acquireOpts):len(g.cfg.acquireOpts)], t.opts...)
	do := func(ctx context.Context, fn func(context.Context) error, opts ...AcquireOption) error {
		return g.c.Do(ctx, g.pool, fn, opts...)
	}
	if g.cfg.sem != nil {
		do = g.cfg.sem.Do // permits from a concurrency share
	}
	err := do(tctx, func(ctx context.Context) error {
		g.mu.Lock()
		delete(g.waiting, t)
		if g.stoppedLocked() {
			g.mu.Unlock()
			return errNotStarted
		}
		g.p.Waiting--
		g.p.Running++
		ran = true
		g.changedLocked()
		g.mu.Unlock()
		err := t.fn(ctx)
		if err != nil {
			// Apply the error policy now, while the lease is held: a
			// stop must cancel the other waiters before this release
			// lets one of them in.
			g.mu.Lock()
			t.failed = true
			t.handle = g.failedLocked(g.taskError(t, err))
			g.mu.Unlock()
		}
		return err
	}, opts...)
	over = true
	g.finish(t, ran, err)
}

// finish counts a task that is over, after applying the error policy to
// its error and giving it to the HandleErrors callback: so when Wait
// returns, every error has been handled.
func (g *Group) finish(t *task, ran bool, err error) {
	g.mu.Lock()
	delete(g.waiting, t)
	// A task that did not run because the group stopped is skipped: its
	// acquire was cancelled, or it was granted too late.
	skipped := !ran && g.stoppedLocked()
	handle := t.handle
	if !skipped && err != nil {
		g.c.log.Debug("tollgate: task failed", "pool", g.pool, "description", t.desc, "err", err)
		if !t.failed { // the acquire's error, or a lease lost under a successful fn
			handle = g.failedLocked(g.taskError(t, err))
		}
	}
	g.mu.Unlock()
	if handle != nil {
		g.handleError(handle)
	}

	g.mu.Lock()
	if ran {
		g.p.Running--
	} else {
		g.p.Waiting--
	}
	switch {
	case skipped:
		g.p.Skipped++
	case err == nil:
		g.p.Done++
	default:
		g.p.Failed++
	}
	g.changedLocked()
	g.cond.Broadcast()
	g.mu.Unlock()
}

// handleError calls the HandleErrors callback, one call at a time.
func (g *Group) handleError(err error) {
	g.handlerMu.Lock()
	defer g.handlerMu.Unlock()
	g.cfg.onError(err)
}

// taskError returns err as Wait reports it: prefixed with the task's
// description, if it has one.
func (g *Group) taskError(t *task, err error) error {
	if t.desc == "" {
		return err
	}
	return fmt.Errorf("task %q: %w", t.desc, err)
}

// failedLocked applies the error policy to a task error; it returns the
// error if it is for the HandleErrors callback.
func (g *Group) failedLocked(err error) error {
	switch g.cfg.policy {
	case failFast:
		if !g.stoppedLocked() {
			g.errs = append(g.errs, err)
			g.stopLocked(err)
		}
	case continueOnError:
		g.errs = append(g.errs, err)
		if g.cfg.maxErrors > 0 && len(g.errs) >= g.cfg.maxErrors {
			g.stopLocked(errTooManyErrors)
		}
	case handleErrors:
		return err
	}
	return nil
}

// stoppedLocked reports whether the group has stopped, first stopping it
// if its context has ended.
func (g *Group) stoppedLocked() bool {
	if !g.isStopped && g.ctx.Err() != nil {
		g.stopLocked(context.Cause(g.ctx))
	}
	return g.isStopped
}

// stopLocked stops the group for cause, unless it has stopped already: no
// task starts any more, and acquires in progress are cancelled; under
// FailFast, running tasks are cancelled too.
func (g *Group) stopLocked(cause error) {
	if g.isStopped {
		return
	}
	g.isStopped, g.stopCause = true, cause
	close(g.stopped)
	for t := range g.waiting {
		t.cancel()
	}
	if g.cfg.policy == failFast {
		g.cancel(cause)
	}
}

// resultLocked returns Wait's result (see Wait).
func (g *Group) resultLocked() error {
	var ctxCause error // why tasks were skipped, if the group's context ended
	if g.p.Skipped > 0 && g.stopCause != nil && g.stopCause != errTooManyErrors {
		ctxCause = g.stopCause
	}
	switch g.cfg.policy {
	case failFast:
		if len(g.errs) > 0 {
			return g.errs[0]
		}
		return ctxCause
	case continueOnError:
		if ctxCause != nil {
			return errors.Join(append(g.errs, ctxCause)...)
		}
		return errors.Join(g.errs...)
	}
	return ctxCause
}

// describe returns the Description that opts set, if any.
func describe(lists ...[]AcquireOption) string {
	var o acquireOptions
	for _, opts := range lists {
		for _, opt := range opts {
			opt(&o)
		}
	}
	return o.description
}
