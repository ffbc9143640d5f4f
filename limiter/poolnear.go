package limiter

import (
	"github.com/tollgate/tollgate/internal/suggest"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Bounds of the search for the pool names near a missing one, so that a
// caller naming missing pools costs the server little: no search past
// nearMaxPools pools, and at most nearMaxCompared names compared (those
// whose length is close enough to be near at all).
const (
	nearMaxPools    = 10_000
	nearMaxCompared = 64
)

// near returns up to suggest.MaxNames pool names close to name, for a "did
// you mean" hint, or nil.
func (x *poolIndex) near(name string) []string {
	x.mu.RLock()
	if len(x.m) > nearMaxPools {
		x.mu.RUnlock()
		return nil
	}
	var names []string
	for n := range x.m {
		if d := len(n) - len(name); d >= -3 && d <= 3 {
			names = append(names, n)
			if len(names) == nearMaxCompared {
				break
			}
		}
	}
	x.mu.RUnlock()
	return suggest.Near(name, names)
}

// poolNotFound is the package's poolNotFound with the names of the pools
// near name, if any, in its message.
func (e *Engine) poolNotFound(name string) error {
	err := poolNotFound(name)
	le, ok := err.(*apierr.Error)
	if !ok || le.Reason != apierr.ReasonPoolNotFound {
		return err
	}
	if hint := suggest.Hint(e.pools.near(name), quote); hint != "" {
		return errorf(apierr.ErrPoolNotFound, "pool %q not found%s; create it first", name, hint)
	}
	return err
}
