package poolconv

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A Field binds one engine field to one proto field, both ways: to copies
// the engine's value into the proto; from copies the proto's into the
// engine, reporting a value the engine cannot hold. A conversion is a list
// of Fields, one line each.
type Field struct {
	name string
	to   func()
	from func(prefix string) error
}

// Same binds fields of the same Go type. A float that is not finite is
// refused.
func Same[T comparable](name string, e, p *T) Field {
	return Field{name: name,
		to: func() { *p = *e },
		from: func(prefix string) error {
			if f, ok := any(*p).(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
				return invalid("%s%s is %v; give a finite number", prefix, name, f)
			}
			*e = *p
			return nil
		}}
}

// Dur binds a time.Duration to an optional proto Duration: 0 is unset.
func Dur(name string, e *time.Duration, p **durationpb.Duration) Field {
	return Field{name: name,
		to: func() {
			*p = nil
			if *e != 0 {
				*p = durationpb.New(*e)
			}
		},
		from: func(prefix string) (err error) {
			*e, err = Duration(prefix+name, *p)
			return err
		}}
}

// Time binds a time.Time to an optional proto Timestamp: the zero time is
// unset. Times come back in UTC.
func Time(name string, e *time.Time, p **timestamppb.Timestamp) Field {
	return Field{name: name,
		to: func() {
			*p = nil
			if !e.IsZero() {
				*p = timestamppb.New(*e)
			}
		},
		from: func(prefix string) error {
			*e = time.Time{}
			if *p == nil {
				return nil
			}
			if err := (*p).CheckValid(); err != nil {
				return invalid("%s%s is not a valid time: %v", prefix, name, err)
			}
			*e = (*p).AsTime()
			return nil
		}}
}

// protoEnum is a generated proto enum type.
type protoEnum interface {
	~int32
	Descriptor() protoreflect.EnumDescriptor
}

// Enum binds an engine enum to a proto enum. The proto's values are the
// engine's plus one, and 0 (UNSPECIFIED) means the engine's zero value.
func Enum[E ~uint8, P protoEnum](name string, e *E, p *P) Field {
	return Field{name: name,
		to: func() { *p = P(int32(*e) + 1) },
		from: func(prefix string) error {
			n := int32(*p)
			if n != 0 && (*p).Descriptor().Values().ByNumber(protoreflect.EnumNumber(n)) == nil {
				d := (*p).Descriptor()
				return invalid("%s%s %d is not a %s; use %s", prefix, name, n, d.Name(), strings.Join(EnumNames(d, false), " or "))
			}
			*e = 0
			if n > 0 {
				*e = E(n - 1)
			}
			return nil
		}}
}

// Msg binds an engine struct to an optional proto message field, whose own
// fields bind with fields. The engine's zero value is unset, and unset is
// the zero value.
func Msg[EM any, PM any, PP interface {
	*PM
	proto.Message
}](name string, e *EM, p *PP, fields func(*EM, PP) []Field) Field {
	return Field{name: name,
		to: func() {
			*p = nil
			if !reflect.ValueOf(e).Elem().IsZero() {
				*p = new(PM)
				To(fields(e, *p))
			}
		},
		from: func(prefix string) error {
			*e = *new(EM)
			if *p == nil {
				return nil
			}
			return From(fields(e, *p), prefix+name+".")
		}}
}

// List binds a slice of engine structs to a repeated proto message field,
// element by element with fields. An empty list is nil.
func List[EM any, PM any, PP interface {
	*PM
	proto.Message
}](name string, e *[]EM, p *[]PP, fields func(*EM, PP) []Field) Field {
	return Field{name: name,
		to: func() {
			*p = nil
			for i := range *e {
				m := PP(new(PM))
				To(fields(&(*e)[i], m))
				*p = append(*p, m)
			}
		},
		from: func(prefix string) error {
			*e = nil
			for i, m := range *p {
				if m == nil {
					m = new(PM)
				}
				var v EM
				if err := From(fields(&v, m), fmt.Sprintf("%s%s[%d].", prefix, name, i)); err != nil {
					return err
				}
				*e = append(*e, v)
			}
			return nil
		}}
}

// To copies every engine value of fs into its proto field.
func To(fs []Field) {
	for _, f := range fs {
		f.to()
	}
}

// From copies every proto value of fs into its engine field; errors name
// the field after prefix (such as "pool.").
func From(fs []Field, prefix string) error {
	for _, f := range fs {
		if err := f.from(prefix); err != nil {
			return err
		}
	}
	return nil
}

// Duration converts an optional wire duration: unset gives 0, which the
// engine reads as "the default"; a malformed or negative one is
// INVALID_ARGUMENT naming field.
func Duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("%s is not a valid duration (seconds %d, nanos %d): %v; give a non-negative duration such as 1.5s", field, d.GetSeconds(), d.GetNanos(), err)
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, invalid("%s is negative (%v); give a non-negative duration, or leave it unset for the default", field, v)
	}
	return v, nil
}

// EnumNames lists the values of an enum but UNSPECIFIED: their full names,
// or with short their names without the enum's prefix, in lower case
// (RESOURCE_KIND_ACTIVE is "active").
func EnumNames(d protoreflect.EnumDescriptor, short bool) []string {
	var out []string
	vals := d.Values()
	for i := 0; i < vals.Len(); i++ {
		v := vals.Get(i)
		if v.Number() == 0 {
			continue
		}
		if short {
			out = append(out, EnumShortName(v))
		} else {
			out = append(out, string(v.Name()))
		}
	}
	return out
}

// EnumShortName is the name of v without its enum's prefix, in lower case:
// "active" for RESOURCE_KIND_ACTIVE.
func EnumShortName(v protoreflect.EnumValueDescriptor) string {
	return strings.ToLower(strings.TrimPrefix(string(v.Name()), enumPrefix(v.Parent().(protoreflect.EnumDescriptor))))
}

// EnumValue returns the value of d named s: its full name, or its short
// name in any case ("active", "ACTIVE" or "RESOURCE_KIND_ACTIVE").
func EnumValue(d protoreflect.EnumDescriptor, s string) (protoreflect.EnumValueDescriptor, bool) {
	if v := d.Values().ByName(protoreflect.Name(s)); v != nil {
		return v, true
	}
	v := d.Values().ByName(protoreflect.Name(enumPrefix(d) + strings.ToUpper(s)))
	return v, v != nil
}

// enumPrefix is the prefix of d's value names, "RESOURCE_KIND_": the name
// of its zero value less "UNSPECIFIED".
func enumPrefix(d protoreflect.EnumDescriptor) string {
	return strings.TrimSuffix(string(d.Values().ByNumber(0).Name()), "UNSPECIFIED")
}

func invalid(format string, args ...any) *apierr.Error {
	return &apierr.Error{Code: apierr.CodeInvalidArgument, Reason: apierr.ReasonInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
