package limiter

// poolCounters are the counters of a pool's PoolStatus that the pool
// keeps itself (statusLocked computes the gauges, and the parts add
// theirs): the whole status is nearly three times their size.
type poolCounters struct {
	Granted, Released, Expired, Revoked, Rejected, WaitTimeouts, Canceled int64
	TokensGranted, Readopted                                              int64
	SuccessesReported, ErrorsReported, TimeoutsReported                   int64
}

// status is the PoolStatus holding the counters.
func (c *poolCounters) status() PoolStatus {
	s := PoolStatus{
		Granted: c.Granted, Released: c.Released, Expired: c.Expired, Revoked: c.Revoked, Rejected: c.Rejected,
		WaitTimeouts: c.WaitTimeouts, Canceled: c.Canceled, TokensGranted: c.TokensGranted, Readopted: c.Readopted,
	}
	s.SuccessesReported, s.ErrorsReported, s.TimeoutsReported = c.SuccessesReported, c.ErrorsReported, c.TimeoutsReported
	return s
}
