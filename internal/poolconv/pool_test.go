package poolconv

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/limiter"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// fill sets every field of the struct v points to (recursively) to a value
// that is not zero.
func fill(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(3 * time.Second))
		case f.Kind() == reflect.String:
			f.SetString("x")
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Kind() == reflect.Int64:
			f.SetInt(2)
		case f.Kind() == reflect.Uint8:
			f.SetUint(1)
		case f.Kind() == reflect.Float64:
			f.SetFloat(0.5)
		case f.Kind() == reflect.Struct:
			fill(f)
		case f.Kind() == reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			fill(f.Index(0))
		default:
			panic(fmt.Sprintf("fill: field %s of kind %s", v.Type().Field(i).Name, f.Kind()))
		}
	}
}

// TestEveryFieldIsBound: a configuration with every field set goes to the
// wire with every configuration field of Pool set, and comes back the
// same. It fails when a field is added to PoolConfig or to Pool without a
// line in poolFields.
func TestEveryFieldIsBound(t *testing.T) {
	var c limiter.PoolConfig
	fill(reflect.ValueOf(&c).Elem())
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	p := ToProto(c, now, now.Add(time.Second))
	var unset []string
	checkAllSet(p.ProtoReflect(), "", &unset)
	if len(unset) > 0 {
		t.Errorf("fields of Pool not bound to PoolConfig: %s", strings.Join(unset, ", "))
	}
	back, err := FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(c) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, c)
	}
	if p.GetCreateTime().AsTime() != now || p.GetUpdateTime().AsTime() != now.Add(time.Second) {
		t.Fatalf("times: %v %v", p.GetCreateTime(), p.GetUpdateTime())
	}
}

func checkAllSet(m protoreflect.Message, prefix string, unset *[]string) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case !m.Has(fd):
			*unset = append(*unset, prefix+string(fd.Name()))
		case fd.IsList() && fd.Message() != nil:
			for j := 0; j < m.Get(fd).List().Len(); j++ {
				checkAllSet(m.Get(fd).List().Get(j).Message(), fmt.Sprintf("%s%s[%d].", prefix, fd.Name(), j), unset)
			}
		case fd.Message() != nil && fd.Message().FullName().Parent() == m.Descriptor().FullName().Parent():
			checkAllSet(m.Get(fd).Message(), prefix+string(fd.Name())+".", unset)
		}
	}
}

// TestRoundTripDefaults: a pool as the engine keeps it (defaults filled
// in) survives the wire unchanged, for the shapes pools take.
func TestRoundTripDefaults(t *testing.T) {
	for _, c := range []limiter.PoolConfig{
		{Name: "plain", ConcurrencyLimit: 3},
		{Name: "rate", Rate: 2.5, SafeRate: 1, NearFullMark: limiter.MarkOff, OverloadMark: limiter.MarkOff},
		{Name: "adaptive", ConcurrencyLimit: 8, Rate: 50, Adaptive: limiter.AdaptiveConfig{Enabled: true, Target: limiter.AdaptRate, LatencyTolerance: 2}},
		{Name: "res", ResourceKind: limiter.ResourcePassive, Selection: limiter.SelectSpread, RevocationPolicy: limiter.RevocationRevoke},
		{Name: "envoy", Rate: 10, Envoy: limiter.EnvoyRule{Domain: "edge", Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}, {Key: "path", Value: "/login"}}}},
	} {
		c = c.WithDefaults()
		back, err := FromProto(ToProto(c, time.Time{}, time.Time{}))
		if err != nil || !back.Equal(c) {
			t.Fatalf("%s: got %+v, %v; want %+v", c.Name, back, err, c)
		}
	}
}

// TestEnumsAgree: each proto enum value n is the engine's value n-1 of the
// same name, which is what Enum relies on.
func TestEnumsAgree(t *testing.T) {
	for _, e := range []struct {
		d      protoreflect.EnumDescriptor
		engine func(n int) string
	}{
		{tollgatev1.RevocationPolicy(0).Descriptor(), func(n int) string { return limiter.RevocationPolicy(n).String() }},
		{tollgatev1.ResourceKind(0).Descriptor(), func(n int) string { return limiter.ResourceKind(n).String() }},
		{tollgatev1.SelectionPolicy(0).Descriptor(), func(n int) string { return limiter.SelectionPolicy(n).String() }},
		{tollgatev1.AdaptiveTarget(0).Descriptor(), func(n int) string { return limiter.AdaptiveTarget(n).String() }},
	} {
		names := EnumNames(e.d, true)
		for i, name := range names {
			if got := e.engine(i); got != name {
				t.Errorf("%s value %d is %q; the engine's %d is %q", e.d.Name(), i+1, name, i, got)
			}
		}
		if got := e.engine(len(names)); got != "unknown" {
			t.Errorf("%s: the engine has a value %q the proto does not", e.d.Name(), got)
		}
	}
}

// TestFromProtoErrors: what the wire can get wrong is INVALID_ARGUMENT
// naming the field.
func TestFromProtoErrors(t *testing.T) {
	for _, tc := range []struct {
		p    *tollgatev1.Pool
		want string
	}{
		{&tollgatev1.Pool{RevocationPolicy: 7}, "pool.revocation_policy 7 is not a RevocationPolicy; use REVOCATION_POLICY_WAIT or REVOCATION_POLICY_REVOKE"},
		{&tollgatev1.Pool{Adaptive: &tollgatev1.Adaptive{Target: 9}}, "pool.adaptive.target 9 is not a AdaptiveTarget"},
		{&tollgatev1.Pool{DefaultLeaseTtl: durationpb.New(-time.Second)}, "pool.default_lease_ttl is negative"},
		{&tollgatev1.Pool{MaxLeaseTtl: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "pool.max_lease_ttl is not a valid duration"},
		{&tollgatev1.Pool{Adaptive: &tollgatev1.Adaptive{Backoff: math.NaN()}}, "pool.adaptive.backoff is NaN"},
		{&tollgatev1.Pool{Rate: math.Inf(1)}, "pool.rate is +Inf"},
		{&tollgatev1.Pool{Envoy: &tollgatev1.EnvoyRule{Descriptors: []*tollgatev1.EnvoyDescriptorKey{{}, {Key: "a"}}}}, ""}, // no error: checked by Validate
	} {
		if tc.want == "" {
			if _, err := FromProto(tc.p); err != nil {
				t.Errorf("FromProto(%v) = %v", tc.p, err)
			}
			continue
		}
		_, err := FromProto(tc.p)
		var le *apierr.Error
		if !errors.As(err, &le) || le.Code != apierr.CodeInvalidArgument || !strings.Contains(le.Message, tc.want) {
			t.Errorf("FromProto(%v) = %v; want INVALID_ARGUMENT with %q", tc.p, err, tc.want)
		}
	}
}

// TestText: the text forms parse and print back.
func TestText(t *testing.T) {
	fields := (&tollgatev1.Pool{}).ProtoReflect().Descriptor().Fields()
	for _, tc := range []struct{ field, in, out string }{
		{"resource_kind", "active", "active"},
		{"resource_kind", "RESOURCE_KIND_PASSIVE", "passive"},
		{"selection_policy", "Spread", "spread"},
		{"default_lease_ttl", "1m30s", "1m30s"},
		{"default_lease_ttl", "0", "0s"},
		{"overload_mark", "off", "off"},
		{"near_full_mark", "off", "off"},
		{"near_full_mark", "0.75", "0.75"},
		{"concurrency_limit", "0x10", "16"},
		{"description", "a b", "a b"},
	} {
		fd := fields.ByName(protoreflect.Name(tc.field))
		v, err := ParseText(fd, tc.in)
		if err != nil {
			t.Errorf("ParseText(%s, %q): %v", tc.field, tc.in, err)
			continue
		}
		if got := FormatText(fd, v); got != tc.out {
			t.Errorf("FormatText(%s, ParseText(%q)) = %q, want %q", tc.field, tc.in, got, tc.out)
		}
	}
	for _, tc := range []struct{ field, in, want string }{
		{"resource_kind", "lots", "must be free, active or passive"},
		{"concurrency_limit", "1.5", "must be a whole number"},
		{"overload_mark", "many", "must be a whole number, or off"},
		{"rate", "NaN", "must be a finite number"},
		{"max_lease_ttl", "15", "must be a duration"},
	} {
		if _, err := ParseText(fields.ByName(protoreflect.Name(tc.field)), tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseText(%s, %q) = %v; want %q", tc.field, tc.in, err, tc.want)
		}
	}
}

// TestFormatList: a message with a list field prints each element.
func TestFormatList(t *testing.T) {
	p := ToProto(limiter.PoolConfig{Name: "p", Envoy: limiter.EnvoyRule{Domain: "edge",
		Descriptors: []limiter.EnvoyDescriptorKey{{Key: "remote_address"}, {Key: "path", Value: "/login"}}}}, time.Time{}, time.Time{})
	m := p.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("envoy")
	want := "domain edge, descriptors [key remote_address; key path, value /login]"
	if got := FormatText(fd, m.Get(fd)); got != want {
		t.Fatalf("FormatText(envoy) = %q, want %q", got, want)
	}
}

// TestFieldBehavior: the proto's field_behavior annotations are read.
func TestFieldBehavior(t *testing.T) {
	fields := (&tollgatev1.Pool{}).ProtoReflect().Descriptor().Fields()
	for name, want := range map[protoreflect.Name][2]bool{ // immutable, output only
		"name": {true, false}, "resource_kind": {true, false}, "create_time": {true, true}, "update_time": {true, true}, "rate": {false, false},
	} {
		fd := fields.ByName(name)
		if got := [2]bool{Immutable(fd), OutputOnly(fd)}; got != want {
			t.Errorf("%s: immutable, output only = %v, want %v", name, got, want)
		}
	}
}
