package limiter

import (
	"fmt"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Bounds of an EnvoyRule.
const (
	MaxEnvoyDomainLen      = 255
	MaxEnvoyDescriptorKeys = 16
	MaxEnvoyKeyLen         = 255
	DefaultEnvoyMaxBuckets = 10_000
	MaxEnvoyMaxBuckets     = 1_000_000
)

// EnvoyRule maps requests of Envoy's global rate-limit API to a pool: a
// descriptor matches when its domain is Domain and its entries have the
// keys of Descriptors, in order, with the value each fixes. The engine
// only stores and checks it; the rate-limit service reads it. The zero
// value is no rule.
type EnvoyRule struct {
	Domain      string
	Descriptors []EnvoyDescriptorKey
	// MaxBuckets bounds the per-value buckets of a rule with a key of any
	// value; 0 means DefaultEnvoyMaxBuckets.
	MaxBuckets int64
}

// EnvoyDescriptorKey is one entry of an EnvoyRule: a key, and the value it
// must have ("" means any value, one bucket per distinct value).
type EnvoyDescriptorKey struct {
	Key   string
	Value string
}

// IsZero reports whether r is no rule.
func (r EnvoyRule) IsZero() bool {
	return r.Domain == "" && len(r.Descriptors) == 0 && r.MaxBuckets == 0
}

// PerValue reports whether some key of r takes any value, so that r keeps
// a bucket per distinct value rather than using the pool's own.
func (r EnvoyRule) PerValue() bool {
	for _, d := range r.Descriptors {
		if d.Value == "" {
			return true
		}
	}
	return false
}

func (r EnvoyRule) withDefaults() EnvoyRule {
	if len(r.Descriptors) == 0 {
		r.Descriptors = nil
	}
	if !r.IsZero() && r.MaxBuckets == 0 {
		r.MaxBuckets = DefaultEnvoyMaxBuckets
	}
	return r
}

func (r EnvoyRule) validate(pool string, rate float64) error {
	if r.IsZero() {
		return nil
	}
	bad := func(format string, args ...any) error {
		return errorf(apierr.ErrInvalidArgument, "pool %q: envoy.%s", pool, fmt.Sprintf(format, args...))
	}
	switch {
	case r.Domain == "" || len(r.Domain) > MaxEnvoyDomainLen:
		return bad("domain is %d bytes; give 1 to %d", len(r.Domain), MaxEnvoyDomainLen)
	case len(r.Descriptors) == 0 || len(r.Descriptors) > MaxEnvoyDescriptorKeys:
		return bad("descriptors has %d keys; give 1 to %d, such as [{key: remote_address}]", len(r.Descriptors), MaxEnvoyDescriptorKeys)
	case r.MaxBuckets < 0 || r.MaxBuckets > MaxEnvoyMaxBuckets:
		return bad("max_buckets %d is out of range [0, %d]", r.MaxBuckets, MaxEnvoyMaxBuckets)
	case rate == 0:
		return bad("domain %q needs a rate: Envoy's rate-limit API takes tokens, so set the pool's rate", r.Domain)
	}
	for i, d := range r.Descriptors {
		if d.Key == "" || len(d.Key) > MaxEnvoyKeyLen {
			return bad("descriptors[%d].key is %d bytes; give 1 to %d", i, len(d.Key), MaxEnvoyKeyLen)
		}
		if len(d.Value) > MaxEnvoyKeyLen {
			return bad("descriptors[%d].value is %d bytes; the most is %d", i, len(d.Value), MaxEnvoyKeyLen)
		}
	}
	return nil
}
