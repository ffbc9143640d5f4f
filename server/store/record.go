package store

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	storev1 "github.com/tollgate/tollgate/proto/tollgate/store/v1"
)

// A pool's record is a storev1.PoolRecord in protobuf's binary form: a
// version, the API's Pool message (so that a field added to a pool is
// stored without a change here), the engine's durable state and the
// suspension. Records of version 1 were JSON; they are
// told apart by their first byte, '{', which no PoolRecord starts with
// (it would be field 15 as a group).

// recordVersion is the version of the records this code writes; it also
// reads version 2, whose records kept ended leases and a readopt floor in
// place of the live set.
const (
	recordVersion    = 3
	oldRecordVersion = 2
)

// stateFields binds each field of the engine's durable state to its
// stored field.
func stateFields(s *limiter.DurableState, r *storev1.DurableState) []poolconv.Field {
	return []poolconv.Field{
		poolconv.Same("token_ceiling", &s.TokenCeiling, &r.TokenCeiling),
		poolconv.Time("lease_horizon", &s.LeaseHorizon, &r.LeaseHorizon),
		poolconv.Dur("ttl_bound", &s.TTLBound, &r.TtlBound),
		poolconv.Time("share_horizon", &s.ShareHorizon, &r.ShareHorizon),
		poolconv.Dur("share_ttl_bound", &s.ShareTTLBound, &r.ShareTtlBound),
		poolconv.Same("effective_concurrency", &s.EffectiveConcurrency, &r.EffectiveConcurrency),
		poolconv.Same("effective_rate", &s.EffectiveRate, &r.EffectiveRate),
		poolconv.Same("live_mark", &s.LiveMark, &r.LiveMark),
	}
}

// encode returns the stored bytes of sp (its instances are stored apart,
// in the resources bucket).
func encode(sp limiter.SavedPool) ([]byte, error) {
	r := &storev1.PoolRecord{
		Version:   recordVersion,
		Pool:      poolconv.ToProto(sp.Config, sp.CreateTime, sp.UpdateTime),
		State:     &storev1.DurableState{},
		Suspended: sp.Suspended,
	}
	poolconv.To(stateFields(&sp.State, r.State))
	if sp.State.HeldBound >= 0 { // unset: unknown
		r.State.HeldBound = proto.Int64(sp.State.HeldBound)
	}
	for _, u := range sp.State.Unsure {
		r.State.Unsure = append(r.State.Unsure, &storev1.TokenRange{First: u.First, Last: u.Last})
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding pool %q: %w", sp.Config.Name, err)
	}
	return b, nil
}

// decode reads the record stored under key, of either version. The times
// come back in UTC without a monotonic reading.
func decode(key, v []byte) (limiter.SavedPool, error) {
	var sp limiter.SavedPool
	var err error
	if len(v) > 0 && v[0] == '{' {
		sp, err = decodeJSON(key, v)
	} else {
		sp, err = decodeProto(key, v)
	}
	if err == nil && sp.Config.Name != string(key) {
		return limiter.SavedPool{}, fmt.Errorf("the record stored under %q names pool %q; the store is damaged", key, sp.Config.Name)
	}
	return sp, err
}

func decodeProto(key, v []byte) (limiter.SavedPool, error) {
	var r storev1.PoolRecord
	if err := proto.Unmarshal(v, &r); err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	switch v := r.GetVersion(); {
	case v > recordVersion:
		return limiter.SavedPool{}, fmt.Errorf("the record of pool %q has version %d, but this server reads versions 1 to %d: a newer tollgate wrote it, or the store is damaged; run the version that wrote it, or restore the data directory from a backup", key, v, recordVersion)
	case v < oldRecordVersion: // no binary record was written with another version
		return limiter.SavedPool{}, damaged(key, fmt.Errorf("a binary record of version %d", v))
	}
	pool := r.GetPool()
	if pool == nil || r.GetState() == nil {
		return limiter.SavedPool{}, damaged(key, fmt.Errorf("it has no pool or no state"))
	}
	sp := limiter.SavedPool{Suspended: r.GetSuspended()}
	var err error
	if sp.Config, err = poolconv.FromProto(pool); err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	err = poolconv.From(append(stateFields(&sp.State, r.State),
		poolconv.Time("create_time", &sp.CreateTime, &pool.CreateTime),
		poolconv.Time("update_time", &sp.UpdateTime, &pool.UpdateTime)), "")
	if err != nil {
		return limiter.SavedPool{}, damaged(key, err)
	}
	sp.State.HeldBound = -1 // a record from before it was kept
	if r.State.HeldBound != nil {
		sp.State.HeldBound = r.State.GetHeldBound()
	}
	for _, u := range r.State.GetUnsure() {
		if u.GetFirst() > u.GetLast() {
			return limiter.SavedPool{}, damaged(key, fmt.Errorf("state.unsure: range %d to %d", u.GetFirst(), u.GetLast()))
		}
		sp.State.Unsure = append(sp.State.Unsure, limiter.TokenRange{First: u.GetFirst(), Last: u.GetLast()})
	}
	if r.GetVersion() == oldRecordVersion { // ended leases and a readopt floor in place of the live set
		sp.State.LiveMark = r.State.GetReadoptFloor()
		for _, e := range r.State.GetEnded() {
			if err := e.GetExpiry().CheckValid(); err != nil {
				return limiter.SavedPool{}, damaged(key, fmt.Errorf("state.ended: %w", err))
			}
			sp.State.LegacyEnded = append(sp.State.LegacyEnded, limiter.EndedLease{Token: e.GetToken(), Expiry: e.GetExpiry().AsTime(), Revoked: e.GetRevoked()})
		}
	}
	return sp, nil
}

func damaged(key []byte, err error) error {
	return fmt.Errorf("the record of pool %q is damaged (%v); restore the data directory from a backup, or delete the pool's record", key, err)
}
