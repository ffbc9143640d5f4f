package client

import "testing"

func TestServerFromEnv(t *testing.T) {
	t.Setenv("TOLLGATE_SERVER", "")
	if got := ServerFromEnv(); got != "127.0.0.1:7070" {
		t.Fatalf("unset: %q", got)
	}
	t.Setenv("TOLLGATE_SERVER", "tollgate-0.tollgate:7070,tollgate-1.tollgate:7070")
	if got := ServerFromEnv(); got != "tollgate-0.tollgate:7070,tollgate-1.tollgate:7070" {
		t.Fatalf("set: %q", got)
	}
}
