// Package errtest holds the checks of engine-style errors that the tests
// of several packages share. Only tests import it; it imports the engine
// (limiter) and nothing of the server.
package errtest

import (
	"errors"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// WantCodes fails t unless err is a *limiter.Error with one of codes and a
// message.
func WantCodes(t *testing.T, err error, codes ...limiter.Code) {
	t.Helper()
	var le *limiter.Error
	if !errors.As(err, &le) || le.Message == "" {
		t.Fatalf("error %v is not a limiter error with a message", err)
	}
	for _, c := range codes {
		if le.Code == c {
			return
		}
	}
	t.Fatalf("error %v has code %v, want one of %v", err, le.Code, codes)
}

// IsReason reports whether err is a *limiter.Error with reason r.
func IsReason(err error, r limiter.Reason) bool {
	var le *limiter.Error
	return errors.As(err, &le) && le.Reason == r
}
