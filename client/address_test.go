package client

import (
	"strings"
	"testing"
)

func TestServerAddress(t *testing.T) {
	for in, want := range map[string]string{
		"localhost":                  "localhost:7070",
		"tollgate.internal":          "tollgate.internal:7070",
		"127.0.0.1":                  "127.0.0.1:7070",
		"::1":                        "[::1]:7070",
		"[::1]":                      "[::1]:7070",
		"localhost:9000":             "localhost:9000",
		"[::1]:9000":                 "[::1]:9000",
		"dns:///tollgate.internal:1": "dns:///tollgate.internal:1",
		"unix:///tmp/tollgate.sock":  "unix:///tmp/tollgate.sock",
		"unix:/tmp/tollgate.sock":    "unix:/tmp/tollgate.sock",
	} {
		if got, err := serverAddress(in); err != nil || got != want {
			t.Errorf("serverAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"http://host:7070":    `is a URL; give host:port without http:// (host:7070)`,
		"https://host:7070/x": `without https:// (host:7070) (TLS is set apart`,
		"a b":                 "is not host:port",
	} {
		if _, err := serverAddress(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serverAddress(%q): %v; want %q", in, err, want)
		}
	}
}

// Dial("localhost") dials port 7070, not gRPC's default 443.
func TestDialDefaultPort(t *testing.T) {
	c, err := Dial("localhost")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Conn().Target(); got != "localhost:7070" {
		t.Fatalf("target %q", got)
	}
	if _, err := Dial("http://localhost:7070"); err == nil || !strings.Contains(err.Error(), "give host:port without http://") {
		t.Fatalf("Dial of a URL: %v", err)
	}
}
