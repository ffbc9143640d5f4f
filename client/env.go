package client

import "os"

// DefaultServer is the server address of Tollgate's command and examples
// when none is given.
const DefaultServer = "127.0.0.1:7070"

// ServerFromEnv returns the TOLLGATE_SERVER environment variable (a target
// for Dial: one address, or the comma-separated addresses of a cluster's
// servers, "a:7070,b:7070,c:7070"), or DefaultServer when it is unset or
// empty: the default of a program's server flag.
func ServerFromEnv() string {
	if s := os.Getenv("TOLLGATE_SERVER"); s != "" {
		return s
	}
	return DefaultServer
}
