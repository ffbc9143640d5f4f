// Package citest holds helpers for tests that need software outside Go
// (a browser, Node.js, Python): they skip where it is missing, but fail
// when the CI environment variable is set, since CI must run them all.
package citest

import (
	"os"
	"testing"
)

// SkipOrFail skips the test with msg, or fails it when CI is set.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test must run)", msg)
	}
	t.Skip(msg)
}
