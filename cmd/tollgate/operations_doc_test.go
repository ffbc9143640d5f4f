package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/server/tlstest"
)

// shBlocks returns the sh code blocks of Markdown text, each with its
// continuation lines joined.
func shBlocks(text string) []string {
	var out []string
	for _, part := range strings.Split(text, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, strings.ReplaceAll(block, "\\\n", " "))
	}
	return out
}

// TestOperationsDocTLS runs docs/operations.md's "Serving" command and its
// client commands, with the files it names made by a test CA: every client
// command succeeds against that server.
func TestOperationsDocTLS(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "### Serving\n")
	section, _, _ = strings.Cut(section, "### Lease and share ids")
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	for _, name := range []string{"tollgate.internal", "ops.example.com", "worker-1.orders.internal"} {
		ca.WriteFiles(t, dir, name, name)
	}
	_, policy, _ := strings.Cut(section, "```yaml\n")
	policy, _, _ = strings.Cut(policy, "```")
	files := map[string]string{
		"admin.token": "0123456789abcdef0123456789abcdef\n",
		"policy.yaml": strings.ReplaceAll(policy, "\n  ", "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// local replaces the doc's file names by the test's files, and drops
	// the flags the test sets itself.
	local := func(fields []string, drop ...string) []string {
		var out []string
		for i := 0; i < len(fields); i++ {
			f := fields[i]
			if strings.HasPrefix(f, "--") && len(drop) > 0 && strings.Contains(" "+strings.Join(drop, " ")+" ", " "+f+" ") {
				i++
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil && !strings.HasPrefix(f, "-") {
				f = filepath.Join(dir, f)
			}
			out = append(out, f)
		}
		return out
	}
	var addr string
	clients := 0
	for _, block := range shBlocks(section) {
		for _, line := range strings.Split(block, "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) > 1 && fields[0] == "tollgate" && fields[1] == "serve":
				addr, _ = startServe(t, local(fields[2:], "--listen", "--http")...)
			case len(fields) > 1 && fields[0] == "tollgate":
				if addr == "" {
					t.Fatalf("a client command before the server's: %s", line)
				}
				clients++
				runCLI(t, addr, local(fields[1:], "--server")...).mustSucceed(t)
			}
		}
	}
	if clients < 2 {
		t.Fatalf("ran %d client commands of docs/operations.md; want its two", clients)
	}
}
