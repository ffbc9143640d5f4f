package proto

import (
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/tollgate/tollgate/proto/tollgate/v1" // registers the tollgate.v1 files
)

// docs/grpcurl.md walks through every RPC: each method of each service in
// the tollgate.v1 package appears there as "tollgate.v1.Service/Method".
func TestGrpcurlDocCoversEveryRPC(t *testing.T) {
	doc, err := os.ReadFile("../docs/grpcurl.md")
	if err != nil {
		t.Fatal(err)
	}
	methods := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("tollgate.v1", func(f protoreflect.FileDescriptor) bool {
		for i := 0; i < f.Services().Len(); i++ {
			svc := f.Services().Get(i)
			for j := 0; j < svc.Methods().Len(); j++ {
				methods++
				name := string(svc.FullName()) + "/" + string(svc.Methods().Get(j).Name())
				if !strings.Contains(string(doc), name) {
					t.Errorf("docs/grpcurl.md does not show %s", name)
				}
			}
		}
		return true
	})
	if methods < 2 {
		t.Fatalf("found %d methods in package tollgate.v1; the descriptors were not registered", methods)
	}
}
