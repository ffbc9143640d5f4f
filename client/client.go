// Package client is the Go client of Tollgate: it acquires concurrency
// leases, keeps them alive, and takes rate tokens from a Tollgate server.
//
// A Client holds one gRPC connection and, once first needed, one Session
// stream over which all its lease traffic (acquire, renew, release, take)
// is multiplexed. When the stream breaks, the Client reconnects with
// backoff (to the leader, when it was given the servers of a cluster),
// more often as the nearest local deadline of its leases comes, and renews
// its live leases on the new stream at once. In a cluster of several
// shards it learns the shard map (GetCluster) and keeps one connection and
// stream per server it uses instead, sending each pool's calls to the
// server that leads the pool's shard and following NOT_LEADER hints when
// a shard moves; a held lease is renewed at its shard's new owner.
//
// A Lease is renewed in the background every TTL/3. Its holder must stop
// relying on it when its Done channel is closed: the server said it expired
// or was revoked, a renew was refused, or the lease's local deadline (the
// time its last successful renew was sent, plus its TTL, minus a safety
// margin) passed without a successful renew. Check the lease's
// FencingToken in the protected system when a paused holder could outlive
// its lease.
//
// Do runs one function under a lease. For many, a Group (Client.NewGroup)
// runs tasks under the pool's global limit with a bound on this process's
// goroutines; Map maps a slice; Wrap, Wrap1, Wrap2 and WrapR throttle an
// existing function. A Dialer's Unavailable policy chooses what they do
// when the server cannot be reached, and its Observer measures them. The
// guide is docs/client.md.
//
// A Client's settings are the fields of a Dialer. The options of a call
// are named With followed by what they set, and typed by the call that
// takes them: AcquireOption (Acquire, TryAcquire, Do, Group.Go,
// Semaphore.Acquire, the Wrap functions), GroupOption (NewGroup, Map),
// SemaphoreOption (NewSemaphore), LimiterOption (NewLimiter) and
// ProviderOption (NewProvider), so an option given to the wrong call does
// not compile. Every other constructor is a method Client.New<Type>(...)
// returning (*<Type>, error).
//
//	c, err := client.Dial("tollgate-1:7070", "tollgate-2:7070", "tollgate-3:7070")
//	...
//	defer c.Close()
//	err = c.Do(ctx, "orders-db", func(ctx context.Context) error {
//		return migrate(ctx) // ctx ends if the lease is lost
//	}, client.WithWeight(2))
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// maxClientIDLen is the longest client id the server accepts.
const maxClientIDLen = 256

// flowWindow is the fixed HTTP/2 receive window of the Client's streams and
// connections.
const flowWindow = 1 << 20

// Client is a connection to a Tollgate server (or a list of servers to fail
// over between). It is safe for concurrent use. Create it with Dial and
// call Close when done.
type Client struct {
	conn     *grpc.ClientConn
	clientID string
	log      *slog.Logger
	margin   time.Duration // Dialer.SafetyMargin; 0: the default per lease
	settings settings      // unavailable policy, observer, classifier
	rates    rates         // rate shares (Limiter) and outcome reports

	// ctx is cancelled by Close; it is the parent of the Session stream and
	// of every background goroutine.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	nextID atomic.Uint64 // request ids, unique over the Client's life
	// releases counts the releases ReleaseAsync posted that are not yet
	// answered (Lease.ReleaseAsync); Close waits for them.
	releases sync.WaitGroup

	mu     sync.Mutex
	closed bool
	leases map[leaseKey]*Lease

	target  string   // the gRPC target dialed
	cluster []string // the addresses of a cluster given to Dial; nil for one target
	servers *servers // the resolver of a cluster's addresses; nil for one target

	// main is the link of the dialed target: every request goes there
	// unless the cluster has several shards (routes).
	main *link
	// routes is the shard map the Client routes by; nil until learned.
	routes atomic.Pointer[routes]
	// shardState is the sharded cluster's links and the learning of its
	// map; guarded by mu.
	shardState
}

type leaseKey struct{ pool, id string }

// Dial returns a Client for the server at addr, with the default
// settings; Dialer.Dial takes settings. Each address is "host:port", or
// "host" for port 7070, or any gRPC target such as
// "dns:///tollgate.internal:7070"; several "host:port" addresses are the
// servers of one cluster: Dial("a:7070", "b:7070", "c:7070"), or one
// comma-separated list ("a:7070,b:7070,c:7070", as in TOLLGATE_SERVER).
//
// With several addresses the client reaches the leader by itself: it
// connects to every address and sends its calls to the one whose gRPC
// health reports tollgate.v1.LimiterService SERVING (a follower reports
// NOT_SERVING), and a call answered NOT_LEADER (a race with a change of
// leader) is sent again after the answer's retry delay, within the call's
// context. When the leader changes, the Session stream moves to the new
// leader, which re-adopts the client's leases as they are renewed.
//
// In a cluster of several shards (GetCluster's shard_count above 1) each
// pool's calls go to the server that leads its shard, whichever addresses
// were dialed (one is enough): the client reads the shard map from a
// dialed server and dials the owners it names (at most 64 servers).
//
// Dial does not connect: the first call that needs the server does, and
// waits for a connection as long as its context allows. The transport is
// insecure (plaintext) unless the Dialer's TLS or GRPCOptions say
// otherwise.
func Dial(addrs ...string) (*Client, error) { return Dialer{}.Dial(addrs...) }

// Dial is the package's Dial with d's settings.
func (d Dialer) Dial(addrs ...string) (*Client, error) {
	target := strings.Join(addrs, ",")
	if d.SafetyMargin < 0 {
		return nil, fmt.Errorf("tollgate: safety margin %v is negative", d.SafetyMargin)
	}
	clientID := d.ClientID
	if clientID == "" {
		clientID = defaultClientID()
	}
	if len(clientID) > maxClientIDLen {
		return nil, fmt.Errorf("tollgate: client id is %d bytes; the most is %d", len(clientID), maxClientIDLen)
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	set := settings{unavailable: d.Unavailable, observer: d.Observer, classify: d.Classifier}
	if err := set.check(); err != nil {
		return nil, err
	}
	grpcTarget, addrs, srvs, dialOpts, err := dialTarget(target)
	if err != nil {
		return nil, err
	}
	common := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepaliveParams),
		grpc.WithTransportCredentials(transportCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           reconnectBackoff.grpcConfig(),
			MinConnectTimeout: 5 * time.Second,
		}),
		// Fixed flow-control windows turn grpc-go's bandwidth-delay
		// estimate off, whose PING frames would go out with every burst of
		// answers and come back; a Client's messages are small.
		grpc.WithInitialWindowSize(flowWindow), grpc.WithInitialConnWindowSize(flowWindow),
	}
	if d.TLS != nil {
		common = append(common, grpc.WithTransportCredentials(credentials.NewTLS(d.TLS)))
	}
	common = append(common, d.GRPCOptions...)
	dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(unaryInterceptor(addrs)))
	conn, err := grpc.NewClient(grpcTarget, append(dialOpts, common...)...)
	if err != nil {
		return nil, fmt.Errorf("tollgate: dial %q: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		conn:     conn,
		clientID: clientID,
		log:      logger,
		margin:   d.SafetyMargin,
		settings: set,
		ctx:      ctx,
		cancel:   cancel,
		leases:   make(map[leaseKey]*Lease),
		target:   grpcTarget,
		cluster:  addrs,
		servers:  srvs,
	}
	c.main = c.newLink("", conn)
	c.linkOpts = append([]grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`)}, common...)
	c.links = make(map[string]*link)
	return c, nil
}

// transportCredentials is the seam for TLS: today every connection is
// plaintext unless the Dialer's TLS or GRPCOptions (applied later, so they
// win) say otherwise.
func transportCredentials() credentials.TransportCredentials {
	return insecure.NewCredentials()
}

// dialTarget turns Dial's target into a gRPC target and its dial options.
// One address is dialed as it is, with pick_first. A comma-separated list
// gets a manual resolver that knows every address, round_robin over them
// and client-side health checking of tollgate.v1.LimiterService, so that
// calls go to the servers that report SERVING: the leader of a cluster;
// calls wait for one while their context allows.
// addrs is the list, or nil for one address; srvs its resolver.
func dialTarget(target string) (grpcTarget string, addrs []string, srvs *servers, opts []grpc.DialOption, err error) {
	for _, a := range strings.Split(target, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if a, err = serverAddress(a); err != nil {
				return "", nil, nil, nil, err
			}
			addrs = append(addrs, a)
		}
	}
	switch len(addrs) {
	case 0:
		return "", nil, nil, nil, errors.New("tollgate: empty server address; give host:port, or a comma-separated list of them")
	case 1:
		return addrs[0], nil, nil, []grpc.DialOption{grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`)}, nil
	}
	state := resolver.State{}
	for _, a := range addrs {
		if strings.Contains(a, "://") {
			return "", nil, nil, nil, fmt.Errorf("tollgate: address %q in a list must be host:port (a URL target can only be given alone)", a)
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r := manual.NewBuilderWithScheme("tollgate")
	r.InitialState(state)
	srvs = &servers{res: r, addrs: state.Addresses, local: make(map[string]string)}
	return r.Scheme() + ":///" + strings.Join(addrs, ","), addrs, srvs, append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(clusterServiceConfig),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)), // wait for a leader
	}, srvs.dialOptions()...), nil
}

// defaultClientID returns "<hostname>-<pid>-<8 hex digits>".
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if len(id) > maxClientIDLen {
		id = id[len(id)-maxClientIDLen:]
	}
	return id
}

// ClientID returns the id the client gives the server.
func (c *Client) ClientID() string { return c.clientID }

// Conn returns the client's gRPC connection, for use with the generated
// stubs (for example tollgatev1.NewAdminServiceClient). It is closed by
// Close. It reaches the dialed servers: in a cluster of several shards,
// calls made on it are not routed to a pool's shard's owner (one answered
// NOT_LEADER names it in Error.Metadata).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close waits (up to 5 s) for the answers to the releases ReleaseAsync
// sent, stops renewing the client's leases, ends the Session stream, waits
// for the client's goroutines to finish and closes the connection.
//
// Close does not release leases: they stay held on the server until their
// TTL passes. Release them first to return their permits at once. Leases
// still held end with an error matching ErrLeaseLost and ErrClosed, and
// calls in flight fail with ErrClosed. Close is idempotent; it returns the
// connection's close error the first time and nil after.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	leases := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()

	c.waitReleases()
	c.cancel()
	for _, l := range leases {
		l.end(lostError(l, ErrClosed))
	}
	c.wg.Wait()
	c.mu.Lock()
	links := make([]*link, 0, len(c.links))
	for _, ln := range c.links {
		links = append(links, ln)
	}
	c.mu.Unlock()
	for _, ln := range links {
		_ = ln.conn.Close()
	}
	return c.conn.Close()
}

// goBackground runs f in a goroutine that Close waits for, with a context
// that Close cancels. It reports false, without running f, once the client
// is closed.
func (c *Client) goBackground(f func(ctx context.Context)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.ctx)
	}()
	return true
}

// checkOpen returns ErrClosed once the client is closed: the constructors
// of the objects that use it call it first.
func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// safetyMargin returns the safety margin of a lease with the given TTL.
func (c *Client) safetyMargin(ttl time.Duration) time.Duration {
	m := max(ttl/10, 50*time.Millisecond)
	if c.margin > 0 {
		m = c.margin
	}
	return min(m, ttl/2)
}
