package client

import (
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Option configures Dial: the result of one of this package's With...
// functions. Dial also takes more server addresses, as strings, among its
// Options; any other value makes Dial fail.
type Option any

type options struct {
	clientID  string
	dialOpts  []grpc.DialOption
	margin    time.Duration
	marginSet bool
	logger    *slog.Logger
	settings  settings
}

// WithClientID names the client to the server (shown to operators with its
// leases; at most 256 bytes). The default is "<hostname>-<pid>-<random>".
func WithClientID(id string) Option {
	return func(o *options) { o.clientID = id }
}

// WithDialOptions adds gRPC dial options. They are applied after the
// client's defaults (insecure transport, pick_first for one address and
// round_robin with health checking and WaitForReady calls for several, a
// reconnect backoff capped at 2s, which the client cuts short while a
// lease's local deadline is near), so they override them: pass
// grpc.WithTransportCredentials to use TLS, and grpc.WithKeepaliveParams to
// detect a silently dead network sooner (the server must permit the ping
// rate).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithSafetyMargin sets how long before a lease's estimated expiry the
// client treats it as lost if it could not renew it: a lease's local
// deadline is (time its last successful renew was sent) + TTL - margin. The
// default, per lease, is max(TTL/10, 50ms). A margin must not be negative;
// one above TTL/2 is treated as TTL/2, so that renewals (every TTL/3) come
// before the deadline.
func WithSafetyMargin(d time.Duration) Option {
	return func(o *options) { o.margin, o.marginSet = d, true }
}

// WithLogger sets where the client logs connection trouble (stream breaks,
// reconnects, failed renewals). The default discards logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// AcquireOption configures Client.Acquire, TryAcquire and Do.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	weight      *int64               // nil: 1
	ttl         *durationpb.Duration // nil: the pool's default
	priority    int32
	waitTimeout time.Duration // 0: wait until ctx ends
	description string
}

// acquireOptionsOf applies opts.
func acquireOptionsOf(opts []AcquireOption) acquireOptions {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// weightOr1 is the Weight option's value, 1 when it is not set.
func (o acquireOptions) weightOr1() int64 {
	if o.weight == nil {
		return 1
	}
	return *o.weight
}

// Weight sets the permit weight to hold (default 1). It must be at least 1
// and at most the pool's concurrency limit (and, for a pool with a rate,
// its burst); the server refuses other values with apierr.ErrInvalidArgument.
func Weight(n int64) AcquireOption {
	return func(o *acquireOptions) { o.weight = &n }
}

// TTL sets the lease's time to live, renewed in the background every TTL/3.
// The default is the pool's default_lease_ttl. The server requires at least
// 100ms and at most the pool's max_lease_ttl.
func TTL(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.ttl = durationpb.New(d) }
}

// Priority sets the place in the pool's wait queue: higher values are
// granted first, FIFO within a priority. The default is 0.
func Priority(p int32) AcquireOption {
	return func(o *acquireOptions) { o.priority = p }
}

// WaitTimeout bounds the time spent waiting in the pool's queue; when it
// passes ungranted, Acquire fails with an error matching apierr.ErrWaitTimeout. It
// counts from the call to Acquire, including time spent connecting and
// reconnecting. By default an acquire waits until its context ends. d must
// be positive; use TryAcquire not to wait at all.
func WaitTimeout(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.waitTimeout = d }
}

// Description sets free text shown to operators with the lease (at most
// 1024 bytes).
func Description(s string) AcquireOption {
	return func(o *acquireOptions) { o.description = s }
}
