// Package wirecodec is the server's gRPC codec: grpc's proto codec, except
// that a request frame that does not decode is the caller's mistake,
// answered with INVALID_ARGUMENT naming the method, not INTERNAL.
//
// It may import apierr, for its reasons, and internal/refuse; nothing of
// the engine or the server.
package wirecodec

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// grpc-go answers a request frame its codec cannot decode (bytes that are
// not protobuf, a string that is not UTF-8) with INTERNAL, whatever the
// codec returns. Such a frame is the caller's mistake, so the server's
// codec instead decodes it to an empty message and remembers the error
// against that message; the first interceptor then answers the call (or
// the stream's receive) with INVALID_ARGUMENT naming the method.

// Codec is grpc's proto codec with undecodable frames set aside. Give it
// to grpc.ForceServerCodecV2 and put Unary and Stream first among the
// interceptors.
type Codec struct {
	encoding.CodecV2
	bad *sync.Map // proto.Message -> decode error, until an interceptor takes it
}

// New returns a codec.
func New() Codec {
	return Codec{CodecV2: encoding.GetCodecV2("proto"), bad: new(sync.Map)}
}

// Unmarshal decodes data into v; a frame that does not decode leaves v
// empty and is remembered for badFrame.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
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
func (c Codec) badFrame(method string, m any) error {
	v, ok := c.bad.LoadAndDelete(m)
	if !ok {
		return nil
	}
	return refuse.Newf(codes.InvalidArgument, apierr.ReasonInvalidArgument,
		"the request to %s is not a valid protobuf message of its type: %v; send it with a gRPC client built from the tollgate.v1 protos", method, v).GRPCStatus().Err()
}

// Unary refuses a unary call whose request did not decode.
func (c Codec) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.badFrame(info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream ends a stream whose client sent a message that did not decode.
func (c Codec) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &wireServerStream{ServerStream: ss, codec: c, method: info.FullMethod})
}

type wireServerStream struct {
	grpc.ServerStream
	codec  Codec
	method string
}

func (w *wireServerStream) RecvMsg(m any) error {
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return w.codec.badFrame(w.method, m)
}
