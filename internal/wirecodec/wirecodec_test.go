package wirecodec

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

const method = "/tollgate.v1.LimiterService/Acquire"

func frame(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }

// notProtobuf is a frame that does not decode as a message: field 1 (an
// AcquireRequest's pool) "db", then field 1 with wire type 7, which does
// not exist.
var notProtobuf = []byte{0x0a, 0x02, 'd', 'b', 0x0f, 0xff, 0xff}

func encode(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantInvalidFrame checks that err is INVALID_ARGUMENT naming the method,
// with the engine's invalid-argument reason.
func wantInvalidFrame(t *testing.T, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), method) {
		t.Fatalf("status %v %q; want InvalidArgument naming %s", st.Code(), st.Message(), method)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == string(apierr.ReasonInvalidArgument) {
			return
		}
	}
	t.Fatalf("status %v has no ErrorInfo with reason %s", st.Details(), apierr.ReasonInvalidArgument)
}

func TestUnaryRefusesAFrameThatDidNotDecode(t *testing.T) {
	c := New()
	req := new(tollgatev1.AcquireRequest)
	if err := c.Unmarshal(frame(notProtobuf), req); err != nil {
		t.Fatalf("Unmarshal returned %v; a bad frame is set aside, not refused by the codec", err)
	}
	if req.GetPool() != "" {
		t.Fatalf("the message of a bad frame is %v; want it empty, not half decoded", req)
	}
	called := false
	_, err := c.Unary(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		called = true
		return nil, nil
	})
	if called {
		t.Fatal("the handler ran for a request that did not decode")
	}
	wantInvalidFrame(t, err)

	// The refusal is taken once: the message is forgotten after it.
	if err := c.badFrame(method, req); err != nil {
		t.Fatalf("the bad frame is remembered after its refusal: %v", err)
	}
}

func TestUnaryPassesAGoodFrame(t *testing.T) {
	c := New()
	req := new(tollgatev1.AcquireRequest)
	if err := c.Unmarshal(frame(encode(t, &tollgatev1.AcquireRequest{Pool: "db", Weight: proto.Int64(2)})), req); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Unary(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: method}, func(_ context.Context, r any) (any, error) {
		return r.(*tollgatev1.AcquireRequest).GetPool(), nil
	})
	if err != nil || resp != "db" {
		t.Fatalf("Unary = %v, %v; want the handler's answer for pool db", resp, err)
	}
}

// recvStream is a grpc.ServerStream whose messages are frames decoded by
// the codec, as grpc's transport decodes them.
type recvStream struct {
	grpc.ServerStream
	codec  Codec
	frames [][]byte
}

func (s *recvStream) RecvMsg(m any) error {
	f := s.frames[0]
	s.frames = s.frames[1:]
	return s.codec.Unmarshal(frame(f), m)
}

func TestStreamRefusesTheReceiveOfAFrameThatDidNotDecode(t *testing.T) {
	c := New()
	ss := &recvStream{codec: c, frames: [][]byte{encode(t, &tollgatev1.SessionRequest{RequestId: 7}), notProtobuf}}
	err := c.Stream(nil, ss, &grpc.StreamServerInfo{FullMethod: method}, func(_ any, s grpc.ServerStream) error {
		first := new(tollgatev1.SessionRequest)
		if err := s.RecvMsg(first); err != nil || first.GetRequestId() != 7 {
			t.Errorf("first receive = %v, %v; want request 7", first, err)
		}
		return s.RecvMsg(new(tollgatev1.SessionRequest))
	})
	wantInvalidFrame(t, err)
}
