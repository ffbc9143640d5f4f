// Package python holds the test of the Python example (tollgate_lease.py,
// example.py): it runs run_test.py, which starts a real tollgate server and
// two Python processes sharing a pool of limit 1.
package python

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
)

// pythonWithGRPC returns a python3 that can import grpc and protobuf:
// the one on PATH, or Debian's (where python3-grpcio installs).
func pythonWithGRPC() string {
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import grpc, google.protobuf").Run() == nil {
			return py
		}
	}
	return ""
}

func TestPythonExample(t *testing.T) {
	py := pythonWithGRPC()
	if py == "" {
		citest.SkipOrFail(t, "no python3 with grpc and protobuf: apt-get install python3-grpcio python3-protobuf")
	}
	for _, tool := range []string{"protoc", "grpc_python_plugin"} {
		if _, err := exec.LookPath(tool); err != nil {
			citest.SkipOrFail(t, tool+" is not installed: apt-get install protobuf-compiler protobuf-compiler-grpc")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "run_test.py").CombinedOutput()
	t.Logf("run_test.py:\n%s", out)
	if err != nil {
		t.Fatalf("run_test.py: %v", err)
	}
}
