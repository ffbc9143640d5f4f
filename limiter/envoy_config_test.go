package limiter

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// TestEnvoyRuleValidate: a rule needs a domain, 1 to 16 keys and a rate,
// within bounded lengths; max_buckets defaults to 10,000.
func TestEnvoyRuleValidate(t *testing.T) {
	keys := func(n int) []EnvoyDescriptorKey { return make([]EnvoyDescriptorKey, n) }
	one := []EnvoyDescriptorKey{{Key: "remote_address"}}
	long := strings.Repeat("x", 256)
	for _, tc := range []struct {
		rate float64
		r    EnvoyRule
		want string
	}{
		{1, EnvoyRule{Descriptors: one}, "envoy.domain is 0 bytes"},
		{1, EnvoyRule{Domain: long, Descriptors: one}, "envoy.domain is 256 bytes"},
		{1, EnvoyRule{Domain: "edge"}, "envoy.descriptors has 0 keys"},
		{1, EnvoyRule{Domain: "edge", Descriptors: keys(17)}, "envoy.descriptors has 17 keys"},
		{1, EnvoyRule{Domain: "edge", Descriptors: keys(1)}, "envoy.descriptors[0].key is 0 bytes"},
		{1, EnvoyRule{Domain: "edge", Descriptors: []EnvoyDescriptorKey{{Key: long}}}, "envoy.descriptors[0].key is 256 bytes"},
		{1, EnvoyRule{Domain: "edge", Descriptors: []EnvoyDescriptorKey{{Key: "k", Value: long}}}, "envoy.descriptors[0].value is 256 bytes"},
		{1, EnvoyRule{Domain: "edge", Descriptors: one, MaxBuckets: MaxEnvoyMaxBuckets + 1}, "envoy.max_buckets 1000001 is out of range"},
		{1, EnvoyRule{Domain: "edge", Descriptors: one, MaxBuckets: -1}, "envoy.max_buckets -1 is out of range"},
		{0, EnvoyRule{Domain: "edge", Descriptors: one}, "needs a rate"},
	} {
		c := PoolConfig{Name: "p", Rate: tc.rate, ConcurrencyLimit: 1, Envoy: tc.r}.WithDefaults()
		err := c.Validate()
		if !errors.Is(err, apierr.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.r, err, tc.want)
		}
	}
	c := PoolConfig{Name: "p", Rate: 1, Envoy: EnvoyRule{Domain: "edge", Descriptors: one}}.WithDefaults()
	if err := c.Validate(); err != nil || c.Envoy.MaxBuckets != DefaultEnvoyMaxBuckets {
		t.Fatalf("%+v: %v", c.Envoy, err)
	}
	if c := (PoolConfig{Name: "p", Rate: 1}).WithDefaults(); !c.Envoy.IsZero() {
		t.Fatalf("no rule got %+v", c.Envoy)
	}
}
