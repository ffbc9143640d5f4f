package client

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// settings are the caller's choices about how a Client behaves around the
// work it protects (rather than how it connects): what to do when the
// server cannot be reached, who observes the work, and how the work's
// errors are classified. A Dialer's fields fill them in; Dial checks them
// and Client keeps them.
type settings struct {
	unavailable UnavailablePolicy
	observer    Observer
	classify    Classifier

	// local is LocalLimitOnly's limit, built by check.
	local *localLimit
}

// localLimit is the local limit of LocalLimitOnly: a weighted FIFO
// semaphore (a large request at the head is not passed by small ones), and
// the weight held under it, for the log.
type localLimit struct {
	size  int64
	sem   *semaphore.Weighted
	inUse atomic.Int64
}

// check validates s and builds what it needs.
func (s *settings) check() error {
	if s.unavailable.kind == localLimitOnly {
		if s.unavailable.limit < 1 {
			return fmt.Errorf("tollgate: LocalLimitOnly(%d): the local limit must be at least 1", s.unavailable.limit)
		}
		s.local = &localLimit{size: s.unavailable.limit, sem: semaphore.NewWeighted(s.unavailable.limit)}
	}
	if s.classify == nil {
		s.classify = DefaultClassifier
	}
	return nil
}
