package limiter

import (
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// tombstoneCap is how many ended leases a pool remembers, so that a late
// Renew or Release can say "expired" rather than just "not found". It bounds
// memory per pool; older endings are forgotten.
const tombstoneCap = 128

// tombstone records a lease that ended without its holder's release.
type tombstone struct {
	token  uint64
	reason EndReason
	at     time.Time
	msg    string // why, for EndRevoked
}

// tombstones is a ring of the most recent endings, made at the first.
// Lookups scan it: they happen only on error paths.
type tombstones struct {
	*tombstoneRing // nil: none yet
}

type tombstoneRing struct {
	ring []tombstone
	next int
}

// add remembers that token ended for reason at t.
func (ts *tombstones) add(token uint64, reason EndReason, t time.Time) {
	ts.addMsg(token, reason, t, "")
}

// addMsg is add with the message of a revocation.
func (ts *tombstones) addMsg(token uint64, reason EndReason, t time.Time, msg string) {
	if ts.tombstoneRing == nil {
		ts.tombstoneRing = &tombstoneRing{}
	}
	if len(ts.ring) < tombstoneCap {
		ts.ring = append(ts.ring, tombstone{token, reason, t, msg})
		return
	}
	ts.ring[ts.next] = tombstone{token, reason, t, msg}
	ts.next = (ts.next + 1) % tombstoneCap
}

// lookup returns the tombstone of token, if still remembered.
func (ts *tombstones) lookup(token uint64) (tombstone, bool) {
	if ts.tombstoneRing == nil {
		return tombstone{}, false
	}
	for _, t := range ts.ring {
		if t.token == token {
			return t, true
		}
	}
	return tombstone{}, false
}

// missingErr explains why token is not a live lease of pool, whose newest
// token is lastToken: revoked or expired if remembered here, else never
// issued or released.
func (ts *tombstones) missingErr(pool string, token, lastToken uint64) error {
	if t, ok := ts.lookup(token); ok && t.reason == EndRevoked {
		return errorf(apierr.ErrLeaseRevoked, "lease %d of pool %q was revoked at %s: %s; its permits went back to the pool; stop the work it protected and acquire a new lease", token, pool, t.at.UTC().Format(time.RFC3339Nano), t.msg)
	}
	if t, ok := ts.lookup(token); ok {
		return errorf(apierr.ErrLeaseExpired, "lease %d of pool %q expired at %s: it was not renewed within its TTL and its permits went back to the pool; stop the work it protected and acquire a new lease", token, pool, t.at.UTC().Format(time.RFC3339Nano))
	}
	if token > lastToken {
		return errorf(apierr.ErrLeaseNotFound, "pool %q never issued lease %d (its newest is %d); pass the lease id exactly as Acquire returned it", pool, token, lastToken)
	}
	return errorf(apierr.ErrLeaseNotFound, "lease %d is not held in pool %q: it was released, or it ended long ago", token, pool)
}
