package session

import (
	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Bounds of a Session stream's batches.
const (
	// MaxBatch is the most requests one SessionRequest.batch may
	// hold; a larger batch ends the stream with INVALID_ARGUMENT.
	MaxBatch = 1024
	// maxAnswerBatch is the most answers and events sent in one
	// SessionResponse.batch; more go in the next message.
	maxAnswerBatch = 256
)

// checkBatch reports what is wrong with a batch of requests, if anything.
func checkBatch(b *tollgatev1.SessionRequestBatch) *apierr.Error {
	reqs := b.GetRequests()
	if len(reqs) > MaxBatch {
		return refuse.InvalidArg("a batch holds %d requests; the most is %d: send the rest in another message", len(reqs), MaxBatch)
	}
	for i, r := range reqs {
		if r.GetBatch() != nil {
			return refuse.InvalidArg("request %d of the batch (request_id %d) is itself a batch; a batch holds no batch: send its requests in the outer one", i, r.GetRequestId())
		}
	}
	return nil
}

// sendBatched sends answers, then the queued events, in as few messages as
// maxAnswerBatch allows; it is sendQueued for a client that said
// Hello with batch_answers. An answer carrying a lease that cannot be
// delivered has its lease released.
func (s *session) sendBatched(answers []answer) error {
	n := len(answers)
	evs := s.takeEvents()
	out := make([]*tollgatev1.SessionResponse, 0, n+len(evs))
	for _, a := range answers {
		out = append(out, a.r)
	}
	out = append(out, evs...)
	var err error
	sent := 0
	for sent < len(out) && err == nil {
		end := min(sent+maxAnswerBatch, len(out))
		msg := out[sent]
		if end-sent > 1 {
			msg = batchOf(out[sent:end])
		}
		if err = s.stream.Send(msg); err == nil {
			sent = end
		}
	}
	s.unread.Add(-int64(n))
	s.clientUnread.Add(-int64(n))
	for _, a := range answers[min(sent, n):n] {
		s.releaseUndelivered(a)
	}
	return err
}

// batchMsg is a batch of answers, its oneof wrapper and its body side by
// side: one allocation.
type batchMsg struct {
	resp tollgatev1.SessionResponse
	kind tollgatev1.SessionResponse_Batch
	body tollgatev1.SessionResponseBatch
}

// batchOf returns the message that carries answers as a batch.
func batchOf(answers []*tollgatev1.SessionResponse) *tollgatev1.SessionResponse {
	m := &batchMsg{}
	m.body.Responses = answers
	m.kind.Batch = &m.body
	m.resp.Kind = &m.kind
	return &m.resp
}
