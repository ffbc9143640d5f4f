package events

// WatchBuffer is how many live events a watcher may have waiting to be
// sent; a watcher that falls further behind is dropped (the server ends
// its WatchEvents stream with RESOURCE_EXHAUSTED, WATCH_OVERFLOW) rather
// than slowing the server down or making it hold more.
const WatchBuffer = 1024

// MaxWatchers bounds the watchers of a Ring (the WatchEvents streams open
// at once on a server).
const MaxWatchers = 64

// Watcher is one WatchEvents stream's subscription to the ring.
type Watcher struct {
	pool     string     // "" means every pool
	ch       chan Event // live events, bounded
	overflow chan struct{}
}

// notifyLocked hands ev to every watcher interested in it, without
// blocking: a watcher whose buffer is full is dropped and told so by
// closing its overflow channel. r.mu is held.
func (r *Ring) notifyLocked(ev Event) {
	for w := range r.watchers {
		if w.pool != "" && w.pool != ev.Pool {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			delete(r.watchers, w)
			close(w.overflow)
		}
	}
}

// Watch subscribes to the events about pool ("" for all) and returns,
// with includeRecent, the events kept so far, oldest first. The snapshot
// and the subscription are taken together, so no event is missed or seen
// twice. It returns nil when MaxWatchers are already watching.
func (r *Ring) Watch(pool string, includeRecent bool) (*Watcher, []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.watchers) >= MaxWatchers {
		return nil, nil
	}
	size := r.watchBuffer
	if size <= 0 {
		size = WatchBuffer
	}
	w := &Watcher{pool: pool, ch: make(chan Event, size), overflow: make(chan struct{})}
	if r.watchers == nil {
		r.watchers = make(map[*Watcher]struct{})
	}
	r.watchers[w] = struct{}{}
	var recent []Event
	if includeRecent {
		for i := range r.buf {
			ev := r.buf[(r.next+i)%len(r.buf)]
			if pool == "" || ev.Pool == pool {
				recent = append(recent, ev)
			}
		}
	}
	return w, recent
}

// Unwatch ends w's subscription; it may already have been dropped.
func (r *Ring) Unwatch(w *Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watchers, w)
}

// NumWatchers returns how many watchers are subscribed.
func (r *Ring) NumWatchers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watchers)
}

// SetWatchBuffer sets the buffer of the watchers subscribed from now on
// (0: WatchBuffer), for tests.
func (r *Ring) SetWatchBuffer(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchBuffer = n
}

// C returns the live events of w's subscription.
func (w *Watcher) C() <-chan Event { return w.ch }

// Overflow is closed when w fell WatchBuffer events behind and was
// dropped.
func (w *Watcher) Overflow() <-chan struct{} { return w.overflow }
