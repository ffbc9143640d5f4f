package pagetoken

import (
	"strconv"
	"testing"

	"github.com/tollgate/tollgate/internal/errtest"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// A cluster's ListClients token names a server and a session id; one
// server's token (the id alone) is read as self's.
func TestSessionTokens(t *testing.T) {
	for _, c := range []struct {
		tok, server string
		after       uint64
	}{
		{"", "", 0},
		{EncodeSession("10.0.0.2:7070", 42), "10.0.0.2:7070", 42},
		{Encode(strconv.Itoa(7)), "self:1", 7},
	} {
		server, after, err := Session(c.tok, "self:1")
		if err != nil || server != c.server || after != c.after {
			t.Errorf("Session(%q) = %q, %d, %v; want %q, %d", c.tok, server, after, err, c.server, c.after)
		}
	}
	for _, bad := range []string{"!!", Encode("x@a:1"), Encode("3@"), Encode("@a:1")} {
		_, _, err := Session(bad, "self:1")
		errtest.WantCodes(t, err, apierr.CodeInvalidArgument)
	}
}
