package limiter

import (
	"math"
	"reflect"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Limits and defaults of pool configuration.
const (
	MaxPoolNameLen     = 128
	MaxConcurrency     = 1_000_000_000
	MaxRate            = 1e9
	MaxWaitersLimit    = 1_000_000
	MinLeaseTTL        = 100 * time.Millisecond
	MaxLeaseTTLLimit   = 24 * time.Hour
	DefaultLeaseTTL    = 15 * time.Second
	DefaultMaxLeaseTTL = 5 * time.Minute
	DefaultMaxWaiters  = 1024
	MaxDescriptionLen  = 1024
	MaxClientIDLen     = 256
)

// PoolConfig is what an operator declares about a pool. Zero values of the
// optional fields mean "the default"; WithDefaults fills them in.
type PoolConfig struct {
	// Name: 1 to MaxPoolNameLen characters of [A-Za-z0-9._:/-].
	Name string
	// Description for operators; at most MaxDescriptionLen bytes.
	Description string
	// ConcurrencyLimit is the most permit weight live leases may hold at
	// once; 0 means no concurrency limit.
	ConcurrencyLimit int64
	// Rate is the token bucket's refill in tokens per second; 0 means no
	// rate limit. A pool needs a ConcurrencyLimit, a Rate, or both.
	Rate float64
	// Burst is the bucket size in tokens; 0 means max(1, ceil(Rate)).
	Burst int64
	// DefaultLeaseTTL is the TTL of a lease whose acquire names none; 0
	// means DefaultLeaseTTL (or MaxLeaseTTL if that is smaller).
	DefaultLeaseTTL time.Duration
	// MaxLeaseTTL bounds the TTL an acquire or renew may ask for; 0 means
	// DefaultMaxLeaseTTL.
	MaxLeaseTTL time.Duration
	// MaxWaiters bounds the wait queue; 0 means DefaultMaxWaiters.
	MaxWaiters int64
	// Adaptive configures adaptive limits from client feedback; off by
	// default. See AdaptiveConfig.
	Adaptive AdaptiveConfig
	// SafeRate is the rate, in tokens per second, that a holder of a rate
	// share may use once its share has expired because it could not reach
	// the server; 0 means stop. At most Rate. See AcquireShare.
	SafeRate float64
	// RevocationPolicy says what happens when the effective concurrency
	// limit is lowered under the weight held (by UpdatePool or adaptive
	// control): RevocationWait (the zero value) lets held leases finish;
	// RevocationRevoke revokes leases at once until the held weight is
	// within the new limit, as RevokeLease does.
	RevocationPolicy RevocationPolicy
	// ResourceKind says what the pool's permits are: ResourceFree (the
	// zero value: a counter), ResourceActive or ResourcePassive (instances:
	// see AddResources and Provide). It is set at creation and cannot change. An active
	// or passive pool may have neither a ConcurrencyLimit nor a Rate: its
	// capacity is its instances.
	ResourceKind ResourceKind
	// Selection says which free instance an active or passive pool grants
	// first (SelectReuse, the zero value, or SelectSpread); it may change
	// at any time.
	Selection SelectionPolicy
	// The pool's event marks. For each, 0 means the default
	// and MarkOff (-1) turns its event off; they stay 0 in the
	// configuration (WithDefaults does not fill them), so that the
	// overload default follows MaxWaiters. EffectiveMarks resolves them.
	//
	// OverloadMark is a count of waiting acquires, 1 to MaxWaitersLimit
	// (default MaxWaiters/2, at least 1).
	OverloadMark int64
	// NearFullMark and LowUtilisationMark are fractions of the effective
	// concurrency limit, above 0 and at most 1 (defaults
	// DefaultNearFullMark, DefaultLowUtilisationMark).
	NearFullMark       float64
	LowUtilisationMark float64
	// LowUtilisationPeriod is how long utilisation must stay below
	// LowUtilisationMark, MinLowUtilisationPeriod to
	// MaxLowUtilisationPeriod (default DefaultLowUtilisationPeriod).
	LowUtilisationPeriod time.Duration
	// Envoy is the pool's rule for Envoy's global rate-limit API; the zero
	// value is none. A pool with a rule needs a Rate.
	Envoy EnvoyRule
}

// RevocationPolicy is a pool's answer to a concurrency limit lowered under
// the weight its leases hold.
type RevocationPolicy uint8

// Revocation policies.
const (
	// RevocationWait: held leases continue; nothing is granted until the
	// held weight is under the new limit.
	RevocationWait RevocationPolicy = iota
	// RevocationRevoke: the leases of lowest priority, and among those the
	// newest (highest fencing token) first, are revoked until the held
	// weight is within the new limit; their holders are told why.
	RevocationRevoke
)

// String returns "wait" or "revoke".
func (r RevocationPolicy) String() string {
	switch r {
	case RevocationWait:
		return "wait"
	case RevocationRevoke:
		return "revoke"
	}
	return "unknown"
}

// ParseRevocationPolicy returns the policy named s ("wait" or "revoke";
// "" means wait). Errors: apierr.ErrInvalidArgument.
func ParseRevocationPolicy(s string) (RevocationPolicy, error) {
	switch s {
	case "", "wait":
		return RevocationWait, nil
	case "revoke":
		return RevocationRevoke, nil
	}
	return 0, errorf(apierr.ErrInvalidArgument, "revocation policy %q is not one; use wait or revoke", s)
}

// Equal reports whether c and o are the same configuration. (A
// PoolConfig holds a slice, so == does not compile.)
func (c PoolConfig) Equal(o PoolConfig) bool {
	return reflect.DeepEqual(c, o)
}

// WithDefaults returns c with every zero optional field set to its default.
// It does not validate.
func (c PoolConfig) WithDefaults() PoolConfig {
	if c.Rate > 0 && c.Burst == 0 {
		c.Burst = int64(math.Max(1, math.Ceil(c.Rate)))
	}
	if c.Rate == 0 {
		c.Burst = 0
	}
	if c.MaxLeaseTTL == 0 {
		c.MaxLeaseTTL = DefaultMaxLeaseTTL
	}
	if c.DefaultLeaseTTL == 0 {
		c.DefaultLeaseTTL = min(DefaultLeaseTTL, c.MaxLeaseTTL)
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = DefaultMaxWaiters
	}
	c.Adaptive = c.Adaptive.withDefaults(c.ConcurrencyLimit, c.Rate)
	c.Envoy = c.Envoy.withDefaults()
	return c
}

// Validate reports the first problem with c as an *apierr.Error with
// apierr.CodeInvalidArgument whose message names the field. Call it on the result
// of WithDefaults.
func (c PoolConfig) Validate() error {
	if err := ValidatePoolName(c.Name); err != nil {
		return err
	}
	switch {
	case len(c.Description) > MaxDescriptionLen:
		return errorf(apierr.ErrInvalidArgument, "pool %q: description is %d bytes; the most is %d", c.Name, len(c.Description), MaxDescriptionLen)
	case c.ConcurrencyLimit < 0 || c.ConcurrencyLimit > MaxConcurrency:
		return errorf(apierr.ErrInvalidArgument, "pool %q: concurrency_limit %d is out of range [0, %d]", c.Name, c.ConcurrencyLimit, MaxConcurrency)
	case math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > MaxRate:
		return errorf(apierr.ErrInvalidArgument, "pool %q: rate %v is out of range [0, %g] tokens per second", c.Name, c.Rate, float64(MaxRate))
	case c.ResourceKind > ResourcePassive:
		return errorf(apierr.ErrInvalidArgument, "pool %q: resource_kind %d is not one; use free, active or passive", c.Name, c.ResourceKind)
	case c.Selection > SelectSpread:
		return errorf(apierr.ErrInvalidArgument, "pool %q: selection_policy %d is not one; use reuse or spread", c.Name, c.Selection)
	case c.ConcurrencyLimit == 0 && c.Rate == 0 && c.ResourceKind == ResourceFree:
		return errorf(apierr.ErrInvalidArgument, "pool %q: set concurrency_limit, rate, or both; a pool with neither limits nothing", c.Name)
	case c.Burst < 0 || c.Burst > MaxConcurrency:
		return errorf(apierr.ErrInvalidArgument, "pool %q: burst %d is out of range [0, %d]", c.Name, c.Burst, MaxConcurrency)
	case c.MaxLeaseTTL < MinLeaseTTL || c.MaxLeaseTTL > MaxLeaseTTLLimit:
		return errorf(apierr.ErrInvalidArgument, "pool %q: max_lease_ttl %v is out of range [%v, %v]", c.Name, c.MaxLeaseTTL, MinLeaseTTL, MaxLeaseTTLLimit)
	case c.DefaultLeaseTTL < MinLeaseTTL || c.DefaultLeaseTTL > c.MaxLeaseTTL:
		return errorf(apierr.ErrInvalidArgument, "pool %q: default_lease_ttl %v is out of range [%v, max_lease_ttl %v]", c.Name, c.DefaultLeaseTTL, MinLeaseTTL, c.MaxLeaseTTL)
	case c.MaxWaiters < 0 || c.MaxWaiters > MaxWaitersLimit:
		return errorf(apierr.ErrInvalidArgument, "pool %q: max_waiters %d is out of range [0, %d]", c.Name, c.MaxWaiters, MaxWaitersLimit)
	case math.IsNaN(c.SafeRate) || c.SafeRate < 0 || c.SafeRate > c.Rate:
		return errorf(apierr.ErrInvalidArgument, "pool %q: safe_rate %v is out of range [0, rate %v]", c.Name, c.SafeRate, c.Rate)
	case c.RevocationPolicy > RevocationRevoke:
		return errorf(apierr.ErrInvalidArgument, "pool %q: revocation_policy %d is not one; use wait or revoke", c.Name, c.RevocationPolicy)
	}
	if err := c.validateMarks(); err != nil {
		return err
	}
	if err := c.Envoy.validate(c.Name, c.Rate); err != nil {
		return err
	}
	return c.Adaptive.validate(c.Name, c.ConcurrencyLimit, c.Rate)
}

// ValidatePoolName returns an *apierr.Error with apierr.CodeInvalidArgument unless name is
// 1 to MaxPoolNameLen characters of [A-Za-z0-9._:/-].
func ValidatePoolName(name string) error {
	if name == "" {
		return errorf(apierr.ErrInvalidArgument, "pool name is empty; use 1 to %d characters of [A-Za-z0-9._:/-]", MaxPoolNameLen)
	}
	if len(name) > MaxPoolNameLen {
		return errorf(apierr.ErrInvalidArgument, "pool name is %d characters long; the most is %d", len(name), MaxPoolNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !poolNameByte(name[i]) {
			return errorf(apierr.ErrInvalidArgument, "pool name %q has %q at position %d; use only [A-Za-z0-9._:/-]", name, rune(name[i]), i)
		}
	}
	return nil
}

func poolNameByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	case b == '.' || b == '_' || b == ':' || b == '/' || b == '-':
		return true
	}
	return false
}

// leaseTTL is the TTL of a lease (or share) of the pool asked for with
// ttl: the pool's default for 0. Errors: ErrInvalidArgument, out of the
// pool's range.
func (c *PoolConfig) leaseTTL(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return c.DefaultLeaseTTL, nil
	}
	if ttl < MinLeaseTTL || ttl > c.MaxLeaseTTL {
		return 0, errorf(apierr.ErrInvalidArgument, "ttl %v is out of range for pool %q: use %v to its max_lease_ttl %v", ttl, c.Name, MinLeaseTTL, c.MaxLeaseTTL)
	}
	return ttl, nil
}
