// Package poolconv is the one conversion between the API's description of
// a pool (tollgatev1.Pool) and the engine's (limiter.PoolConfig). The
// server's RPCs, its pools file and its store all convert through it, so a
// field added to a pool is bound here once, in poolFields.
//
// It checks only what the wire can get wrong that the engine cannot see
// (an enum value out of range, a malformed or negative duration, a float
// that is not finite); range checks are the engine's
// (limiter.PoolConfig.Validate). It also reads UpdatePool's update_mask
// against the Pool message (ParseMask, Mask.Merge). It imports the engine,
// the generated API and internal/refuse, nothing of the server.
package poolconv

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// poolFields binds each field of a pool's configuration to its proto field.
// Output-only fields (create_time, update_time) are not configuration.
func poolFields(c *limiter.PoolConfig, p *tollgatev1.Pool) []Field {
	return []Field{
		Same("name", &c.Name, &p.Name),
		Same("description", &c.Description, &p.Description),
		Same("concurrency_limit", &c.ConcurrencyLimit, &p.ConcurrencyLimit),
		Same("rate", &c.Rate, &p.Rate),
		Same("burst", &c.Burst, &p.Burst),
		Dur("default_lease_ttl", &c.DefaultLeaseTTL, &p.DefaultLeaseTtl),
		Dur("max_lease_ttl", &c.MaxLeaseTTL, &p.MaxLeaseTtl),
		Same("max_waiters", &c.MaxWaiters, &p.MaxWaiters),
		Msg("adaptive", &c.Adaptive, &p.Adaptive, adaptiveFields),
		Same("safe_rate", &c.SafeRate, &p.SafeRate),
		Enum("revocation_policy", &c.RevocationPolicy, &p.RevocationPolicy),
		Enum("resource_kind", &c.ResourceKind, &p.ResourceKind),
		Enum("selection_policy", &c.Selection, &p.SelectionPolicy),
		Same("overload_mark", &c.OverloadMark, &p.OverloadMark),
		Same("near_full_mark", &c.NearFullMark, &p.NearFullMark),
		Same("low_utilisation_mark", &c.LowUtilisationMark, &p.LowUtilisationMark),
		Dur("low_utilisation_period", &c.LowUtilisationPeriod, &p.LowUtilisationPeriod),
		Msg("envoy", &c.Envoy, &p.Envoy, envoyFields),
	}
}

// envoyFields binds the fields of a pool's Envoy rate-limit rule.
func envoyFields(c *limiter.EnvoyRule, p *tollgatev1.EnvoyRule) []Field {
	return []Field{
		Same("domain", &c.Domain, &p.Domain),
		List("descriptors", &c.Descriptors, &p.Descriptors, func(c *limiter.EnvoyDescriptorKey, p *tollgatev1.EnvoyDescriptorKey) []Field {
			return []Field{Same("key", &c.Key, &p.Key), Same("value", &c.Value, &p.Value)}
		}),
		Same("max_buckets", &c.MaxBuckets, &p.MaxBuckets),
	}
}

// adaptiveFields binds the fields of a pool's adaptive settings.
func adaptiveFields(c *limiter.AdaptiveConfig, p *tollgatev1.Adaptive) []Field {
	return []Field{
		Same("enabled", &c.Enabled, &p.Enabled),
		Enum("target", &c.Target, &p.Target),
		Dur("window", &c.Window, &p.Window),
		Same("error_threshold", &c.ErrorThreshold, &p.ErrorThreshold),
		Same("min_samples", &c.MinSamples, &p.MinSamples),
		Same("backoff", &c.Backoff, &p.Backoff),
		Same("increase", &c.Increase, &p.Increase),
		Dur("interval", &c.Interval, &p.Interval),
		Dur("cooldown", &c.Cooldown, &p.Cooldown),
		Dur("probe_interval", &c.ProbeInterval, &p.ProbeInterval),
		Same("min_concurrency", &c.MinConcurrency, &p.MinConcurrency),
		Same("min_rate", &c.MinRate, &p.MinRate),
		Same("latency_tolerance", &c.LatencyTolerance, &p.LatencyTolerance),
	}
}

// FromProto converts a wire pool to an engine configuration, ignoring
// output-only fields; unset fields become 0 (the default). Errors are
// *apierr.Error with CodeInvalidArgument naming the field as pool.<field>.
func FromProto(p *tollgatev1.Pool) (limiter.PoolConfig, error) {
	var c limiter.PoolConfig
	if p == nil {
		p = &tollgatev1.Pool{}
	}
	err := From(poolFields(&c, p), "pool.")
	return c, err
}

// ToProto converts a pool's configuration and times to the wire. A value
// that is 0 (a duration, or adaptive settings that are off) is unset.
func ToProto(c limiter.PoolConfig, create, update time.Time) *tollgatev1.Pool {
	p := &tollgatev1.Pool{}
	To(poolFields(&c, p))
	To([]Field{Time("create_time", &create, &p.CreateTime), Time("update_time", &update, &p.UpdateTime)})
	return p
}

// InfoToProto converts what the engine reports of a pool to the wire.
func InfoToProto(info limiter.PoolInfo) *tollgatev1.Pool {
	return ToProto(info.Config, info.CreateTime, info.UpdateTime)
}
