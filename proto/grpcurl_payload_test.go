package proto

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// grpcurlCall matches a grpcurl command of the docs with a -d payload: the
// payload (in single quotes, over lines) and the method after the address.
var grpcurlCall = regexp.MustCompile(`grpcurl [^'\n]*-d '([^']*)'[\s\\]*\S+ ([\w.]+/\w+)`)

// TestGrpcurlDocPayloads: every -d payload of a grpcurl command in the
// README and docs/ is a request of its method as grpcurl 1.9 reads it: the
// method exists, the JSON decodes into its input message, and each
// google.protobuf.FieldMask is written as an object ({"paths": [...]}),
// since grpcurl's dynamic messages refuse the string form.
func TestGrpcurlDocPayloads(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, path := range append(files, "../README.md") {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range grpcurlCall.FindAllStringSubmatch(string(doc), -1) {
			payload, method := m[1], m[2]
			if strings.Contains(payload, "$") { // a shell variable: not literal JSON
				continue
			}
			calls++
			svc, name, _ := strings.Cut(method, "/")
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
			if err != nil {
				if strings.HasPrefix(svc, "tollgate.") {
					t.Errorf("%s: %s: %v", path, method, err)
				}
				continue
			}
			md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
			if md == nil {
				t.Errorf("%s: no method %s", path, method)
				continue
			}
			var tree any
			if err := json.Unmarshal([]byte(payload), &tree); err != nil {
				t.Errorf("%s: %s: %v", path, method, err)
				continue
			}
			for _, bad := range stringFieldMasks(tree, md.Input()) {
				t.Errorf("%s: %s: %q is a FieldMask written as a string; grpcurl needs {\"paths\": [...]}", path, method, bad)
			}
			b, err := json.Marshal(tree) // the masks in protojson's form
			if err != nil {
				t.Fatal(err)
			}
			if err := protojson.Unmarshal(b, dynamicpb.NewMessage(md.Input())); err != nil {
				t.Errorf("%s: %s: payload %s: %v", path, method, payload, err)
			}
		}
	}
	if calls < 10 {
		t.Fatalf("found %d grpcurl calls with a payload in the docs; the pattern is broken", calls)
	}
}

// stringFieldMasks returns the JSON names of the FieldMask fields of v (a
// decoded JSON value of message md) that are not written as objects, and
// rewrites those that are into protojson's form ("a,b").
func stringFieldMasks(v any, md protoreflect.MessageDescriptor) []string {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var bad []string
	for k, fv := range obj {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil || fd.Message() == nil || fd.IsMap() {
			continue
		}
		if fd.Message().FullName() == "google.protobuf.FieldMask" {
			mask, isObj := fv.(map[string]any)
			if !isObj {
				bad = append(bad, k)
				continue
			}
			var paths []string
			if ps, _ := mask["paths"].([]any); ps != nil {
				for _, p := range ps {
					s, _ := p.(string)
					paths = append(paths, lowerCamel(s))
				}
			}
			obj[k] = strings.Join(paths, ",")
			continue
		}
		elems := []any{fv}
		if list, isList := fv.([]any); isList {
			elems = list
		}
		for _, e := range elems {
			bad = append(bad, stringFieldMasks(e, fd.Message())...)
		}
	}
	return bad
}

// lowerCamel is a field path in protojson's FieldMask form: "max_lease_ttl"
// is "maxLeaseTtl".
func lowerCamel(path string) string {
	parts := strings.Split(path, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
