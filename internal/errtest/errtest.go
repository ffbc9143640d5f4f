// Package errtest holds the checks of *apierr.Error values that the tests
// of several packages share. Only tests import it; it imports apierr and
// nothing of the engine or the server.
package errtest

import (
	"errors"
	"testing"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// WantCodes fails t unless err is an *apierr.Error with one of codes and a
// message.
func WantCodes(t *testing.T, err error, codes ...apierr.Code) {
	t.Helper()
	var le *apierr.Error
	if !errors.As(err, &le) || le.Message == "" {
		t.Fatalf("error %v is not an *apierr.Error with a message", err)
	}
	for _, c := range codes {
		if le.Code == c {
			return
		}
	}
	t.Fatalf("error %v has code %v, want one of %v", err, le.Code, codes)
}

// IsReason reports whether err is an *apierr.Error with reason r.
func IsReason(err error, r apierr.Reason) bool {
	var le *apierr.Error
	return errors.As(err, &le) && le.Reason == r
}
