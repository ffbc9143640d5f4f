package client

import "fmt"

// settings are the caller's choices about how a Client behaves around the
// work it protects (rather than how it connects): what to do when the
// server cannot be reached, who observes the work, and how the work's
// errors are classified. Options fill them in; Dial checks them and Client
// keeps them.
type settings struct {
	unavailable UnavailablePolicy
	observer    Observer
	classify    Classifier

	// local is LocalLimitOnly's semaphore, built by check.
	local *semaphore
}

// check validates s and builds what it needs.
func (s *settings) check() error {
	if s.unavailable.kind == localLimitOnly {
		if s.unavailable.limit < 1 {
			return fmt.Errorf("tollgate: LocalLimitOnly(%d): the local limit must be at least 1", s.unavailable.limit)
		}
		s.local = newSemaphore(s.unavailable.limit)
	}
	if s.classify == nil {
		s.classify = DefaultClassifier
	}
	return nil
}
