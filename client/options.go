package client

import (
	"crypto/tls"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Dialer holds a Client's settings; its zero value is the default
// settings, which Dial uses. It is configuration, read by Dial only.
type Dialer struct {
	// ClientID names the client to the server (shown to operators with
	// its leases; at most 256 bytes). Empty means
	// "<hostname>-<pid>-<random>".
	ClientID string

	// TLS makes the client connect over TLS with this configuration: set
	// RootCAs to the CA that signed the server's certificate (nil means the
	// system's roots), and Certificates to present a client certificate to
	// a server that requires mutual TLS. ServerName defaults to the host
	// of the address dialed. The client does not modify it. nil means
	// plaintext.
	TLS *tls.Config

	// GRPCOptions are gRPC dial options, applied after the client's
	// defaults (insecure transport or TLS, pick_first for one address and
	// round_robin with health checking and WaitForReady calls for several,
	// a reconnect backoff capped at 2s, which the client cuts short while a
	// lease's local deadline is near), so they override them: for example
	// grpc.WithPerRPCCredentials, or grpc.WithKeepaliveParams to detect a
	// silently dead network sooner (the server must permit the ping rate).
	GRPCOptions []grpc.DialOption

	// SafetyMargin is how long before a lease's estimated expiry the
	// client treats it as lost if it could not renew it: a lease's local
	// deadline is (time its last successful renew was sent) + TTL -
	// margin. 0 means max(TTL/10, 50ms), per lease. It must not be
	// negative; one above TTL/2 is treated as TTL/2, so that renewals
	// (every TTL/3) come before the deadline.
	SafetyMargin time.Duration

	// Logger receives connection trouble (stream breaks, reconnects,
	// failed renewals). nil discards it.
	Logger *slog.Logger

	// Unavailable is what calls that start work do when the server cannot
	// be reached; see UnavailablePolicy. The zero value is WaitForServer.
	Unavailable UnavailablePolicy

	// Observer receives the Client's acquire and work measurements. nil
	// means none.
	Observer Observer

	// Classifier is how Do classifies the error of its work into an
	// Outcome (for the Observer, and for the server's adaptive limits). Set
	// it when an error is not a failure of the protected system, or a
	// success is: for an HTTP API, a 404 may be a success and a 429 an
	// error. Delegate to DefaultClassifier for the rest. nil means
	// DefaultClassifier.
	Classifier Classifier
}

// AcquireOption configures one acquire: Client.Acquire, TryAcquire and Do,
// Group.Go, Semaphore.Acquire and Do, and the Wrap functions.
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

// weightOr1 is the WithWeight option's value, 1 when it is not set.
func (o acquireOptions) weightOr1() int64 {
	if o.weight == nil {
		return 1
	}
	return *o.weight
}

// WithWeight sets the permit weight to hold (default 1). It must be at least 1
// and at most the pool's concurrency limit (and, for a pool with a rate,
// its burst); the server refuses other values with apierr.ErrInvalidArgument.
func WithWeight(n int64) AcquireOption {
	return func(o *acquireOptions) { o.weight = &n }
}

// WithTTL sets the lease's time to live, renewed in the background every TTL/3.
// The default is the pool's default_lease_ttl. The server requires at least
// 100ms and at most the pool's max_lease_ttl.
func WithTTL(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.ttl = durationpb.New(d) }
}

// WithPriority sets the place in the pool's wait queue: higher values are
// granted first, FIFO within a priority. The default is 0.
func WithPriority(p int32) AcquireOption {
	return func(o *acquireOptions) { o.priority = p }
}

// WithWaitTimeout bounds the time spent waiting in the pool's queue; when it
// passes ungranted, Acquire fails with an error matching apierr.ErrWaitTimeout. It
// counts from the call to Acquire, including time spent connecting and
// reconnecting. By default an acquire waits until its context ends. d must
// be positive; use TryAcquire not to wait at all.
func WithWaitTimeout(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.waitTimeout = d }
}

// WithDescription sets free text shown to operators with the lease (at most
// 1024 bytes).
func WithDescription(s string) AcquireOption {
	return func(o *acquireOptions) { o.description = s }
}
