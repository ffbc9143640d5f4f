package server

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate/limiter"
)

// poolsFileFields are the keys a pool entry of a pools file may have, in
// the order they are listed to people.
var poolsFileFields = append([]string{"name", "description", "concurrency", "rate", "burst", "default_ttl", "max_ttl", "max_waiters", "safe_rate", "adaptive", "revocation_policy", "kind", "selection"},
	markFileFields...) // poolsfile_marks.go

// maxPoolsFileSize bounds the pools file LoadPoolsFile reads.
const maxPoolsFileSize = 16 << 20

// LoadPoolsFile reads the pools a server declares at start from a YAML file
// of the form
//
//	pools:
//	  - name: orders-db
//	    description: primary database
//	    concurrency: 20
//	    rate: 100        # tokens per second
//	    burst: 200
//	    default_ttl: 15s
//	    max_ttl: 5m
//	    max_waiters: 1024
//	    safe_rate: 10    # per share holder that cannot reach the server
//	    revocation_policy: revoke  # or wait (the default): on a limit lowered under the held weight
//	    kind: active     # or passive, or free (the default): see docs/resources.md
//	    selection: spread  # or reuse (the default): which free instance an active or passive pool grants
//	    adaptive:        # adaptive limits; see poolsfile_adaptive.go
//	      enabled: true
//	      backoff: 0.9
//	    overload_mark: 100   # event marks; see poolsfile_marks.go
//	    near_full_mark: off
//
// Every field but name is optional (0 or absent means the default, as in
// limiter.PoolConfig); each pool needs a concurrency, a rate, or both.
// It returns the pools in file order, each validated with defaults filled
// in. An empty file declares no pools. Errors name the file and line: an
// unknown or repeated key, a value of the wrong type, a bad duration, a
// pool that fails validation, or a name declared twice.
func LoadPoolsFile(path string) ([]limiter.PoolConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading pools file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPoolsFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading pools file %s: %w", path, err)
	}
	if len(data) > maxPoolsFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d bytes; a pools file should be small", path, maxPoolsFileSize)
	}
	return ParsePools(path, data)
}

// ParsePools parses the contents of a pools file as LoadPoolsFile does;
// name is used in error messages.
func ParsePools(name string, data []byte) ([]limiter.PoolConfig, error) {
	p := poolsParser{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, p.errorf(root, "the file must be a mapping with a pools key (pools: [{name: ..., concurrency: ...}])")
	}
	var pools *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "pools" {
			return nil, p.errorf(k, "unknown key %q; the only top-level key is pools", k.Value)
		}
		if pools != nil {
			return nil, p.errorf(k, "pools is given twice")
		}
		pools = v
	}
	if pools == nil || (pools.Kind == yaml.ScalarNode && pools.Tag == "!!null") {
		return nil, nil
	}
	if pools.Kind != yaml.SequenceNode {
		return nil, p.errorf(pools, "pools must be a list of pools (- name: ...)")
	}
	out := make([]limiter.PoolConfig, 0, len(pools.Content))
	lines := make(map[string]int, len(pools.Content))
	for _, n := range pools.Content {
		cfg, err := p.pool(n)
		if err != nil {
			return nil, err
		}
		if prev, dup := lines[cfg.Name]; dup {
			return nil, p.errorf(n, "pool %q is declared twice (first at line %d)", cfg.Name, prev)
		}
		lines[cfg.Name] = n.Line
		out = append(out, cfg)
	}
	return out, nil
}

// poolsParser carries the file name for error messages.
type poolsParser struct{ file string }

func (p poolsParser) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...))
}

// pool parses one entry of the pools list.
func (p poolsParser) pool(n *yaml.Node) (limiter.PoolConfig, error) {
	var cfg limiter.PoolConfig
	if n.Kind != yaml.MappingNode {
		return cfg, p.errorf(n, "each pool must be a mapping with keys %s", strings.Join(poolsFileFields, ", "))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return cfg, p.errorf(k, "key %q is given twice in this pool", k.Value)
		}
		seen[k.Value] = true
		var err error
		switch k.Value {
		case "name":
			cfg.Name, err = p.str(k.Value, v)
		case "description":
			cfg.Description, err = p.str(k.Value, v)
		case "concurrency":
			cfg.ConcurrencyLimit, err = p.int(k.Value, v)
		case "rate":
			cfg.Rate, err = p.float(k.Value, v)
		case "burst":
			cfg.Burst, err = p.int(k.Value, v)
		case "default_ttl":
			cfg.DefaultLeaseTTL, err = p.duration(k.Value, v)
		case "max_ttl":
			cfg.MaxLeaseTTL, err = p.duration(k.Value, v)
		case "max_waiters":
			cfg.MaxWaiters, err = p.int(k.Value, v)
		case "safe_rate":
			cfg.SafeRate, err = p.float(k.Value, v)
		case "kind": // resources.go; an active pool's instances are added with tollgate resource add
			var s string
			if s, err = p.str(k.Value, v); err == nil {
				if cfg.ResourceKind, err = limiter.ParseResourceKind(s); err != nil {
					err = p.errorf(v, "kind must be free, active or passive, not %q", truncate(s, 64))
				}
			}
		case "selection":
			var s string
			if s, err = p.str(k.Value, v); err == nil {
				if cfg.Selection, err = limiter.ParseSelectionPolicy(s); err != nil {
					err = p.errorf(v, "selection must be reuse or spread, not %q", truncate(s, 64))
				}
			}
		case "revocation_policy":
			var s string
			if s, err = p.str(k.Value, v); err == nil {
				if cfg.RevocationPolicy, err = limiter.ParseRevocationPolicy(s); err != nil {
					err = p.errorf(v, "revocation_policy must be wait or revoke, not %q", truncate(s, 64))
				}
			}
		case "adaptive": // poolsfile_adaptive.go
			cfg.Adaptive, err = p.adaptive(v)
		default:
			var isMark bool // poolsfile_marks.go
			if isMark, err = p.mark(&cfg, k, v); !isMark {
				err = p.errorf(k, "unknown field %q; a pool has %s", truncate(k.Value, 64), strings.Join(poolsFileFields, ", "))
			}
		}
		if err != nil {
			return cfg, err
		}
	}
	if !seen["name"] {
		return cfg, p.errorf(n, "this pool has no name; add name: <1 to %d characters of [A-Za-z0-9._:/-]>", limiter.MaxPoolNameLen)
	}
	full := cfg.WithDefaults()
	if err := full.Validate(); err != nil {
		var le *limiter.Error
		if errors.As(err, &le) {
			err = errors.New(le.Message)
		}
		return cfg, p.errorf(n, "%v", err)
	}
	return full, nil
}

func (p poolsParser) scalar(key string, v *yaml.Node, want string) error {
	if v.Kind != yaml.ScalarNode {
		return p.errorf(v, "%s must be %s", key, want)
	}
	return nil
}

func (p poolsParser) str(key string, v *yaml.Node) (string, error) {
	if err := p.scalar(key, v, "a string"); err != nil {
		return "", err
	}
	return v.Value, nil
}

func (p poolsParser) int(key string, v *yaml.Node) (int64, error) {
	var x int64
	if err := p.scalar(key, v, "a whole number"); err != nil {
		return 0, err
	}
	if v.ShortTag() != "!!int" || v.Decode(&x) != nil {
		return 0, p.errorf(v, "%s must be a whole number, not %q", key, truncate(v.Value, 64))
	}
	return x, nil
}

func (p poolsParser) float(key string, v *yaml.Node) (float64, error) {
	var x float64
	if err := p.scalar(key, v, "a number"); err != nil {
		return 0, err
	}
	if err := v.Decode(&x); err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, p.errorf(v, "%s must be a finite number, not %q", key, truncate(v.Value, 64))
	}
	return x, nil
}

func (p poolsParser) duration(key string, v *yaml.Node) (time.Duration, error) {
	if err := p.scalar(key, v, "a duration such as 15s or 5m"); err != nil {
		return 0, err
	}
	if v.Value == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		return 0, p.errorf(v, "%s must be a duration such as 15s or 5m, not %q", key, truncate(v.Value, 64))
	}
	if d < 0 {
		return 0, p.errorf(v, "%s must not be negative (%s)", key, v.Value)
	}
	return d, nil
}
