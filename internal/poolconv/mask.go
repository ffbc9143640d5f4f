package poolconv

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tollgate/tollgate/internal/refuse"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// UpdatePool's update_mask is read against the Pool message itself: a path
// is a field of Pool ("rate"), or a field of one of its own messages
// ("adaptive.backoff"), that is not immutable (poolconv.Immutable: the
// field_behavior annotations of the proto).

var poolDescriptor = (&tollgatev1.Pool{}).ProtoReflect().Descriptor()

// immutablePath reports whether the top-level Pool field name is one
// UpdatePool cannot change.
func immutablePath(name string) bool {
	fd := poolDescriptor.Fields().ByName(protoreflect.Name(name))
	return fd != nil && Immutable(fd)
}

// UpdatablePaths are the fields of Pool that UpdatePool can change, in the
// order they are declared.
var UpdatablePaths = func() []string {
	var out []string
	fields := poolDescriptor.Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); !Immutable(fd) {
			out = append(out, string(fd.Name()))
		}
	}
	return out
}()

// Mask is a checked update_mask: the field chain of each path.
type Mask [][]protoreflect.FieldDescriptor

// ParseMask checks the paths of an UpdatePool request's update_mask.
func ParseMask(paths []string) (Mask, error) {
	if len(paths) == 0 {
		return nil, invalid("update_mask is required: name the fields to change, any of %s", strings.Join(UpdatablePaths, ", "))
	}
	mask := make(Mask, 0, len(paths))
	for _, path := range paths {
		top, _, _ := strings.Cut(path, ".")
		if immutablePath(top) {
			return nil, invalid("update_mask path %q cannot be changed; the paths that can are %s", path, strings.Join(UpdatablePaths, ", "))
		}
		fields := resolvePath(poolDescriptor, path)
		if fields == nil {
			return nil, invalid("update_mask path %q is not a pool field that can be changed; use any of %s, or adaptive.<field> (such as adaptive.backoff)", refuse.Truncate(path, 64), strings.Join(UpdatablePaths, ", "))
		}
		mask = append(mask, fields)
	}
	return mask, nil
}

// resolvePath returns the chain of fields path names in md, or nil. Only
// messages of the API's own package are entered: a path does not reach
// into a Duration.
func resolvePath(md protoreflect.MessageDescriptor, path string) []protoreflect.FieldDescriptor {
	var chain []protoreflect.FieldDescriptor
	for _, name := range strings.Split(path, ".") {
		if md == nil {
			return nil
		}
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsList() || fd.IsMap() {
			return nil
		}
		chain = append(chain, fd)
		md = nil
		if m := fd.Message(); m != nil && m.ParentFile().Package() == poolDescriptor.ParentFile().Package() {
			md = m
		}
	}
	return chain
}

// Merge copies the fields of src that m names into dst, and returns dst. A
// named field unset in src is cleared in dst (reset to its default).
func (m Mask) Merge(dst, src *tollgatev1.Pool) *tollgatev1.Pool {
	for _, chain := range m {
		d, s := dst.ProtoReflect(), src.ProtoReflect()
		for _, fd := range chain[:len(chain)-1] {
			d, s = d.Mutable(fd).Message(), s.Get(fd).Message()
		}
		last := chain[len(chain)-1]
		if !s.Has(last) {
			d.Clear(last)
			continue
		}
		v := s.Get(last)
		if last.Message() != nil {
			v = protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
		}
		d.Set(last, v)
	}
	return dst
}
