// Package python holds the test of the Python example (example.py, on the
// tollgate package of clients/python): it runs run_test.py, which starts a
// real tollgate server and two Python processes sharing a pool of limit 1.
package python

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/citest"
	"github.com/tollgate/tollgate/internal/hatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	hatest.CleanBuilds()
	os.Exit(code)
}

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
	// Built like every other package's tests build it (with the race
	// detector when the test has it, so from the packages go test built):
	// a build of its own was most of the time the script took, and the
	// script's bound is for its own work.
	bin := hatest.Build(t, "github.com/tollgate/tollgate/cmd/tollgate")
	const bound = 3 * time.Minute // the script's work takes about 10s, 13s on a starved core
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	// On a hang, the script is interrupted so that it stops the server
	// and prints where it was, and killed if it does not exit soon after.
	cmd := exec.CommandContext(ctx, py, "run_test.py", "--tollgate", bin)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("run_test.py:\n%s", out)
	if ctx.Err() != nil {
		t.Fatalf("run_test.py did not finish within %v, so it was stopped: %v", bound, err)
	}
	if err != nil {
		t.Fatalf("run_test.py: %v", err)
	}
}

// TestReadmeCommands checks the README's command: the interpreter it names
// must be one where grpc imports, and the tollgate package must import in
// it from the PYTHONPATH the command gives.
func TestReadmeCommands(t *testing.T) {
	if pythonWithGRPC() == "" {
		citest.SkipOrFail(t, "no python3 with grpc and protobuf: apt-get install python3-grpcio python3-protobuf")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\n")
	if !ok {
		t.Fatal("README.md has no sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var python, path string
	for _, line := range strings.Split(block, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 2 && strings.HasPrefix(fields[0], "PYTHONPATH=") && strings.HasSuffix(fields[2], "example.py") {
			path, python = strings.TrimPrefix(fields[0], "PYTHONPATH="), fields[1]
		}
	}
	if python == "" {
		t.Fatal("README.md's sh block runs no PYTHONPATH=... PYTHON examples/python/example.py")
	}
	cmd := exec.Command(python, "-c", "import tollgate; tollgate.Client('127.0.0.1:1').close()")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md runs %s with PYTHONPATH=%s, where the tollgate package does not import: %v\n%s", python, path, err, out)
	}
}
