// Package poolsfile reads the pools file: the pools a server declares at
// start.
//
// The pools file is YAML read as the JSON form of a PoolsFile message, a
// list of the API's Pool messages: its keys are the fields' names. The
// file is walked against the message's descriptor, so that every problem
// is reported with its line, then converted to JSON for protojson. Besides
// the JSON form, the walk accepts the short keys of fileAliases
// (concurrency for concurrency_limit), values in the text forms people
// write (poolconv.ParseText: "active", "15s", "off"), and, for a message
// with an enabled field (adaptive), true or false for {enabled: ...} and a
// mapping without enabled for enabled: true.
//
// It may import the engine (limiter), internal/poolconv, internal/refuse
// and the config proto; nothing of the server.
package poolsfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgate/tollgate/internal/poolconv"
	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	configv1 "github.com/tollgate/tollgate/proto/tollgate/config/v1"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// maxPoolsFileSize bounds the pools file Load reads.
const maxPoolsFileSize = 16 << 20

// fileAliases are the short keys of a pools file, by message, and the
// fields they stand for.
var fileAliases = map[protoreflect.FullName]map[string]protoreflect.Name{
	"tollgate.v1.Pool": {"concurrency": "concurrency_limit", "default_ttl": "default_lease_ttl", "max_ttl": "max_lease_ttl",
		"kind": "resource_kind", "selection": "selection_policy"},
}

// Load reads the pools a server declares at start from a YAML file
// of the form
//
//	pools:
//	  - name: orders-db
//	    description: primary database
//	    concurrency_limit: 20   # or concurrency
//	    rate: 100               # tokens per second
//	    default_lease_ttl: 15s  # or default_ttl
//	    resource_kind: active   # or kind; RESOURCE_KIND_ACTIVE also works
//	    adaptive: {backoff: 0.9}
//	    near_full_mark: off
//
// Every field but name is optional (0 or absent means the default, as in
// the API); each pool needs a concurrency limit, a rate, or both. It
// returns the pools in file order, each validated with defaults filled in.
// An empty file declares no pools. Errors name the file and line: an
// unknown or repeated key, a value of the wrong type, a bad duration or
// enum value, a pool that fails validation, or a name declared twice.
func Load(path string) ([]limiter.PoolConfig, error) {
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
	return Parse(path, data)
}

// Parse parses the contents of a pools file as Load does;
// name is used in error messages.
func Parse(name string, data []byte) ([]limiter.PoolConfig, error) {
	w := yamlWalker{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, nil // empty file
	}
	root := doc.Content[0]
	var file configv1.PoolsFile
	if root.Kind != yaml.MappingNode {
		return nil, w.errorf(root, "the file must be a mapping with the key pools (pools: [{name: ..., concurrency_limit: ...}])")
	}
	js, err := w.message(root, file.ProtoReflect().Descriptor(), "the file", "", true)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(js)
	if err == nil {
		err = protojson.Unmarshal(b, &file)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	entries := mappingValue(root, "pools")
	out := make([]limiter.PoolConfig, 0, len(file.GetPools()))
	lines := make(map[string]int, len(file.GetPools()))
	for i, p := range file.GetPools() {
		n := entries.Content[i]
		if p.GetName() == "" {
			return nil, w.errorf(n, "this pool has no name; add name: <1 to %d characters of [A-Za-z0-9._:/-]>", limiter.MaxPoolNameLen)
		}
		cfg, err := poolconv.FromProto(p)
		if err == nil {
			cfg = cfg.WithDefaults()
			err = cfg.Validate()
		}
		if le := (*apierr.Error)(nil); errors.As(err, &le) {
			return nil, w.errorf(n, "%s", le.Message)
		} else if err != nil {
			return nil, w.errorf(n, "%v", err)
		}
		if prev, dup := lines[cfg.Name]; dup {
			return nil, w.errorf(n, "pool %q is declared twice (first at line %d)", cfg.Name, prev)
		}
		lines[cfg.Name] = n.Line
		out = append(out, cfg)
	}
	return out, nil
}

// yamlWalker turns a YAML tree into the JSON form of a message, checking
// it against the message's descriptor.
type yamlWalker struct{ file string }

func (w yamlWalker) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", w.file, n.Line, fmt.Sprintf(format, args...))
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// mappingValue returns the value of key in the mapping n, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// fileField returns the field of md that the pools file key k names: its
// name, its JSON name, or a short key of fileAliases.
func fileField(md protoreflect.MessageDescriptor, k string) protoreflect.FieldDescriptor {
	if alias, ok := fileAliases[md.FullName()][k]; ok {
		k = string(alias)
	}
	fd := md.Fields().ByName(protoreflect.Name(k))
	if fd == nil {
		fd = md.Fields().ByJSONName(k)
	}
	if fd == nil || poolconv.OutputOnly(fd) {
		return nil
	}
	return fd
}

// fileKeys lists the keys md has in a pools file, with their short forms.
func fileKeys(md protoreflect.MessageDescriptor) string {
	short := map[protoreflect.Name]string{}
	for k, name := range fileAliases[md.FullName()] {
		short[name] = k
	}
	var keys []string
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if poolconv.OutputOnly(fd) {
			continue
		}
		k := string(fd.Name())
		if s, ok := short[fd.Name()]; ok {
			k += " (or " + s + ")"
		}
		keys = append(keys, k)
	}
	return strings.Join(keys, ", ")
}

// message converts the mapping n, written as name, to the JSON object of
// md. prefix is the path of n's keys for messages ("adaptive."); root says
// n is the file.
func (w yamlWalker) message(n *yaml.Node, md protoreflect.MessageDescriptor, name, prefix string, root bool) (map[string]any, error) {
	enabled := md.Fields().ByName("enabled")
	if enabled != nil && enabled.Kind() == protoreflect.BoolKind && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		return map[string]any{"enabled": n.Value == "true"}, nil
	}
	if n.Kind != yaml.MappingNode {
		what := name + " must be"
		if enabled != nil {
			what += " true, false, or"
		}
		return nil, w.errorf(n, "%s a mapping with keys %s", what, fileKeys(md))
	}
	out := make(map[string]any, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fd := fileField(md, k.Value)
		switch {
		case fd == nil && root:
			return nil, w.errorf(k, "unknown key %q; the top level has %s", refuse.Truncate(k.Value, 64), fileKeys(md))
		case fd == nil && prefix == "":
			return nil, w.errorf(k, "unknown field %q; a %s has %s", refuse.Truncate(k.Value, 64), strings.ToLower(string(md.Name())), fileKeys(md))
		case fd == nil:
			return nil, w.errorf(k, "unknown field %q in %s; it has %s", refuse.Truncate(k.Value, 64), strings.TrimSuffix(prefix, "."), fileKeys(md))
		}
		if _, dup := out[string(fd.Name())]; dup {
			return nil, w.errorf(k, "key %q is given twice (as %s)", k.Value, fd.Name())
		}
		val, err := w.field(v, fd, prefix+k.Value)
		if err != nil {
			return nil, err
		}
		out[string(fd.Name())] = val
	}
	if _, set := out["enabled"]; enabled != nil && !set {
		out["enabled"] = true
	}
	return out, nil
}

// field converts the value n of the field fd, written as key.
func (w yamlWalker) field(n *yaml.Node, fd protoreflect.FieldDescriptor, key string) (any, error) {
	if !fd.IsList() {
		return w.singular(n, fd, key)
	}
	if isNull(n) {
		return []any{}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, w.errorf(n, "%s must be a list (- ...)", key)
	}
	out := make([]any, len(n.Content))
	for i, e := range n.Content {
		var err error
		if fd.Message() != nil {
			out[i], err = w.message(e, fd.Message(), "each of "+key, "", false)
		} else {
			out[i], err = w.singular(e, fd, key+"["+strconv.Itoa(i)+"]")
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// singular converts the value n of a field of one value.
func (w yamlWalker) singular(n *yaml.Node, fd protoreflect.FieldDescriptor, key string) (any, error) {
	if !poolconv.Scalar(fd) {
		return w.message(n, fd.Message(), key, key+".", false)
	}
	if n.Kind != yaml.ScalarNode {
		if fd.Kind() == protoreflect.StringKind {
			return nil, w.errorf(n, "%s must be a string", key)
		}
		_, err := poolconv.ParseText(fd, "")
		return nil, w.errorf(n, "%s %v", key, err)
	}
	v, err := poolconv.ParseText(fd, n.Value)
	if err != nil {
		return nil, w.errorf(n, "%s %v; it is %q", key, err, refuse.Truncate(n.Value, 64))
	}
	switch {
	case fd.Enum() != nil:
		return string(fd.Enum().Values().ByNumber(v.Enum()).Name()), nil
	case fd.Message() != nil:
		if d, ok := v.Message().Interface().(*durationpb.Duration); ok && d.AsDuration() < 0 {
			return nil, w.errorf(n, "%s must not be negative; it is %q", key, n.Value)
		}
		b, err := protojson.Marshal(v.Message().Interface())
		return json.RawMessage(b), err
	}
	return v.Interface(), nil
}
