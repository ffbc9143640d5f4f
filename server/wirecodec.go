package server

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/limiter"
)

// grpc-go answers a request frame its codec cannot decode (bytes that are
// not protobuf, a string that is not UTF-8) with INTERNAL, whatever the
// codec returns. Such a frame is the caller's mistake, so the server's
// codec instead decodes it to an empty message and remembers the error
// against that message; the first interceptor then answers the call (or
// the stream's receive) with INVALID_ARGUMENT naming the method.

// wireCodec is grpc's proto codec with undecodable frames set aside.
type wireCodec struct {
	encoding.CodecV2
	bad *sync.Map // proto.Message -> decode error, until an interceptor takes it
}

func newWireCodec() wireCodec {
	return wireCodec{CodecV2: encoding.GetCodecV2("proto"), bad: new(sync.Map)}
}

// Unmarshal decodes data into v; a frame that does not decode leaves v
// empty and is remembered for badFrame.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	c.bad.Store(m, err)
	return nil
}

// badFrame returns the refusal for a message that did not decode, or nil.
func (c wireCodec) badFrame(method string, m any) error {
	v, ok := c.bad.LoadAndDelete(m)
	if !ok {
		return nil
	}
	return statusOf(&limiter.Error{Code: limiter.CodeInvalidArgument, Reason: limiter.ReasonInvalidArgument,
		Message: fmt.Sprintf("the request to %s is not a valid protobuf message of its type: %v; send it with a gRPC client built from the tollgate.v1 protos", method, v)}, errCtx{}).Err()
}

// wireUnary refuses a unary call whose request did not decode.
func (s *Server) wireUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.codec.badFrame(info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// wireStream ends a stream whose client sent a message that did not decode.
func (s *Server) wireStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &wireServerStream{ServerStream: ss, codec: s.codec, method: info.FullMethod})
}

type wireServerStream struct {
	grpc.ServerStream
	codec  wireCodec
	method string
}

func (w *wireServerStream) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return w.codec.badFrame(w.method, m)
}
