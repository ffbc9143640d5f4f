package client

import (
	"container/list"
	"context"
	"sync"
)

// semaphore is a weighted semaphore, FIFO like x/sync/semaphore: a large
// request at the head is not passed by small ones behind it. It is the
// local limit of LocalLimitOnly.
type semaphore struct {
	size int64

	mu      sync.Mutex
	cur     int64
	waiters list.List // of *semWaiter
}

type semWaiter struct {
	n     int64
	ready chan struct{} // closed when granted
}

func newSemaphore(n int64) *semaphore { return &semaphore{size: n} }

// acquire takes n permits (1 <= n <= size), waiting until they are free or
// ctx ends; it returns ctx.Err() without holding anything in that case.
func (s *semaphore) acquire(ctx context.Context, n int64) error {
	s.mu.Lock()
	if s.size-s.cur >= n && s.waiters.Len() == 0 {
		s.cur += n
		s.mu.Unlock()
		return nil
	}
	w := &semWaiter{n: n, ready: make(chan struct{})}
	e := s.waiters.PushBack(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Granted meanwhile: give it back.
		s.cur -= n
	default:
		isFront := s.waiters.Front() == e
		s.waiters.Remove(e)
		if !isFront {
			s.mu.Unlock()
			return ctx.Err()
		}
	}
	s.grantLocked()
	s.mu.Unlock()
	return ctx.Err()
}

// release returns n permits.
func (s *semaphore) release(n int64) {
	s.mu.Lock()
	s.cur -= n
	if s.cur < 0 {
		s.mu.Unlock()
		panic("tollgate: semaphore released more than held")
	}
	s.grantLocked()
	s.mu.Unlock()
}

// inUse returns the permits held now.
func (s *semaphore) inUse() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// grantLocked grants waiters from the front while they fit.
func (s *semaphore) grantLocked() {
	for {
		e := s.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*semWaiter)
		if s.size-s.cur < w.n {
			return
		}
		s.cur += w.n
		s.waiters.Remove(e)
		close(w.ready)
	}
}
