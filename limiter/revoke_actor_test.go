package limiter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A revocation on behalf of an actor names it in LeaseEnded and in the
// error of a later renew.
func TestRevokeLeaseByNamesActor(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "db", ConcurrencyLimit: 2})
	l := te.mustAcquire(t, AcquireRequest{Pool: "db", TTL: time.Minute})
	if err := te.RevokeLease("db", l.FencingToken, "stuck job", ByActor("alice")); err != nil {
		t.Fatal(err)
	}
	ended := te.endedLeases()
	if len(ended) != 1 || ended[0].Actor != "alice" || ended[0].Message != "stuck job" {
		t.Fatalf("ended = %+v", ended)
	}
	_, err := te.Renew("db", l.FencingToken, 0, nil)
	if !errors.Is(err, apierr.ErrLeaseRevoked) || !strings.Contains(err.Error(), "stuck job (by alice)") {
		t.Fatalf("renew error = %v, want apierr.ErrLeaseRevoked naming alice", err)
	}
}
