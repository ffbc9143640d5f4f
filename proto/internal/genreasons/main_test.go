package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
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

// forEachGoFile parses every Go file of the module but tests, the proto
// directory and testdata, wherever later changes move packages.
func forEachGoFile(t *testing.T, fn func(fset *token.FileSet, path string, f *ast.File)) {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (n == "proto" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		fn(fset, path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoReasonOutsideTheList scans the module (the engine, the server, the
// client, the command) for a reason spelled by hand (a string literal of
// type Reason, or an Error with a literal Reason): every reason must come
// from the generated list in package apierr (under proto, so not scanned),
// so that a reason the server sends always has an Err* value.
func TestNoReasonOutsideTheList(t *testing.T) {
	inProto(t)
	forEachGoFile(t, func(fset *token.FileSet, _ string, f *ast.File) {
		for _, pos := range handReasons(f) {
			t.Errorf("%s: a reason spelled by hand; add it to ErrorReason in %s and use the generated constant", fset.Position(pos), source)
		}
	})
}

func TestHandReasonsFindsThem(t *testing.T) {
	src := `package p
const A Reason = "X"
var B = apierr.Reason("Y")
var C = &Error{Code: 1, Reason: "Z"}
var D = apierr.Error{Reason: "W"}
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

// TestCodesAgreeWithTheList checks every place in the engine and the server
// that pairs a code with a reason (an Error{Code, Reason} literal, a call
// such as refusef(codes.X, ReasonY, ...), an assignment code, reason = ...)
// against the grpc_code the enum gives the reason, so that apierr's Err*
// values carry the code the server really sends.
func TestCodesAgreeWithTheList(t *testing.T) {
	inProto(t)
	rs, err := readReasons()
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string]string, len(rs)) // Go name (PoolNotFound) -> grpc-go code name
	for _, r := range rs {
		want[goName(r.wire)] = goCodes[r.code]
	}
	checked := 0
	forEachGoFile(t, func(fset *token.FileSet, _ string, f *ast.File) {
		for _, p := range codeReasonPairs(f) {
			checked++
			if w, ok := want[p.reason]; !ok {
				t.Errorf("%s: Reason%s is not in the list", fset.Position(p.pos), p.reason)
			} else if p.code != w {
				t.Errorf("%s: Reason%s is sent with code %s; the list says %s", fset.Position(p.pos), p.reason, p.code, w)
			}
		}
	})
	if checked < 30 {
		t.Errorf("found only %d code and reason pairs; the scan misses them", checked)
	}
}

func TestCodeReasonPairsFindsThem(t *testing.T) {
	src := `package p
var A = &Error{Code: CodeNotFound, Reason: ReasonPoolNotFound}
var B = apierr.Error{Code: apierr.CodeCanceled, Reason: ReasonCanceled}
var C = refusef(codes.PermissionDenied, ReasonPermissionDenied, "x")
var D = &Error{Reason: ReasonInternal}
func f() { code, reason = apierr.CodeDeadlineExceeded, ReasonProviderExpired }
var ok = &Error{Code: kind.Code, Reason: kind.Reason}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range codeReasonPairs(f) {
		got = append(got, p.code+" "+p.reason)
	}
	want := "NotFound PoolNotFound,Canceled Canceled,PermissionDenied PermissionDenied,Internal Internal,DeadlineExceeded ProviderExpired"
	if strings.Join(got, ",") != want {
		t.Errorf("pairs %q; want %q", strings.Join(got, ","), want)
	}
}

// codePair is a code and a reason given together.
type codePair struct {
	pos          token.Pos
	code, reason string // grpc-go code name (NotFound), reason Go name (PoolNotFound)
}

// codeReasonPairs returns where f gives a constant code with a constant
// reason. An Error literal without a Code has code 0, which the server
// sends as INTERNAL.
func codeReasonPairs(f *ast.File) []codePair {
	name := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			return e.Name
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "codes" {
				return "Code" + e.Sel.Name
			}
			return e.Sel.Name
		}
		return ""
	}
	code := func(e ast.Expr) string {
		n := name(e)
		if len(n) > 4 && strings.HasPrefix(n, "Code") {
			return strings.TrimPrefix(n, "Code")
		}
		return ""
	}
	reason := func(e ast.Expr) string {
		n := name(e)
		if len(n) > 6 && strings.HasPrefix(n, "Reason") {
			return strings.TrimPrefix(n, "Reason")
		}
		return ""
	}
	var found []codePair
	pair := func(pos token.Pos, exprs []ast.Expr, defaultCode string) {
		var c, r string
		for _, e := range exprs {
			if s := code(e); s != "" {
				c = s
			}
			if s := reason(e); s != "" {
				r = s
			}
		}
		if c == "" {
			c = defaultCode
		}
		if c != "" && r != "" {
			found = append(found, codePair{pos, c, r})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if n.Type == nil || name(n.Type) != "Error" {
				return true
			}
			var vals []ast.Expr
			hasCode := false
			for _, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					vals = append(vals, kv.Value)
					hasCode = hasCode || name(kv.Key) == "Code"
				}
			}
			if !hasCode {
				pair(n.Pos(), vals, "Internal")
			} else {
				pair(n.Pos(), vals, "")
			}
		case *ast.CallExpr:
			pair(n.Pos(), n.Args, "")
		case *ast.AssignStmt:
			pair(n.Pos(), n.Rhs, "")
		}
		return true
	})
	return found
}
