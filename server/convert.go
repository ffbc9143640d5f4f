package server

import (
	"errors"

	"github.com/tollgate/tollgate/limiter"
)

// parseHolderLeaseID is ids.Parse for a holder's call on pool, except that
// an id refused in a pool that does not exist reports the missing pool,
// which says more.
func (s *Server) parseHolderLeaseID(pool, id string) (uint64, error) {
	tok, err := s.ids.Parse(pool, id)
	if err != nil && errors.Is(err, limiter.ErrLeaseNotFound) {
		if _, perr := s.Engine().GetPool(pool); perr != nil {
			return 0, perr
		}
	}
	return tok, err
}
