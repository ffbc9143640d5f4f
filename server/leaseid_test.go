package server

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A client that did not get a lease cannot release or renew it by
// guessing: the fencing token alone, the token with another pool's tag,
// and a made-up tag all get NOT_FOUND, and the lease stays held. Its
// holder's id works, and an operator may name it by its bare token.
func TestLeaseIDsCannotBeGuessed(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 2})
	e.createPool(&tollgatev1.Pool{Name: "other", ConcurrencyLimit: 2})
	victim := e.acquire(&tollgatev1.AcquireRequest{Pool: "db", Ttl: dur(time.Minute)})
	mine := e.acquire(&tollgatev1.AcquireRequest{Pool: "other", Ttl: dur(time.Minute)})
	if victim.GetFencingToken() != mine.GetFencingToken() {
		t.Fatalf("the test needs equal tokens in both pools: %d, %d", victim.GetFencingToken(), mine.GetFencingToken())
	}
	tok := tokenOf(victim.GetId())
	for _, guess := range []string{tok, tok + "." + mine.GetId()[len(tok)+1:], tok + ".AAAAAAAAAAAAAAAA"} {
		_, err := e.lim.Release(e.ctx(), &tollgatev1.ReleaseRequest{Pool: "db", LeaseId: guess})
		wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotFound)
		_, err = e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: guess})
		wantStatus(t, err, codes.NotFound, apierr.ReasonLeaseNotFound)
	}
	if st := e.status("db"); st.GetHeld() != 1 || st.GetReleased() != 0 {
		t.Fatalf("a guessed id released the lease: %v", st)
	}
	if _, err := e.lim.Renew(e.ctx(), &tollgatev1.RenewRequest{Pool: "db", LeaseId: victim.GetId()}); err != nil {
		t.Fatalf("the holder's own id: %v", err)
	}
	got, err := e.adm.GetLease(e.ctx(), &tollgatev1.GetLeaseRequest{Pool: "db", LeaseId: tok})
	if err != nil || got.GetLease().GetId() != victim.GetId() {
		t.Fatalf("GetLease by the bare token = %v, %v", got, err)
	}
	if _, err := e.adm.RevokeLease(e.ctx(), &tollgatev1.RevokeLeaseRequest{Pool: "db", LeaseId: tok}); err != nil {
		t.Fatalf("RevokeLease by the bare token: %v", err)
	}
}

// Ids are signed with the data directory's key, so a restarted server
// accepts the ids it handed out before (and re-adopts their leases).
func TestLeaseIDKeySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(Config{}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := first.ids.Format("db", 42)
	first.Close()
	second, err := Open(Config{}, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if tok, err := second.ids.Parse("db", id); err != nil || tok != 42 {
		t.Fatalf("the restarted server parses %q as %d, %v", id, tok, err)
	}
	if other := New(Config{}).ids.Format("db", 42); other == id {
		t.Fatal("a server without the data directory signs with the same key")
	}
}

// Rate share ids are signed the same way: a share cannot be refreshed or
// released by its bare number or another kind's tag.
func TestShareIDsCannotBeGuessed(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "api", Rate: 100})
	sh, err := e.lim.AcquireShare(e.ctx(), &tollgatev1.AcquireShareRequest{Pool: "api", Want: 10})
	if err != nil {
		t.Fatal(err)
	}
	id := sh.GetShare().GetId()
	num := tokenOf(id)
	for _, guess := range []string{num, e.srv.ids.Format("api", mustUint(t, num)), num + ".AAAAAAAAAAAAAAAA"} {
		_, err := e.lim.ReleaseShare(e.ctx(), &tollgatev1.ReleaseShareRequest{Pool: "api", ShareId: guess})
		wantStatus(t, err, codes.NotFound, apierr.ReasonShareNotFound)
	}
	if _, err := e.lim.RefreshShare(e.ctx(), &tollgatev1.RefreshShareRequest{Pool: "api", ShareId: id}); err != nil {
		t.Fatalf("the holder's own share id: %v", err)
	}
	if _, err := e.lim.ReleaseShare(e.ctx(), &tollgatev1.ReleaseShareRequest{Pool: "api", ShareId: id}); err != nil {
		t.Fatalf("releasing with the holder's own share id: %v", err)
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
