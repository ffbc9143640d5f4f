package client

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// defaultPort is the port of a server address given without one: the
// port tollgate serve listens on by default.
const defaultPort = "7070"

// serverAddress checks one server address given to Dial and completes it:
// "host" and "[::1]" get the default port 7070 (gRPC would dial 443), an
// http:// or https:// URL is refused with what to type instead, and a gRPC
// target with a scheme ("dns:///host:7070", "unix:///path") is left as it
// is.
func serverAddress(a string) (string, error) {
	if scheme, rest, ok := strings.Cut(a, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http", "https", "grpc", "grpcs":
			hostport, _, _ := strings.Cut(rest, "/")
			if hostport == "" {
				hostport = "HOST:7070"
			}
			tls := ""
			if strings.HasSuffix(strings.ToLower(scheme), "s") {
				tls = " (TLS is set apart: --tls-ca, or client.Dialer{TLS: ...})"
			}
			return "", fmt.Errorf("tollgate: server address %q is a URL; give host:port without %s:// (%s)%s", a, scheme, hostport, tls)
		}
		return a, nil
	}
	if strings.HasPrefix(a, "unix:") { // gRPC's unix:path form
		return a, nil
	}
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a, nil
	}
	host := strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.String(), defaultPort), nil
	}
	if strings.ContainsAny(host, ":[]/ ") {
		return "", fmt.Errorf("tollgate: server address %q is not host:port (for example 127.0.0.1:7070 or [::1]:7070)", a)
	}
	return net.JoinHostPort(host, defaultPort), nil
}
