package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tollgate/tollgate/limiter/fakeclock"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The fuzz targets of this file send requests decoded from the fuzzer's
// bytes to a real server over a loopback connection, a new one for every
// input so that an input's outcome depends on it alone. Every answer must
// be a success or a status a caller can act on: a code from callerCodes
// with an ErrorInfo reason. A panic in a unary handler comes back as
// INTERNAL, so it fails the target too.

// fuzzCallLimit bounds one fuzz input's calls in real time.
const fuzzCallLimit = 5 * time.Second

// callerCodes are the codes the server may answer a caller's input with.
var callerCodes = map[codes.Code]bool{
	codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
	codes.PermissionDenied: true, codes.Unauthenticated: true, codes.ResourceExhausted: true,
	codes.FailedPrecondition: true, codes.Aborted: true, codes.OutOfRange: true,
	codes.DeadlineExceeded: true, codes.Unavailable: true,
	codes.Canceled: true, // a Session's CancelRequest
}

// fuzzEnv starts a server for one fuzz input with fixture pools: "c"
// (concurrency 2, one lease held), "r" (rate 5, burst 5) and "a" (active,
// two instances), so that requests naming them reach past the lookup.
func fuzzEnv(t *testing.T) *env {
	t.Helper()
	fc := fakeclock.New(testStart)
	e := startEnv(t, New(Config{Clock: fc, Logger: discardLogger(), ShutdownTimeout: time.Second}), fc)
	e.createPool(&tollgatev1.Pool{Name: "c", ConcurrencyLimit: 2})
	e.createPool(&tollgatev1.Pool{Name: "r", Rate: 5, Burst: 5})
	e.createPool(&tollgatev1.Pool{Name: "a", ResourceKind: tollgatev1.ResourceKind_RESOURCE_KIND_ACTIVE})
	if _, err := e.adm.AddResources(e.ctx(), &tollgatev1.AddResourcesRequest{Pool: "a", Resources: wireRes("i1", "i2")}); err != nil {
		t.Fatal(err)
	}
	e.acquire(&tollgatev1.AcquireRequest{Pool: "c", ClientId: "fixture"})
	return e
}

// runClock advances e's fake clock, in growing steps, until the returned
// function is called, so that a request waiting in fake time (max_wait, a
// TTL) ends within the call's real deadline.
func (e *env) runClock() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		step := time.Millisecond
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
			e.clock.Advance(step)
			step = min(2*step, time.Hour)
		}
	}()
	return func() { close(done); <-stopped }
}

// checkCallerStatus fails t unless err is nil or a status with a code of
// callerCodes and an ErrorInfo reason. An error of ctx's own deadline is
// the caller's and passes.
func checkCallerStatus(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	if err == nil || (ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && status.Code(err) == codes.DeadlineExceeded) {
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("%s: error %v is not a gRPC status", what, err)
	}
	checkCallerCode(t, what, st.Code(), st.Message())
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() != "" {
			return
		}
	}
	t.Fatalf("%s: status %v %q has no ErrorInfo reason", what, st.Code(), st.Message())
}

// checkCallerCode fails t unless code is one of callerCodes.
func checkCallerCode(t *testing.T, what string, code codes.Code, msg string) {
	t.Helper()
	if !callerCodes[code] {
		t.Fatalf("%s: answered %v %q; a caller's input must get a status it can act on", what, code, msg)
	}
}

// unaryMethods returns the unary methods of the service named name in fd.
func unaryMethods(fd protoreflect.FileDescriptor, name protoreflect.Name) []protoreflect.MethodDescriptor {
	ms := fd.Services().ByName(name).Methods()
	var out []protoreflect.MethodDescriptor
	for i := 0; i < ms.Len(); i++ {
		if m := ms.Get(i); !m.IsStreamingClient() && !m.IsStreamingServer() {
			out = append(out, m)
		}
	}
	return out
}

// newMessage returns an empty message of type md.
func newMessage(t *testing.T, md protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// fuzzUnary is the body of a unary fuzz target over methods: the input's
// first byte picks the method and the rest is its request's wire bytes.
func fuzzUnary(t *testing.T, methods []protoreflect.MethodDescriptor, method byte, msg []byte) {
	m := methods[int(method)%len(methods)]
	req := newMessage(t, m.Input())
	if proto.Unmarshal(msg, req) != nil {
		return // not a request a client library could send
	}
	e := fuzzEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), fuzzCallLimit)
	defer cancel()
	stop := e.runClock()
	defer stop()
	full := "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
	err := e.conn.Invoke(ctx, full, req, newMessage(t, m.Output()))
	checkCallerStatus(t, ctx, full, err)
}

// FuzzAdminRequest sends one AdminService request decoded from the input:
// its first byte picks the method (in the order of the service's
// definition) and the rest is the request's wire bytes.
func FuzzAdminRequest(f *testing.F) {
	methods := unaryMethods(tollgatev1.File_tollgate_v1_admin_proto, "AdminService")
	f.Fuzz(func(t *testing.T, method byte, msg []byte) { fuzzUnary(t, methods, method, msg) })
}

// FuzzLimiterRequest sends one unary LimiterService request decoded from
// the input, as FuzzAdminRequest does.
func FuzzLimiterRequest(f *testing.F) {
	methods := unaryMethods(tollgatev1.File_tollgate_v1_limiter_proto, "LimiterService")
	f.Fuzz(func(t *testing.T, method byte, msg []byte) { fuzzUnary(t, methods, method, msg) })
}
