package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// poolFlagTable lists the pool settings of pool create and pool update:
// each flag, the Pool field it sets (its update_mask path) and its help.
// A flag's value is read by its field's type (poolconv.ParseText: "15s",
// "revoke", "off" for a mark), so a new setting is one line here.
var poolFlagTable = []struct{ flag, path, usage string }{
	{"description", "description", "note for operators"},
	{"concurrency", "concurrency_limit", "concurrency limit: most permit weight held at once (0: none)"},
	{"rate", "rate", "rate limit in tokens per second (0: none)"},
	{"burst", "burst", "token bucket size (0: one second of tokens, at least 1)"},
	{"ttl", "default_lease_ttl", "default lease TTL, such as 15s (0: 15s)"},
	{"max-ttl", "max_lease_ttl", "longest TTL an acquire or renew may ask for (0: 5m)"},
	{"max-waiters", "max_waiters", "most acquires waiting in the queue (0: 1024)"},
	{"safe-rate", "safe_rate", "rate a holder of a rate share may use once its share expired unreachable (0: stop)"},
	{"revocation-policy", "revocation_policy", "when the concurrency limit is lowered under the held weight: wait (held leases finish) or revoke (revoke the lowest priority, newest leases at once)"},
	{"kind", "resource_kind", "what the permits are: free (a counter), active (instances an operator declares: tollgate resource add) or passive (instances providers offer: tollgate resource provide); set at creation"},
	{"selection", "selection_policy", "which free instance an active or passive pool grants first: reuse (the most recently released) or spread (the least recently used)"},
	{"adaptive", "adaptive.enabled", "adaptive limits: lower the effective limits when clients report errors, raise them back while healthy (the --adaptive-* flags turn them on unless --adaptive=false)"},
	{"adaptive-target", "adaptive.target", "limits adaptive control moves: all, concurrency or rate"},
	{"adaptive-window", "adaptive.window", "sliding window of outcomes (0: 10s)"},
	{"adaptive-error-threshold", "adaptive.error_threshold", "fraction of errors and timeouts that cuts the limits (0: 0.1)"},
	{"adaptive-min-samples", "adaptive.min_samples", "outcomes the window needs before it can cut (0: 20)"},
	{"adaptive-backoff", "adaptive.backoff", "factor a cut multiplies the effective limits by (0: 0.8)"},
	{"adaptive-increase", "adaptive.increase", "step of a raise, as a fraction of the configured limit (0: 0.05)"},
	{"adaptive-interval", "adaptive.interval", "least time between a change and the next raise (0: 2s)"},
	{"adaptive-cooldown", "adaptive.cooldown", "least time between two cuts (0: 2s)"},
	{"adaptive-probe-interval", "adaptive.probe_interval", "least time between a change and a raise to the level where one last failed (0: 5 × the interval)"},
	{"adaptive-min-concurrency", "adaptive.min_concurrency", "floor of the effective concurrency limit (0: 1)"},
	{"adaptive-min-rate", "adaptive.min_rate", "floor of the effective rate (0: 1% of the rate)"},
	{"adaptive-latency-tolerance", "adaptive.latency_tolerance", "also cut when latency exceeds this factor times its baseline, such as 2 (0: off)"},
	{"overload-mark", "overload_mark", "pool_overload event when this many acquires wait (0: half of max-waiters; off: no event)"},
	{"near-full-mark", "near_full_mark", "pool_near_full event when held/limit reaches this fraction (0: the default; off: no event)"},
	{"low-utilisation-mark", "low_utilisation_mark", "pool_low_utilisation event when held/limit stays below this fraction for a period (0: the default; off: no event)"},
	{"low-utilisation-period", "low_utilisation_period", "period of the low-utilisation mark (0: the default)"},
}

// shownDefaults are the defaults that help shows for the settings whose
// unset value stands for a default other than zero.
var shownDefaults = map[string]string{
	"near-full-mark":         strconv.FormatFloat(limiter.DefaultNearFullMark, 'g', -1, 64),
	"low-utilisation-mark":   strconv.FormatFloat(limiter.DefaultLowUtilisationMark, 'g', -1, 64),
	"low-utilisation-period": limiter.DefaultLowUtilisationPeriod.String(),
}

// poolFlags are the values of poolFlagTable's flags on one command.
type poolFlags struct{ values []*fieldFlag }

// fieldFlag is the value of a flag that sets a field of a Pool: the chain
// of fields its path names, and the value given.
type fieldFlag struct {
	flag  string
	path  string
	chain []protoreflect.FieldDescriptor
	val   protoreflect.Value
	text  string
}

func (v *fieldFlag) field() protoreflect.FieldDescriptor { return v.chain[len(v.chain)-1] }

// String returns the value as given, or the default's text.
func (v *fieldFlag) String() string { return v.text }

// Set parses s by the field's type.
func (v *fieldFlag) Set(s string) error {
	val, err := poolconv.ParseText(v.field(), s)
	if err != nil {
		what := strings.ReplaceAll(v.flag, "-", " ")
		article := "a"
		if strings.ContainsRune("aeiou", rune(what[0])) {
			article = "an"
		}
		return fmt.Errorf("%q is not %s %s; it %v", s, article, what, err)
	}
	v.val, v.text = val, s
	return nil
}

// Type names the flag's kind in help text.
func (v *fieldFlag) Type() string {
	fd := v.field()
	switch {
	case fd.Kind() == protoreflect.BoolKind:
		return "bool"
	case fd.Kind() == protoreflect.DoubleKind:
		return "float"
	case fd.Kind() == protoreflect.Int64Kind:
		return "int"
	case fd.Message() != nil:
		return "duration"
	}
	return "string"
}

// poolPath returns the chain of Pool fields path ("adaptive.backoff")
// names.
func poolPath(path string) []protoreflect.FieldDescriptor {
	md := (&tollgatev1.Pool{}).ProtoReflect().Descriptor()
	var chain []protoreflect.FieldDescriptor
	for _, name := range strings.Split(path, ".") {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			panic("pool flag of unknown field " + path)
		}
		chain = append(chain, fd)
		md = fd.Message()
	}
	return chain
}

// register adds the flags; those of fields that cannot change after
// creation (resource_kind) only when create is set.
func (p *poolFlags) register(f *pflag.FlagSet, create bool) {
	for _, pf := range poolFlagTable {
		v := &fieldFlag{flag: pf.flag, path: pf.path, chain: poolPath(pf.path), text: "0"}
		if !create && poolconv.Immutable(v.field()) {
			continue
		}
		switch fd := v.field(); {
		case fd.Enum() != nil:
			v.text = poolconv.EnumShortName(fd.Enum().Values().ByNumber(1)) // unset means the first value
		case fd.Kind() == protoreflect.StringKind:
			v.text = ""
		case fd.Kind() == protoreflect.BoolKind:
			v.text = "false"
		}
		if d, ok := shownDefaults[pf.flag]; ok {
			v.text = d
		}
		flag := f.VarPF(v, pf.flag, "", pf.usage)
		if v.field().Kind() == protoreflect.BoolKind {
			flag.NoOptDefVal = "true"
		}
		p.values = append(p.values, v)
	}
}

// pool returns the Pool named name with the values of the flags given on
// the command line, and the update_mask paths of those flags. A setting of
// a message with an enabled field (--adaptive-*) turns it on, unless its
// enabled flag is given too: the settings of a disabled one are cleared.
func (p *poolFlags) pool(f *pflag.FlagSet, name string) (*tollgatev1.Pool, []string, error) {
	pool := &tollgatev1.Pool{Name: name}
	var paths []string
	given := map[string]bool{}
	for _, v := range p.values {
		if !f.Changed(v.flag) {
			continue
		}
		m := pool.ProtoReflect()
		for _, fd := range v.chain[:len(v.chain)-1] {
			m = m.Mutable(fd).Message()
		}
		m.Set(v.field(), v.val)
		paths = append(paths, v.path)
		given[v.path] = true
	}
	for _, path := range paths {
		parent, _, nested := strings.Cut(path, ".")
		enabled := parent + ".enabled"
		if !nested || given[enabled] {
			continue
		}
		chain := poolPath(parent)
		m := pool.ProtoReflect().Mutable(chain[0]).Message()
		if fd := m.Descriptor().Fields().ByName("enabled"); fd != nil && fd.Kind() == protoreflect.BoolKind {
			m.Set(fd, protoreflect.ValueOfBool(true))
			paths = append(paths, enabled)
			given[enabled] = true
		}
	}
	return pool, paths, nil
}

// poolFlagNames lists the pool flags for messages.
func poolFlagNames() string {
	names := make([]string, len(poolFlagTable))
	for i, pf := range poolFlagTable {
		names[i] = "--" + pf.flag
	}
	return strings.Join(names, ", ")
}
