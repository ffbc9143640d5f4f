package server

import (
	"bytes"
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protodelim"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// maxFuzzSessionRequests bounds the requests one fuzz input sends.
const maxFuzzSessionRequests = 64

// FuzzSession sends a sequence of SessionRequests, read from the input as
// length-delimited messages (varint length, then the message), on one
// Session stream to a real server; then half-closes and reads every answer.
// Each answer must reply to a request_id that was sent (welcomes and events
// aside), each SessionError must carry a code a caller can act on and a
// reason, and the stream must end cleanly or with such a status.
func FuzzSession(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var reqs []*tollgatev1.SessionRequest
		for r := bytes.NewReader(data); r.Len() > 0 && len(reqs) < maxFuzzSessionRequests; {
			req := &tollgatev1.SessionRequest{}
			if protodelim.UnmarshalFrom(r, req) != nil {
				break
			}
			reqs = append(reqs, req)
		}
		if len(reqs) == 0 {
			return
		}
		e := fuzzEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), fuzzCallLimit)
		defer cancel()
		stop := e.runClock()
		defer stop()
		stream, err := e.lim.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := make(map[uint64]bool, len(reqs))
		for _, req := range reqs {
			if stream.Send(req) != nil {
				break // the server ended the stream: Recv says why
			}
			sent[req.GetRequestId()] = true
			for _, r := range req.GetBatch().GetRequests() {
				sent[r.GetRequestId()] = true
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				checkCallerStatus(t, ctx, "Session", err)
				return
			}
			resps := []*tollgatev1.SessionResponse{resp}
			if b := resp.GetBatch(); b != nil {
				resps = b.GetResponses()
			}
			for _, resp := range resps {
				checkFuzzAnswer(t, sent, resp)
			}
		}
	})
}

// checkFuzzAnswer checks one answer or event of a fuzzed stream.
func checkFuzzAnswer(t *testing.T, sent map[uint64]bool, resp *tollgatev1.SessionResponse) {
	t.Helper()
	switch resp.GetKind().(type) {
	case *tollgatev1.SessionResponse_Welcome, *tollgatev1.SessionResponse_Event, *tollgatev1.SessionResponse_ShareEvent:
		return
	case *tollgatev1.SessionResponse_Batch:
		t.Fatalf("a batch of answers %v holds a batch", resp)
	}
	if !sent[resp.GetRequestId()] {
		t.Fatalf("answer %v replies to request_id %d, which was not sent", resp, resp.GetRequestId())
	}
	if se := resp.GetError(); se != nil {
		checkCallerCode(t, "Session", codes.Code(se.GetCode()), se.GetMessage())
		if se.GetCode() == 0 || se.GetReason() == "" {
			t.Fatalf("SessionError %v lacks a code or a reason", se)
		}
	}
}
