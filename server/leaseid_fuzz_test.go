package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/limiter"
)

// fuzzIDKey is the lease id key of the fuzz targets.
var fuzzIDKey = []byte("0123456789abcdef0123456789abcdef")

// FuzzLeaseID: an id signed for a pool parses back to its number in that
// pool only, a lease id is never a share id nor the reverse, and any other
// id is refused as malformed (INVALID_ARGUMENT) or not found (NOT_FOUND),
// never accepted unless it carries the tag signed for its number.
func FuzzLeaseID(f *testing.F) {
	ids := newLeaseIDs(fuzzIDKey)
	f.Fuzz(func(t *testing.T, pool string, n uint64, id string) {
		lease, share := ids.format(pool, n), ids.formatShare(pool, n)
		if got, err := ids.parse(pool, lease); err != nil || got != n {
			t.Fatalf("parse(%q, format(%d)) = %d, %v", pool, n, got, err)
		}
		if got, err := ids.parseShare(pool, share); err != nil || got != n {
			t.Fatalf("parseShare(%q, formatShare(%d)) = %d, %v", pool, n, got, err)
		}
		if got, err := parseAdminLeaseID(lease); err != nil || got != n {
			t.Fatalf("parseAdminLeaseID(%q) = %d, %v", lease, got, err)
		}
		if _, err := ids.parse(pool+"x", lease); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("lease id %q of pool %q accepted in pool %q: %v", lease, pool, pool+"x", err)
		}
		if _, err := ids.parse(pool, share); !errors.Is(err, limiter.ErrLeaseNotFound) {
			t.Fatalf("share id %q accepted as a lease id: %v", share, err)
		}
		if _, err := ids.parseShare(pool, lease); !isReason(err, limiter.ReasonShareNotFound) {
			t.Fatalf("lease id %q accepted as a share id: %v", lease, err)
		}

		if tok, err := ids.parse(pool, id); err == nil {
			if _, tag, _ := strings.Cut(id, "."); tag != ids.tag(pool, tok) {
				t.Fatalf("parse(%q, %q) accepted a tag not signed for %d", pool, id, tok)
			}
		} else {
			wantCodes(t, err, limiter.CodeInvalidArgument, limiter.CodeNotFound)
		}
		if _, err := ids.parseShare(pool, id); err != nil {
			wantCodes(t, err, limiter.CodeInvalidArgument, limiter.CodeNotFound)
		}
		if _, err := parseAdminLeaseID(id); err != nil {
			wantCodes(t, err, limiter.CodeInvalidArgument)
		}
	})
}

// wantCodes fails t unless err is a *limiter.Error with one of codes and a
// message.
func wantCodes(t *testing.T, err error, codes ...limiter.Code) {
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

// isReason reports whether err is a *limiter.Error with reason r.
func isReason(err error, r limiter.Reason) bool {
	var le *limiter.Error
	return errors.As(err, &le) && le.Reason == r
}
