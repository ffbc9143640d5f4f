package server

import (
	"testing"

	"google.golang.org/grpc/codes"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

func helloReq(id uint64, batchAnswers bool) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{RequestId: id, Kind: &tollgatev1.SessionRequest_Hello{Hello: &tollgatev1.Hello{ClientId: "batcher", BatchAnswers: batchAnswers}}}
}

func batchReq(reqs ...*tollgatev1.SessionRequest) *tollgatev1.SessionRequest {
	return &tollgatev1.SessionRequest{Kind: &tollgatev1.SessionRequest_Batch{Batch: &tollgatev1.SessionRequestBatch{Requests: reqs}}}
}

// answers reads messages until it has n answers and returns them by
// request_id with the number of messages they came in.
func (c *sessionClient) answers(n int) (map[uint64]*tollgatev1.SessionResponse, int) {
	c.t.Helper()
	got := make(map[uint64]*tollgatev1.SessionResponse, n)
	msgs := 0
	for len(got) < n {
		r := c.next()
		msgs++
		rs := []*tollgatev1.SessionResponse{r}
		if b := r.GetBatch(); b != nil {
			rs = b.GetResponses()
			if len(rs) < 2 {
				c.t.Errorf("a batch of %d answers; one answer is sent as itself", len(rs))
			}
		}
		for _, r := range rs {
			if r.GetBatch() != nil {
				c.t.Fatalf("a batch holds a batch: %v", r)
			}
			if _, dup := got[r.GetRequestId()]; dup {
				c.t.Fatalf("request %d answered twice", r.GetRequestId())
			}
			got[r.GetRequestId()] = r
		}
	}
	return got, msgs
}

// The requests of a batch are handled in order, each answered by its own
// request_id exactly as if sent alone; a client that said Hello with
// batch_answers gets its answers several to a message, and the Welcome says
// that the server reads batches.
func TestSessionBatches(t *testing.T) {
	e := newEnv(t)
	e.createPool(&tollgatev1.Pool{Name: "db", ConcurrencyLimit: 600})
	s := e.session()
	w := s.call(helloReq(1, true))
	if !w.GetWelcome().GetBatchRequests() {
		t.Fatalf("welcome = %v, want batch_requests", w)
	}
	// In order: the acquire of request 2 is granted before request 3
	// releases it.
	first := s.call(acquireReq(2, &tollgatev1.AcquireRequest{Pool: "db"}))
	s.send(batchReq(
		acquireReq(3, &tollgatev1.AcquireRequest{Pool: "db", Weight: i64(599)}),
		releaseReq(4, "db", first.GetAcquire().GetLease().GetId()),
		acquireReq(5, &tollgatev1.AcquireRequest{Pool: "db", NoWait: true}),
		releaseReq(6, "db", "999"),
	))
	got, _ := s.answers(4)
	if got[3].GetAcquire().GetLease().GetWeight() != 599 || got[4].GetRelease() == nil || got[5].GetAcquire().GetLease() == nil {
		t.Fatalf("answers = %v", got)
	}
	wantSessionError(t, got[6], codes.NotFound, apierr.ReasonLeaseNotFound)

	// Many answers queued at once go out several to a message.
	const n = 1000
	var reqs []*tollgatev1.SessionRequest
	for i := range uint64(n) {
		reqs = append(reqs, releaseReq(100+i, "db", "999"))
	}
	s.send(batchReq(reqs...))
	got, msgs := s.answers(n)
	for i := range uint64(n) {
		wantSessionError(t, got[100+i], codes.NotFound, apierr.ReasonLeaseNotFound)
	}
	if msgs == n {
		t.Errorf("%d answers came in %d messages: none was batched", n, msgs)
	}
}

// A client that does not say it reads batches never gets one, however
// its requests come.
func TestSessionNoBatchesUnasked(t *testing.T) {
	e := newEnv(t)
	s := e.session()
	if w := s.call(helloReq(1, false)); !w.GetWelcome().GetBatchRequests() {
		t.Fatalf("welcome = %v, want batch_requests", w)
	}
	const n = 1000
	var reqs []*tollgatev1.SessionRequest
	for i := range uint64(n) {
		reqs = append(reqs, releaseReq(100+i, "db", "999"))
	}
	s.send(batchReq(reqs...))
	if _, msgs := s.answers(n); msgs != n {
		t.Fatalf("%d answers came in %d messages", n, msgs)
	}
	// Without a hello, the same.
	s = e.session()
	s.send(batchReq(reqs...))
	if _, msgs := s.answers(n); msgs != n {
		t.Fatalf("%d answers came in %d messages", n, msgs)
	}
}

// A batch too large, or holding a batch, ends the stream with
// INVALID_ARGUMENT and a message that says what is wrong.
func TestSessionBatchBounds(t *testing.T) {
	e := newEnv(t)
	big := make([]*tollgatev1.SessionRequest, MaxSessionBatch+1)
	for i := range big {
		big[i] = releaseReq(uint64(i+1), "db", "999")
	}
	for name, req := range map[string]*tollgatev1.SessionRequest{
		"too large": batchReq(big...),
		"nested":    batchReq(releaseReq(1, "db", "999"), batchReq(releaseReq(2, "db", "999"))),
	} {
		t.Run(name, func(t *testing.T) {
			s := e.session()
			s.send(req)
			wantStatus(t, s.wantEnd(), codes.InvalidArgument, apierr.ReasonInvalidArgument)
		})
	}
	// An empty batch is nothing to answer; the stream goes on.
	s := e.session()
	s.send(batchReq())
	wantSessionError(t, s.call(releaseReq(1, "db", "999")), codes.NotFound, apierr.ReasonPoolNotFound)
}
