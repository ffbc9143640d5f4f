package poolconv

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/limiter"
)

// The text forms of a pool's field values, as people write them in the
// pools file and the CLI's flags, and as the CLI prints them.

var (
	durationName  = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()
	timestampName = (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()
)

// IsMark reports whether fd is an event mark: a number whose value -1
// (limiter.MarkOff) is written "off".
func IsMark(fd protoreflect.FieldDescriptor) bool {
	return strings.HasSuffix(string(fd.Name()), "_mark")
}

// Scalar reports whether ParseText can parse a value of fd: any field of
// one value but a message other than a Duration.
func Scalar(fd protoreflect.FieldDescriptor) bool {
	return !fd.IsList() && !fd.IsMap() && (fd.Message() == nil || fd.Message().FullName() == durationName)
}

// ParseText parses s as a value of fd:
//   - an enum value by its short name in any case ("active"), or its full
//     name ("RESOURCE_KIND_ACTIVE");
//   - a Duration as Go writes one ("15s", "1h30m"), or "0" (a negative one
//     is left to the conversion to refuse, as from the API);
//   - a whole number, a finite number, true or false, or any string;
//   - for a mark (a number field named *_mark), also "off" for -1.
//
// Errors say what s must be, such as "must be a whole number".
func ParseText(fd protoreflect.FieldDescriptor, s string) (protoreflect.Value, error) {
	if IsMark(fd) && s == "off" {
		if fd.Kind() == protoreflect.DoubleKind {
			return protoreflect.ValueOfFloat64(limiter.MarkOff), nil
		}
		return protoreflect.ValueOfInt64(limiter.MarkOff), nil
	}
	orOff := ""
	if IsMark(fd) {
		orOff = ", or off"
	}
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if v, ok := EnumValue(fd.Enum(), s); ok {
			return protoreflect.ValueOfEnum(v.Number()), nil
		}
		return protoreflect.Value{}, fmt.Errorf("must be %s", orList(EnumNames(fd.Enum(), true)))
	case protoreflect.Int64Kind:
		if x, err := strconv.ParseInt(s, 0, 64); err == nil {
			return protoreflect.ValueOfInt64(x), nil
		}
		return protoreflect.Value{}, fmt.Errorf("must be a whole number%s", orOff)
	case protoreflect.Uint32Kind:
		if x, err := strconv.ParseUint(s, 0, 32); err == nil {
			return protoreflect.ValueOfUint32(uint32(x)), nil
		}
		return protoreflect.Value{}, fmt.Errorf("must be a whole number of 0 or more")
	case protoreflect.DoubleKind:
		if x, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
			return protoreflect.ValueOfFloat64(x), nil
		}
		return protoreflect.Value{}, fmt.Errorf("must be a finite number%s", orOff)
	case protoreflect.BoolKind:
		if x, err := strconv.ParseBool(s); err == nil {
			return protoreflect.ValueOfBool(x), nil
		}
		return protoreflect.Value{}, fmt.Errorf("must be true or false")
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s), nil
	case protoreflect.MessageKind:
		if fd.Message().FullName() != durationName {
			break
		}
		d, err := time.ParseDuration(s)
		if s == "0" {
			d, err = 0, nil
		}
		if err != nil {
			return protoreflect.Value{}, fmt.Errorf("must be a duration such as 15s or 5m (%s)", strings.TrimPrefix(err.Error(), "time: "))
		}
		return protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect()), nil
	}
	return protoreflect.Value{}, fmt.Errorf("cannot be written as text")
}

// FormatText is the text form of v, a value of fd, for people: enums by
// their short names (unspecified as the default, the first value), durations and times as Go writes them (times in the
// local zone), marks -1 as off, a message as its fields, a list as its
// elements in brackets.
func FormatText(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	if !fd.IsList() {
		return formatOne(fd, v)
	}
	l := v.List()
	items := make([]string, l.Len())
	for i := range items {
		items[i] = formatOne(fd, l.Get(i))
	}
	return "[" + strings.Join(items, "; ") + "]"
}

// formatOne is the text form of v, one value of fd.
func formatOne(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.Kind() == protoreflect.EnumKind:
		return enumText(fd.Enum(), v.Enum())
	case IsMark(fd) && fd.Kind() == protoreflect.Int64Kind && v.Int() == limiter.MarkOff,
		IsMark(fd) && fd.Kind() == protoreflect.DoubleKind && v.Float() == limiter.MarkOff:
		return "off"
	case fd.Kind() == protoreflect.DoubleKind:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case fd.Message() == nil:
		return fmt.Sprint(v.Interface())
	case fd.Message().FullName() == durationName:
		return v.Message().Interface().(*durationpb.Duration).AsDuration().String()
	case fd.Message().FullName() == timestampName:
		return v.Message().Interface().(*timestamppb.Timestamp).AsTime().Local().Format(time.RFC3339)
	}
	var parts []string
	m := v.Message()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() { // in declaration order: Range's is undefined
		if f := fields.Get(i); m.Has(f) {
			parts = append(parts, string(f.Name())+" "+FormatText(f, m.Get(f)))
		}
	}
	return strings.Join(parts, ", ")
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// EnumText is the short name of e ("revoke"); unspecified is the default,
// the enum's first value.
func EnumText(e protoreflect.Enum) string { return enumText(e.Descriptor(), e.Number()) }

func enumText(d protoreflect.EnumDescriptor, n protoreflect.EnumNumber) string {
	if n == 0 {
		n = 1
	}
	if v := d.Values().ByNumber(n); v != nil {
		return EnumShortName(v)
	}
	return strconv.Itoa(int(n))
}

// hasBehavior reports whether fd is annotated with any of bs
// (google.api.field_behavior).
func hasBehavior(fd protoreflect.FieldDescriptor, bs ...annotations.FieldBehavior) bool {
	for _, b := range proto.GetExtension(fd.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior) {
		if slices.Contains(bs, b) {
			return true
		}
	}
	return false
}

// OutputOnly reports whether fd is set by the server only (OUTPUT_ONLY):
// a request or a pools file cannot set it.
func OutputOnly(fd protoreflect.FieldDescriptor) bool {
	return hasBehavior(fd, annotations.FieldBehavior_OUTPUT_ONLY)
}

// Immutable reports whether fd cannot change once its message is created
// (IMMUTABLE, IDENTIFIER or OUTPUT_ONLY).
func Immutable(fd protoreflect.FieldDescriptor) bool {
	return hasBehavior(fd, annotations.FieldBehavior_IMMUTABLE, annotations.FieldBehavior_IDENTIFIER, annotations.FieldBehavior_OUTPUT_ONLY)
}
