package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// jsonMessage renders m in the one JSON style of every -o json output, the
// HTTP API's: one line, keys as the .proto's snake_case field names, every
// number (64-bit ones too) a JSON number, every field of implicit presence
// written even when zero, enums by name, and the well-known types
// (Timestamp, Duration, ...) in their protojson form ("2030-01-02T03:04:05Z",
// "15s"). protojson.Unmarshal reads it back.
func jsonMessage(m proto.Message) ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSONMessage(&b, m.ProtoReflect()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeJSONMessage(b *bytes.Buffer, m protoreflect.Message) error {
	if d := m.Descriptor(); d.ParentFile().Package() == "google.protobuf" {
		raw, err := protojson.Marshal(m.Interface())
		if err != nil {
			return err
		}
		return json.Compact(b, raw)
	}
	b.WriteByte('{')
	fields := m.Descriptor().Fields()
	first := true
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.HasPresence() && !m.Has(fd) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeJSONString(b, string(fd.Name()))
		b.WriteByte(':')
		if err := writeJSONField(b, fd, m.Get(fd)); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func writeJSONField(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsList():
		l := v.List()
		b.WriteByte('[')
		for i := 0; i < l.Len(); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSONValue(b, fd, l.Get(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case fd.IsMap():
		mp := v.Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k.String())
			b.WriteByte(':')
			if err := writeJSONValue(b, fd.MapValue(), mp.Get(k)); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	}
	return writeJSONValue(b, fd, v)
}

// writeJSONValue writes one value of the kind of fd (an element, for a
// list).
func writeJSONValue(b *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		writeJSONFloat(b, v.Float(), fd.Kind() == protoreflect.FloatKind)
	case protoreflect.StringKind:
		writeJSONString(b, v.String())
	case protoreflect.BytesKind:
		writeJSONString(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			writeJSONString(b, string(ev.Name()))
		} else {
			b.WriteString(strconv.FormatInt(int64(v.Enum()), 10))
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return writeJSONMessage(b, v.Message())
	}
	return nil
}

// writeJSONFloat writes f as a JSON number, or as protojson's "NaN",
// "Infinity" and "-Infinity", which JSON has no number for.
func writeJSONFloat(b *bytes.Buffer, f float64, single bool) {
	switch {
	case math.IsNaN(f):
		b.WriteString(`"NaN"`)
	case math.IsInf(f, 1):
		b.WriteString(`"Infinity"`)
	case math.IsInf(f, -1):
		b.WriteString(`"-Infinity"`)
	case single:
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 32))
	default:
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	}
}

func writeJSONString(b *bytes.Buffer, s string) {
	raw, _ := json.Marshal(s) // a string always marshals
	b.Write(raw)
}
