package client

import (
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// This file routes what the server pushes about shares (ShareEvent on the
// Session stream) to the Limiter that holds the share, and asks every
// Limiter to refresh on a new stream, so that the server pushes to it.

// shareKey names a live share.
type shareKey struct{ pool, id string }

// rememberShare registers l as the holder of share id of pool.
func (c *Client) rememberShare(pool, id string, l *Limiter) {
	c.rates.mu.Lock()
	defer c.rates.mu.Unlock()
	if c.rates.shares == nil {
		c.rates.shares = make(map[shareKey]*Limiter)
	}
	c.rates.shares[shareKey{pool, id}] = l
}

// forgetShare unregisters share id of pool ("" does nothing).
func (c *Client) forgetShare(pool, id string) {
	if id == "" {
		return
	}
	c.rates.mu.Lock()
	delete(c.rates.shares, shareKey{pool, id})
	c.rates.mu.Unlock()
}

// shareEvent applies a pushed change to the share's Limiter.
func (c *Client) shareEvent(ev *tollgatev1.ShareEvent) {
	sh := ev.GetShare()
	c.rates.mu.Lock()
	l := c.rates.shares[shareKey{sh.GetPool(), sh.GetId()}]
	c.rates.mu.Unlock()
	if l == nil {
		return
	}
	switch ev.GetType() {
	case tollgatev1.ShareEventType_SHARE_EVENT_TYPE_CHANGED:
		l.mu.Lock()
		if g := &l.share; g.id == sh.GetId() && l.state == stateShare && sh.GetVersion() > g.version {
			g.version, g.rate, g.burst = sh.GetVersion(), sh.GetRate(), int(sh.GetBurst())
			l.setLocked(stateShare, nil)
		}
		l.mu.Unlock()
	default: // expired or revoked: stop spending it, and ask for a new one
		l.dropShare(sh.GetId(), stateWaiting, nil)
		l.kickRefresh()
	}
}

// kickShares asks every Limiter to refresh at once (a new stream is up).
func (c *Client) kickShares() {
	c.rates.mu.Lock()
	ls := make([]*Limiter, 0, len(c.rates.shares))
	for _, l := range c.rates.shares {
		ls = append(ls, l)
	}
	c.rates.mu.Unlock()
	for _, l := range ls {
		l.kickRefresh()
	}
}
