package client

// SemaphoreWaiters returns how many local acquires wait on s, for tests
// that must order waiters without sleeping.
func SemaphoreWaiters(s *Semaphore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters.Len()
}
