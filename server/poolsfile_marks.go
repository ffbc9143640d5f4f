package server

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/limiter"
)

// markFileFields are the pools file keys of a pool's event marks
// (limiter/marks.go):
//
//	overload_mark: 100             # acquires waiting; 0 or absent: half of max_waiters
//	near_full_mark: 0.9            # fraction of the concurrency limit
//	low_utilisation_mark: 0.1      # fraction of the concurrency limit
//	low_utilisation_period: 10m
//
// A mark may also be off (or -1) to turn its event off.
var markFileFields = []string{"overload_mark", "near_full_mark", "low_utilisation_mark", "low_utilisation_period"}

// mark parses the mark key k of a pool entry into cfg; it reports false
// for a key that is not a mark's.
func (p poolsParser) mark(cfg *limiter.PoolConfig, k, v *yaml.Node) (bool, error) {
	off := v.Kind == yaml.ScalarNode && v.Value == "off"
	var err error
	switch k.Value {
	case "overload_mark":
		if off {
			cfg.OverloadMark = limiter.MarkOff
		} else {
			cfg.OverloadMark, err = p.int(k.Value, v)
		}
	case "near_full_mark":
		if off {
			cfg.NearFullMark = limiter.MarkOff
		} else {
			cfg.NearFullMark, err = p.float(k.Value, v)
		}
	case "low_utilisation_mark":
		if off {
			cfg.LowUtilisationMark = limiter.MarkOff
		} else {
			cfg.LowUtilisationMark, err = p.float(k.Value, v)
		}
	case "low_utilisation_period":
		var d time.Duration
		if d, err = p.duration(k.Value, v); err == nil {
			cfg.LowUtilisationPeriod = d
		}
	default:
		return false, nil
	}
	return true, err
}
