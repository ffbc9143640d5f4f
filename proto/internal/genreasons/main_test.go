package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// The tests run in proto/internal/genreasons; go generate runs in proto.
func inProto(t *testing.T) {
	t.Helper()
	t.Chdir("../..")
}

// TestGeneratedUpToDate fails when errors.proto changed without go generate
// ./proto, or when a generated file was edited by hand.
func TestGeneratedUpToDate(t *testing.T) {
	inProto(t)
	files, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what errors.proto generates; run go generate ./proto", path)
		}
	}
}

// TestParseMatchesDescriptor checks the text parser against the compiled
// enum: the same values, in order, with the same grpc_code options.
func TestParseMatchesDescriptor(t *testing.T) {
	inProto(t)
	rs, err := readReasons()
	if err != nil {
		t.Fatal(err)
	}
	vals := tollgatev1.ErrorReason(0).Descriptor().Values()
	if len(rs) != vals.Len()-1 {
		t.Fatalf("parsed %d reasons; the enum has %d values besides UNSPECIFIED", len(rs), vals.Len()-1)
	}
	for i, r := range rs {
		v := vals.Get(i + 1)
		code := proto.GetExtension(v.Options(), tollgatev1.E_GrpcCode).(string)
		if "ERROR_REASON_"+r.wire != string(v.Name()) || r.code != code {
			t.Errorf("reason %d: parsed %s %s, descriptor %s %s", i+1, r.wire, r.code, v.Name(), code)
		}
	}
}

// TestNoReasonOutsideTheList scans the engine, the server and the client for
// a reason spelled by hand (a string literal of type Reason, or an Error with
// a literal Reason): every reason must come from the generated list, so
// that a reason the server sends always has a client sentinel.
func TestNoReasonOutsideTheList(t *testing.T) {
	inProto(t)
	for _, dir := range []string{"../limiter", "../server", "../client"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") || path == filepath.Clean(limiterGo) || path == filepath.Clean(clientGo) {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, pos := range handReasons(f) {
				t.Errorf("%s: a reason spelled by hand; add it to ErrorReason in %s and use the generated constant", fset.Position(pos), source)
			}
		}
	}
}

func TestHandReasonsFindsThem(t *testing.T) {
	src := `package p
const A Reason = "X"
var B = limiter.Reason("Y")
var C = &Error{Code: 1, Reason: "Z"}
var D = limiter.Error{Reason: "W"}
var ok1 = Event{Reason: "for people"}
const ok2 = ReasonPoolBusy
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(handReasons(f)); got != 4 {
		t.Errorf("found %d hand-spelled reasons; want 4", got)
	}
}

// handReasons returns where f spells a reason as a string literal.
func handReasons(f *ast.File) []token.Pos {
	isReason := func(e ast.Expr, name string) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name == name
		case *ast.SelectorExpr:
			return e.Sel.Name == name
		}
		return false
	}
	isLit := func(e ast.Expr) bool {
		l, ok := e.(*ast.BasicLit)
		return ok && l.Kind == token.STRING
	}
	var found []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if n.Type != nil && isReason(n.Type, "Reason") {
				for _, v := range n.Values {
					if isLit(v) {
						found = append(found, v.Pos())
					}
				}
			}
		case *ast.CallExpr:
			if isReason(n.Fun, "Reason") && len(n.Args) == 1 && isLit(n.Args[0]) {
				found = append(found, n.Pos())
			}
		case *ast.CompositeLit:
			if n.Type != nil && isReason(n.Type, "Error") {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok && isReason(kv.Key, "Reason") && isLit(kv.Value) {
						found = append(found, kv.Value.Pos())
					}
				}
			}
		}
		return true
	})
	return found
}
