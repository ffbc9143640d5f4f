package client

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
)

// A cluster of several shards (GetCluster's shard_count above 1) has each
// pool's calls served by the server that leads the pool's shard; another
// server answers them NOT_LEADER, naming the owner it knows. The Client
// learns the shard map with GetCluster (in the background, at its first
// request and again when an answer contradicts the map or names nobody),
// keeps a link (a connection and one Session stream) per server it sends
// to, and sends each request on the link of its pool's shard's owner: a
// map lookup per request. A NOT_LEADER answer that names an owner moves
// the shard there (a higher epoch wins; epoch 0 is a planned move's
// target) and the request is sent again there. With one shard, or until
// the map is known, every request goes to the dialed target, as without
// shards.

const (
	// maxLinks bounds the servers a Client keeps a link to. A shard whose
	// owner would need one more keeps its route; its requests are answered
	// NOT_LEADER and retried until their context ends.
	maxLinks = 64
	// linkWait bounds the wait for the Session stream of a server's link
	// before the request is routed again and the map read again: a server
	// named owner may not answer (it died; a hint was wrong).
	linkWait = 2 * time.Second
	// askTimeout bounds one server's answer to GetCluster: a server that
	// does not answer by then (frozen) is not waited for.
	askTimeout = time.Second
	// maxAsked bounds the servers one read of the map asks at once.
	maxAsked = 4
	// relearnEvery is the least time between two reads of the map.
	relearnEvery = 100 * time.Millisecond
	// drainLimit bounds how long a retired link's stream stays open for
	// the answers to requests sent on it before (retireLocked).
	drainLimit = 10 * time.Second
)

// errLinkWait is what a request gets when a server's link had no stream
// within linkWait: roundTrip routes it again.
var errLinkWait = &Error{Code: codes.Unavailable, Message: "the owner of the pool's shard could not be reached within " + linkWait.String()}

// routes is the shard map the Client routes by. count and the length of
// shards never change; a new count (never seen in practice: it is fixed
// when a cluster is created) is a new routes.
type routes struct {
	count  int                     // the cluster's shard count; 1: not sharded
	shards []atomic.Pointer[route] // count entries when count > 1; nil entry: no owner known
	self   atomic.Pointer[link]    // the server that answered GetCluster: for shards of no known owner
}

// route is where one shard's requests go.
type route struct {
	addr  string
	epoch int64 // the owner's epoch; unchanged by a planned move's hint
	ln    *link
	// target: a planned move's hint set the route (epoch 0), at; its
	// server leads the shard once the old owner's hand-off is through.
	target bool
	at     time.Time
}

// moveGrace is how long a route a planned move's hint set stands against
// its own server's NOT_LEADER naming the old owner: the server the shard
// moves to leads it once the hand-off is through (tens of ms), and until
// then knows only the old owner, which would send the request back.
const moveGrace = time.Second

// moveRetry paces the requests waiting at the server a shard moves to,
// for their first maxAwaits tries (about 0.5 s: a hand-off under load);
// past that they back off as when no owner is known (two servers that
// name each other in turn).
const (
	moveRetry = 20 * time.Millisecond
	maxAwaits = 25
)

// hop says how a request answered NOT_LEADER goes on.
type hop int

const (
	hopAgain hop = iota // by its route, backing off (no owner known, one that did not answer)
	hopMoved            // to the owner the answer named: at once the first time
	hopAwait            // to the same server, which the shard is moving to: every moveRetry
)

// shardState is the Client's part for sharded clusters; guarded by
// Client.mu.
type shardState struct {
	links      map[string]*link // a link per server address in use
	linkOpts   []grpc.DialOption
	learning   bool      // a GetCluster runs
	learnAt    time.Time // no GetCluster before then
	learnFails int
	warnedMax  bool // maxLinks was reached (logged once)
	// moved lists the shards routed to another server, in a new term,
	// from one that could not be reached, since the last kickMoved: their
	// leases renew there at once. wakeMoved: some shard was routed to
	// another server in a new term.
	moved     []int
	wakeMoved bool
	// routeMoved is closed, and replaced, whenever a shard is routed to
	// another server: requests waiting on the old one's link go to the new
	// one at once (movedSignal).
	routeMoved atomic.Pointer[chan struct{}]
}

// movedSignal returns a channel closed when a shard is next routed to
// another server.
func (c *Client) movedSignal() <-chan struct{} {
	for {
		if ch := c.routeMoved.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		c.routeMoved.CompareAndSwap(nil, &ch)
	}
}

// noteMovedLocked records that shard i now routes to another server,
// in a new term, and whether its old owner could not be reached (lost:
// it died, or was taken for stuck) (kickMoved).
func (c *Client) noteMovedLocked(i int, lost bool) {
	c.wakeMoved = true
	if lost {
		c.moved = append(c.moved, i)
	}
}

// kickMoved wakes the requests waiting for the old owners of the shards
// of r routed elsewhere in a new term since the last call (movedSignal),
// and renews at once, at the new owners, the leases of those whose old
// owner could not be reached (a lease held at a live owner, moved by a
// hand-off, is renewed at its period).
func (c *Client) kickMoved(r *routes) {
	c.mu.Lock()
	moved, wake := c.moved, c.wakeMoved
	c.moved, c.wakeMoved = nil, false
	if wake {
		ch := make(chan struct{})
		if old := c.routeMoved.Swap(&ch); old != nil {
			close(*old)
		}
	}
	var leases []*Lease
	if len(moved) > 0 && r != nil && r.count > 1 {
		set := make(map[int]bool, len(moved))
		for _, i := range moved {
			set[i] = true
		}
		for _, l := range c.leases {
			if set[shard.Of(l.pool, r.count)] {
				leases = append(leases, l)
			}
		}
	}
	c.mu.Unlock()
	for _, l := range leases {
		l.kickRenew()
	}
}

// linkFor returns the link of pool's requests: the dialed target's unless
// the cluster has several shards, then the link of the owner of the pool's
// shard. It is nil when no server is known for the shard. It starts
// learning the map when it is not known.
func (c *Client) linkFor(pool string) *link {
	r := c.routes.Load()
	switch {
	case r == nil:
		c.learn()
		return c.main
	case r.count <= 1:
		return c.main
	}
	if rt := r.shards[shard.Of(pool, r.count)].Load(); rt != nil {
		return rt.ln
	}
	c.learn()
	return r.self.Load()
}

// routeOf returns the link of the owner of pool's shard and its epoch
// in a sharded cluster (nil, 0 when none is known or not sharded).
func (c *Client) routeOf(pool string) (*link, int64) {
	r := c.routes.Load()
	if r == nil || r.count <= 1 {
		return nil, 0
	}
	if rt := r.shards[shard.Of(pool, r.count)].Load(); rt != nil {
		return rt.ln, rt.epoch
	}
	return nil, 0
}

// sharded reports whether the Client routes by a map of several shards.
func (c *Client) sharded() bool {
	r := c.routes.Load()
	return r != nil && r.count > 1
}

// fastMoves is how many times a request follows at once a NOT_LEADER hint
// that moved its shard; after that (servers that name each other in turn)
// it backs off as when no owner is known.
const fastMoves = 3

// rerouteWait pauses before a request is sent again by its route (n is
// the attempt, from 0): after a NOT_LEADER whose hint moved the shard
// (hopMoved), not at all the first time, then by retryBackoff capped at
// the answer's retry delay, for the first fastMoves attempts; at the
// server a shard is moving to (hopAwait), moveRetry; else (no owner
// known, an owner that did not answer, hints that keep moving it) by
// retryBackoff, at least the answer's retry delay. It returns ctx's error
// or ErrClosed when one ends first.
func (c *Client) rerouteWait(ctx context.Context, n int, e *Error, h hop) error {
	moved := h == hopMoved
	var hint time.Duration
	if e != nil {
		hint = e.RetryAfter
	}
	deadline, _ := ctx.Deadline()
	var d time.Duration
	switch {
	case h == hopAwait && n < maxAwaits:
		d = moveRetry
	case moved && n == 0:
		return ctx.Err()
	case moved && n < fastMoves:
		d = retryBackoff.delay(n-1, deadline)
		if hint > 0 {
			d = min(d, hint)
		}
	default:
		d = retryBackoff.hinted(n, deadline, hint)
	}
	return pause(ctx, c.ctx, d)
}

// learn reads the shard map in the background, unless a read runs or
// the last one was too recent.
func (c *Client) learn() {
	c.mu.Lock()
	if c.closed || c.learning || time.Now().Before(c.learnAt) {
		c.mu.Unlock()
		return
	}
	c.learning = true
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		c.readMap()
	}()
}

// readMap asks the servers for the shard map (GetCluster, askCluster)
// and applies the first answer at once, then the later ones, each shard
// taking the highest epoch any server names: a frozen server does not
// delay the read, and a server cut off from etcd, which still names
// itself, does not win over one that knows the newer owner.
func (c *Client) readMap() {
	answers, n := c.askCluster()
	var firstErr error
	applied := false
	for range n {
		a := <-answers
		if a.err != nil {
			if firstErr == nil || a.dialed {
				firstErr = a.err
			}
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return
		}
		left := c.applyMapLocked(a.resp, !applied)
		if !applied {
			applied = true
			c.learning = false
			c.learnFails = 0
			c.learnAt = time.Now().Add(relearnEvery)
		}
		var leases []*Lease
		if left {
			for _, l := range c.leases {
				leases = append(leases, l)
			}
		}
		c.mu.Unlock()
		for _, l := range leases {
			l.kickRenew() // at its shard's owner now
		}
		if left {
			c.kickShares()
		}
		c.kickMoved(c.routes.Load())
	}
	if applied {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learning = false
	if c.closed {
		return
	}
	err := firstErr
	c.learnAt = time.Now().Add(shareBackoff.delay(c.learnFails, time.Time{}))
	c.learnFails++
	switch status.Code(err) {
	case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
		// Not a server that can tell (or not to this client): route as
		// without shards, following NOT_LEADER as before.
		if c.routes.Load() == nil {
			c.log.Warn("tollgate: cannot read the cluster's shard map; sending every call to the dialed servers", "err", err)
			c.routes.Store(&routes{count: 1})
		}
	default:
		c.log.Debug("tollgate: cannot read the cluster's shard map; trying again later", "err", err)
	}
}

// clusterAnswer is one server's answer to GetCluster.
type clusterAnswer struct {
	resp   *tollgatev1.GetClusterResponse
	err    error
	dialed bool // from the dialed target
}

// askCluster asks the dialed target and up to maxAsked-1 servers the
// Client has a live stream to, all at once, for the cluster, each within
// askTimeout; the n answers come on the channel as they arrive.
func (c *Client) askCluster() (<-chan clusterAnswer, int) {
	conns := []*grpc.ClientConn{c.conn}
	c.mu.Lock()
	for _, ln := range c.links {
		if ln.cur != nil && len(conns) < maxAsked {
			conns = append(conns, ln.conn)
		}
	}
	c.mu.Unlock()
	answers := make(chan clusterAnswer, len(conns))
	for k, conn := range conns {
		go func() {
			ctx, cancel := context.WithTimeout(c.ctx, askTimeout)
			defer cancel()
			resp, err := tollgatev1.NewAdminServiceClient(conn).GetCluster(ctx, &tollgatev1.GetClusterRequest{})
			answers <- clusterAnswer{resp: resp, err: err, dialed: k == 0}
		}()
	}
	return answers, len(conns)
}

// applyMapLocked makes resp's shard map the routes: an entry replaces the
// known one unless its epoch is older; an entry of no owner keeps it. An
// answer that is not the first of its read (fresh false) only moves a
// shard to a higher epoch, and keeps the shard count and self. It
// reports whether the Client left the dialed target's stream for the
// servers' own (leaveMainLocked): its leases are to renew at once.
func (c *Client) applyMapLocked(resp *tollgatev1.GetClusterResponse, fresh bool) (left bool) {
	n := int(resp.GetShardCount())
	r := c.routes.Load()
	if n <= 1 {
		if r == nil {
			c.routes.Store(&routes{count: 1})
		}
		return false
	}
	if n > shard.MaxCount {
		c.log.Warn("tollgate: the cluster's shard map is not valid; ignoring it", "shard_count", n)
		return false
	}
	if !fresh && (r == nil || r.count != n) {
		return false
	}
	var old *routes
	if r == nil || r.count != n {
		old = r
		r = &routes{count: n, shards: make([]atomic.Pointer[route], n)}
		c.routes.Store(r)
		if old == nil || old.count <= 1 {
			left = c.leaveMainLocked()
			old = nil
		}
	}
	for _, so := range resp.GetShards() {
		i := int(so.GetShard())
		if i < 0 || i >= n {
			continue
		}
		addr, epoch := so.GetMovingTo(), int64(0) // a planned move's target, as its hint
		if addr == "" {
			addr, epoch = so.GetOwner(), so.GetEpoch()
		}
		// A route whose server cannot be reached yields to the map
		// whatever the epoch it came with (a hint may have named a server
		// that never answers, with any epoch).
		cur := r.shards[i].Load()
		if !fresh && cur != nil && so.GetEpoch() <= cur.epoch {
			continue
		}
		c.setRouteLocked(r, i, addr, epoch, fresh && cur != nil && !cur.ln.live())
	}
	if self, prev := resp.GetSelf(), r.self.Load(); fresh && self != "" && (prev == nil || prev.addr != self) {
		if ln := c.linkLocked(self); ln != nil {
			ln.shards++
			r.self.Store(ln)
			if prev != nil {
				c.unrefLocked(prev)
			}
		}
	}
	if old != nil {
		c.dropRoutesLocked(old) // after the new routes took the links they share
	}
	return left
}

// setRouteLocked routes shard i of r to addr with epoch (0: a planned
// move's target, keeping the known epoch) unless the known route is newer
// and not overridden (override); it reports whether the shard now routes
// to addr.
func (c *Client) setRouteLocked(r *routes, i int, addr string, epoch int64, override bool) bool {
	if addr == "" {
		return false
	}
	cur := r.shards[i].Load()
	target := epoch == 0
	if cur != nil {
		if epoch != 0 && epoch < cur.epoch && !override {
			return false // older than what is known
		}
		if epoch == 0 {
			epoch = cur.epoch
		}
		if cur.addr == addr {
			if epoch > cur.epoch || target != cur.target {
				r.shards[i].Store(&route{addr: addr, epoch: epoch, ln: cur.ln, target: target, at: time.Now()})
			}
			return true
		}
	}
	ln := c.linkLocked(addr)
	if ln == nil {
		return false
	}
	ln.shards++
	r.shards[i].Store(&route{addr: addr, epoch: epoch, ln: ln, target: target, at: time.Now()})
	if cur != nil {
		if epoch > cur.epoch {
			// A new term (not a planned move's target, which the old owner
			// still answers for until it hands off).
			c.noteMovedLocked(i, !cur.ln.live())
		}
		c.unrefLocked(cur.ln)
	}
	return true
}

// noteNotLeader applies a NOT_LEADER answer about pool's shard from the
// server of link from, and reports whether the request is to be sent
// again by its route (the cluster is sharded, or the server knows shards
// and the map is being read), and whether the shard now routes where the
// answer says (hopMoved). A hint naming an owner moves the shard there;
// one naming nobody, the answering server itself, an older epoch or
// another shard makes the Client read the map again. The server a
// planned move's hint named, answering within moveGrace that it does not
// lead yet, keeps the route (hopAwait).
func (c *Client) noteNotLeader(pool string, e *Error, from *link) (reroute bool, h hop) {
	r := c.routes.Load()
	s, hasShard := e.Metadata["shard"]
	switch {
	case r == nil && hasShard:
		c.learn() // a server that knows shards: route once the map is known
		return true, hopAgain
	case r == nil:
		c.learn()
		return false, hopAgain
	case r.count <= 1:
		if hasShard && s != "0" {
			c.learn() // the map read said one shard; read it again
		}
		return false, hopAgain
	}
	i := shard.Of(pool, r.count)
	leader := e.Metadata["leader"]
	epoch, err := strconv.ParseInt(e.Metadata["epoch"], 10, 64)
	if cur := r.shards[i].Load(); cur != nil && cur.target && cur.ln == from && time.Since(cur.at) < moveGrace &&
		err == nil && (leader == "" || leader == from.addr || epoch != 0 && epoch <= cur.epoch) && (!hasShard || s == strconv.Itoa(i)) {
		return true, hopAwait // it names the owner it replaces, or nobody yet
	}
	if leader == "" || err != nil || epoch < 0 || leader == from.addr || hasShard && s != strconv.Itoa(i) {
		c.learn()
		return true, hopAgain
	}
	c.mu.Lock()
	// The server the shard routes to disowns it: its word wins over the
	// epoch the route came with.
	cur := r.shards[i].Load()
	disowned := cur != nil && cur.ln == from
	moved := !c.closed && c.routes.Load() == r && c.setRouteLocked(r, i, leader, epoch, disowned)
	c.mu.Unlock()
	if !moved {
		c.learn()
		return true, hopAgain
	}
	c.kickMoved(r)
	return true, hopMoved
}

// linkLocked returns the link to the server at addr, making it if there
// is none; nil when maxLinks links are in use or addr cannot be dialed.
func (c *Client) linkLocked(addr string) *link {
	if ln := c.links[addr]; ln != nil {
		return ln
	}
	if len(c.links) >= maxLinks {
		if !c.warnedMax {
			c.warnedMax = true
			c.log.Warn("tollgate: the cluster names more servers than a client keeps connections to; calls for the shards of the others are sent where their map last pointed", "max", maxLinks, "server", addr)
		}
		return nil
	}
	conn, err := grpc.NewClient(addr, c.linkOpts...)
	if err != nil {
		c.log.Warn("tollgate: cannot dial the owner of a shard", "server", addr, "err", err)
		return nil
	}
	ln := c.newLink(addr, conn)
	c.links[addr] = ln
	return ln
}

// unrefLocked counts one shard fewer routed to ln, and retires it when
// none is (retireLocked).
func (c *Client) unrefLocked(ln *link) {
	ln.shards--
	if ln.shards > 0 {
		return
	}
	delete(c.links, ln.addr)
	ln.retireLocked()
}

// retireLocked stops sending new requests on the link; its stream ends
// once every request sent on it is answered (a grant in flight is not
// lost), or after drainLimit, and then a server's link closes its
// connection.
func (ln *link) retireLocked() {
	if ln.retired {
		return
	}
	ln.retired = true
	ln.draining.Store(true)
	if !ln.started && ln != ln.c.main {
		_ = ln.conn.Close()
	}
	if ln.cur == nil || ln.cur.idle() {
		ln.cancel()
		return
	}
	// A server that no longer leads answers what it holds at once; one
	// that does not answer, or calls abandoned on it, must not keep the
	// stream forever.
	time.AfterFunc(drainLimit, ln.cancel)
}

// dropRoutesLocked retires the links of a map being replaced.
func (c *Client) dropRoutesLocked(r *routes) {
	for i := range r.shards {
		if rt := r.shards[i].Load(); rt != nil {
			c.unrefLocked(rt.ln)
		}
	}
	if self := r.self.Load(); self != nil {
		c.unrefLocked(self)
	}
}

// leaveMainLocked ends the dialed target's Session stream once the
// Client routes by shards (the servers' own links carry every request),
// so that it keeps one stream per server; the caller has its leases renew
// at their shards' owners at once. The connection stays (Conn,
// GetCluster). It reports whether it did.
func (c *Client) leaveMainLocked() bool {
	if c.main.retired {
		return false
	}
	c.main.retireLocked()
	return true
}

// stuck handles a stream of ln found stuck on server (its renew was not
// answered in time, or no Welcome came): the dialed target's connection to
// that server starts over (servers.reconnect); a shard owner's makes the
// Client read the map again, which names a new owner once the stuck one's
// etcd session expires.
func (ln *link) stuck(server string) {
	c := ln.c
	if ln != c.main {
		c.learn()
		return
	}
	if c.servers != nil && server != "" {
		c.servers.reconnect(server)
	}
}
