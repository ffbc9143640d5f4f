package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// record is the on-disk form of a limiter.SavedPool: JSON with explicit
// field names and durations in nanoseconds, so that renaming Go fields never
// changes the file. Fields are only ever added; a reader ignores unknown ones.
type record struct {
	Name             string    `json:"name"`
	Description      string    `json:"description,omitempty"`
	ConcurrencyLimit int64     `json:"concurrency_limit,omitempty"`
	Rate             float64   `json:"rate,omitempty"`
	Burst            int64     `json:"burst,omitempty"`
	DefaultLeaseTTL  int64     `json:"default_lease_ttl_ns"`
	MaxLeaseTTL      int64     `json:"max_lease_ttl_ns"`
	MaxWaiters       int64     `json:"max_waiters"`
	CreateTime       time.Time `json:"create_time"`
	UpdateTime       time.Time `json:"update_time"`
	TokenCeiling     uint64    `json:"token_ceiling"`
	LeaseHorizon     time.Time `json:"lease_horizon"`
	TTLBound         int64     `json:"ttl_bound_ns"`
	// Added with the recovery of rate shares: the share horizon.
	ShareHorizon  time.Time `json:"share_horizon,omitzero"`
	ShareTTLBound int64     `json:"share_ttl_bound_ns,omitempty"`
	// Added with persisted adaptive limits: the lowered effective values.
	EffectiveConcurrency int64   `json:"effective_concurrency,omitempty"`
	EffectiveRate        float64 `json:"effective_rate,omitempty"`
	// Added with adaptive limits and rate shares (adaptive_record.go).
	SafeRate float64         `json:"safe_rate,omitempty"`
	Adaptive *adaptiveRecord `json:"adaptive,omitempty"`
	// Added with revocation: "revoke", or absent for wait.
	RevocationPolicy string `json:"revocation_policy,omitempty"`
	// Added with suspend/resume: the pool is suspended.
	Suspended bool `json:"suspended,omitempty"`
	// Added with event marks: as configured (0 or absent: the default;
	// -1: off).
	OverloadMark         int64   `json:"overload_mark,omitempty"`
	NearFullMark         float64 `json:"near_full_mark,omitempty"`
	LowUtilisationMark   float64 `json:"low_utilisation_mark,omitempty"`
	LowUtilisationPeriod int64   `json:"low_utilisation_period_ns,omitempty"`
	// Added with active and passive pools: "active" or "passive" (absent:
	// free), "spread" (absent: reuse). An active pool's instances are kept
	// apart, in the resources bucket (resources.go); Resources is only
	// read, for records written before that.
	ResourceKind string           `json:"resource_kind,omitempty"`
	Selection    string           `json:"selection_policy,omitempty"`
	Resources    []resourceRecord `json:"resources,omitempty"`
	// Added with the refusal of ended leases after a restart: no lease
	// at or below readopt_floor is re-adopted, nor any in ended.
	ReadoptFloor uint64        `json:"readopt_floor,omitempty"`
	Ended        []endedRecord `json:"ended,omitempty"`
}

// endedRecord is a lease released or revoked before its expiry.
type endedRecord struct {
	Token   uint64 `json:"t"`
	Expiry  int64  `json:"e"` // Unix ns
	Revoked bool   `json:"r,omitempty"`
}

// resourceRecord is an active pool's instance on disk.
type resourceRecord struct {
	ID         string            `json:"id"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// encode returns the stored bytes of sp.
func encode(sp limiter.SavedPool) ([]byte, error) {
	c := sp.Config
	r := record{
		Name:                 c.Name,
		Description:          c.Description,
		ConcurrencyLimit:     c.ConcurrencyLimit,
		Rate:                 c.Rate,
		Burst:                c.Burst,
		DefaultLeaseTTL:      int64(c.DefaultLeaseTTL),
		MaxLeaseTTL:          int64(c.MaxLeaseTTL),
		MaxWaiters:           c.MaxWaiters,
		CreateTime:           sp.CreateTime,
		UpdateTime:           sp.UpdateTime,
		TokenCeiling:         sp.State.TokenCeiling,
		LeaseHorizon:         sp.State.LeaseHorizon,
		TTLBound:             int64(sp.State.TTLBound),
		ShareHorizon:         sp.State.ShareHorizon,
		ShareTTLBound:        int64(sp.State.ShareTTLBound),
		EffectiveConcurrency: sp.State.EffectiveConcurrency,
		EffectiveRate:        sp.State.EffectiveRate,
		Suspended:            sp.Suspended,
		SafeRate:             c.SafeRate,
		Adaptive:             adaptiveToRecord(c.Adaptive),

		OverloadMark:         c.OverloadMark,
		NearFullMark:         c.NearFullMark,
		LowUtilisationMark:   c.LowUtilisationMark,
		LowUtilisationPeriod: int64(c.LowUtilisationPeriod),
	}
	r.ReadoptFloor = sp.State.ReadoptFloor
	for _, e := range sp.State.Ended {
		r.Ended = append(r.Ended, endedRecord{Token: e.Token, Expiry: e.Expiry.UnixNano(), Revoked: e.Revoked})
	}
	if c.RevocationPolicy != limiter.RevocationWait {
		r.RevocationPolicy = c.RevocationPolicy.String()
	}
	if c.ResourceKind != limiter.ResourceFree {
		r.ResourceKind = c.ResourceKind.String()
	}
	if c.Selection != limiter.SelectReuse {
		r.Selection = c.Selection.String()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encoding pool %q: %w", c.Name, err)
	}
	return b, nil
}

// decode reads the record stored under key. The times come back in UTC
// without a monotonic reading, as written.
func decode(key, v []byte) (limiter.SavedPool, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return limiter.SavedPool{}, fmt.Errorf("the record of pool %q is damaged (%v); restore the data directory from a backup, or delete the pool's record", key, err)
	}
	policy, err := limiter.ParseRevocationPolicy(r.RevocationPolicy)
	if err != nil {
		return limiter.SavedPool{}, fmt.Errorf("the record of pool %q is damaged (%v); restore the data directory from a backup, or delete the pool's record", key, err)
	}
	kind, err := limiter.ParseResourceKind(r.ResourceKind)
	if err != nil {
		return limiter.SavedPool{}, fmt.Errorf("the record of pool %q is damaged (%v); restore the data directory from a backup, or delete the pool's record", key, err)
	}
	selection, err := limiter.ParseSelectionPolicy(r.Selection)
	if err != nil {
		return limiter.SavedPool{}, fmt.Errorf("the record of pool %q is damaged (%v); restore the data directory from a backup, or delete the pool's record", key, err)
	}
	var resources []limiter.Resource
	for _, res := range r.Resources {
		resources = append(resources, limiter.Resource{ID: res.ID, Attributes: res.Attributes})
	}
	var ended []limiter.EndedLease
	for _, e := range r.Ended {
		ended = append(ended, limiter.EndedLease{Token: e.Token, Expiry: time.Unix(0, e.Expiry).UTC(), Revoked: e.Revoked})
	}
	if r.Name != string(key) {
		return limiter.SavedPool{}, fmt.Errorf("the record stored under %q names pool %q; the store is damaged", key, r.Name)
	}
	return limiter.SavedPool{
		Config: limiter.PoolConfig{
			Name:             r.Name,
			Description:      r.Description,
			ConcurrencyLimit: r.ConcurrencyLimit,
			Rate:             r.Rate,
			Burst:            r.Burst,
			DefaultLeaseTTL:  time.Duration(r.DefaultLeaseTTL),
			MaxLeaseTTL:      time.Duration(r.MaxLeaseTTL),
			MaxWaiters:       r.MaxWaiters,
			SafeRate:         r.SafeRate,
			Adaptive:         r.Adaptive.config(),
			RevocationPolicy: policy,
			ResourceKind:     kind,
			Selection:        selection,

			OverloadMark:         r.OverloadMark,
			NearFullMark:         r.NearFullMark,
			LowUtilisationMark:   r.LowUtilisationMark,
			LowUtilisationPeriod: time.Duration(r.LowUtilisationPeriod),
		},
		Resources:  resources,
		CreateTime: r.CreateTime,
		UpdateTime: r.UpdateTime,
		Suspended:  r.Suspended,
		State: limiter.DurableState{
			TokenCeiling:         r.TokenCeiling,
			LeaseHorizon:         r.LeaseHorizon,
			TTLBound:             time.Duration(r.TTLBound),
			ShareHorizon:         r.ShareHorizon,
			ShareTTLBound:        time.Duration(r.ShareTTLBound),
			EffectiveConcurrency: r.EffectiveConcurrency,
			EffectiveRate:        r.EffectiveRate,
			ReadoptFloor:         r.ReadoptFloor,
			Ended:                ended,
		},
	}, nil
}
