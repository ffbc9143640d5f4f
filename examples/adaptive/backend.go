package main

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is a spell of the backend: until Until (since the start of the
// run) it serves Capacity requests at once and answers 503 at once to
// every request beyond them; a Capacity of 0 hangs every request until
// its client gives up.
type Phase struct {
	Until    time.Duration
	Capacity int64
	Name     string
}

// Second counts what the backend saw in one second of the run.
type Second struct {
	Served, Refused, Hung int64
}

// Requests returns every request of the second.
func (s Second) Requests() int64 { return s.Served + s.Refused + s.Hung }

// backend is an HTTP handler with the phases' capacities.
type backend struct {
	phases   []Phase
	service  time.Duration // mean service time (exponential)
	hang     time.Duration // the longest a hung request is held
	inFlight atomic.Int64

	mu    sync.Mutex
	start time.Time // set by begin
	ticks []Second  // one per Tick of the run
}

// Tick is the resolution of the backend's counts.
const Tick = 10 * time.Millisecond

func newBackend(phases []Phase, service, hang time.Duration) *backend {
	n := int(phases[len(phases)-1].Until/Tick) + int(time.Second/Tick)
	return &backend{phases: phases, service: service, hang: hang, ticks: make([]Second, n)}
}

// begin sets the time 0 of the phases: the clients send nothing before.
func (b *backend) begin(start time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.start = start
}

// since returns the time since the start.
func (b *backend) since() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Since(b.start)
}

// capacity returns the capacity of the phase at since, and -1 after the
// last phase (the backend serves everything then).
func (b *backend) capacity(since time.Duration) int64 {
	for _, p := range b.phases {
		if since < p.Until {
			return p.Capacity
		}
	}
	return -1
}

func (b *backend) count(since time.Duration, f func(*Second)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := int(since / Tick); i >= 0 && i < len(b.ticks) {
		f(&b.ticks[i])
	}
}

// Ticks returns a copy of the counts so far, one per Tick.
func (b *backend) Ticks() []Second {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Second(nil), b.ticks...)
}

// second returns the counts of the i-th second of the run.
func (b *backend) second(i int) Second {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s Second
	per := int(time.Second / Tick)
	for _, t := range b.ticks[min(i*per, len(b.ticks)):min((i+1)*per, len(b.ticks))] {
		s.Served += t.Served
		s.Refused += t.Refused
		s.Hung += t.Hung
	}
	return s
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	since := b.since()
	c := b.capacity(since)
	if c == 0 {
		t := time.NewTimer(b.hang)
		defer t.Stop()
		select {
		case <-r.Context().Done():
		case <-t.C:
		}
		b.count(since, func(s *Second) { s.Hung++ })
		w.WriteHeader(http.StatusGatewayTimeout)
		return
	}
	if n := b.inFlight.Add(1); c > 0 && n > c {
		b.inFlight.Add(-1)
		b.count(since, func(s *Second) { s.Refused++ })
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	time.Sleep(time.Duration(rand.ExpFloat64() * float64(b.service)))
	b.inFlight.Add(-1)
	b.count(since, func(s *Second) { s.Served++ })
	w.WriteHeader(http.StatusOK)
}
