package client

import (
	"context"
	"testing"
	"time"
)

func TestSemaphoreIsWeightedAndFIFO(t *testing.T) {
	s := newSemaphore(3)
	ctx := context.Background()
	if err := s.acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	big := make(chan error, 1)
	go func() { big <- s.acquire(ctx, 3) }() // waits for all 3
	waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiters.Len() == 1 })
	// A small request behind the big one waits too, though 1 is free.
	small, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.acquire(small, 1); err != context.DeadlineExceeded {
		t.Fatalf("small acquire passed the big one: %v", err)
	}
	s.release(2)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if s.inUse() != 3 {
		t.Fatalf("in use %d", s.inUse())
	}
	s.release(3)
	if s.inUse() != 0 {
		t.Fatalf("in use %d", s.inUse())
	}
}

func TestSemaphoreCancelAtHeadLetsOthersIn(t *testing.T) {
	s := newSemaphore(2)
	ctx := context.Background()
	if err := s.acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	headCtx, cancelHead := context.WithCancel(ctx)
	head := make(chan error, 1)
	go func() { head <- s.acquire(headCtx, 2) }()
	waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiters.Len() == 1 })
	next := make(chan error, 1)
	go func() { next <- s.acquire(ctx, 1) }()
	waitUntil(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.waiters.Len() == 2 })
	cancelHead()
	if err := <-head; err != context.Canceled {
		t.Fatalf("head: %v", err)
	}
	if err := <-next; err != nil {
		t.Fatalf("the request behind a cancelled head: %v", err)
	}
	s.release(1)
	s.release(1)
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
