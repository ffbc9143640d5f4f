package client

// Progress counts the tasks of a Group. Every Progress that a Group gives
// out (WithProgress, Group.Progress) is a consistent snapshot:
//
//	Submitted == Queued + Waiting + Running + Done + Failed + Skipped
//
// and a task moves only forward: Queued, then Waiting, then Running, then
// Done or Failed; or to Skipped from Queued or Waiting.
type Progress struct {
	// Submitted is the number of tasks passed to Go.
	Submitted int
	// Queued tasks are waiting for one of the group's WithMaxInFlight local
	// slots (their Go call is blocked).
	Queued int
	// Waiting tasks have a local slot and are waiting for a lease from the
	// pool (the global limit).
	Waiting int
	// Running tasks hold a lease and their fn is running.
	Running int
	// Done tasks finished with a nil error.
	Done int
	// Failed tasks finished with an error: their fn's, or their acquire's
	// (an unknown pool, a wait timeout, ...).
	Failed int
	// Skipped tasks never ran because the group stopped first (an error
	// under FailFast, the maximum of ContinueOnError, the group's context
	// ending, or Wait having returned).
	Skipped int
}

// Finished returns the number of tasks that are over: Done + Failed +
// Skipped.
func (p Progress) Finished() int { return p.Done + p.Failed + p.Skipped }

// InFlight returns the number of tasks that have a local slot: Waiting +
// Running. It is at most the group's WithMaxInFlight.
func (p Progress) InFlight() int { return p.Waiting + p.Running }

// progressReporter is the state of a Group's WithProgress calls; it is
// guarded by the Group's mutex.
type progressReporter struct {
	pending bool // a change not yet reported
	running bool // the reporting goroutine is running
}

// changedLocked notes a change of the counts and makes sure the reporter
// will report it.
func (g *Group) changedLocked() {
	if g.cfg.progress == nil {
		return
	}
	g.rep.pending = true
	if !g.rep.running {
		g.rep.running = true
		go g.report()
	}
}

// report calls the WithProgress callback with the latest counts until
// there is no change left to report, then exits.
func (g *Group) report() {
	for {
		g.mu.Lock()
		if !g.rep.pending {
			g.rep.running = false
			g.cond.Broadcast()
			g.mu.Unlock()
			return
		}
		g.rep.pending = false
		p := g.p
		g.mu.Unlock()
		g.cfg.progress(p)
	}
}

// flushProgressLocked waits until every change has been reported.
func (g *Group) flushProgressLocked() {
	for g.rep.running {
		g.cond.Wait()
	}
}
