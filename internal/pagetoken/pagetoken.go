// Package pagetoken makes and reads the opaque page tokens of the List
// calls: the base64url encoding of the last item of the previous page (a
// pool name, a decimal number, or "r" and an instance id). A token the
// server did not issue is refused as INVALID_ARGUMENT naming the call.
//
// It may import the engine (limiter), to check pool names, and
// internal/refuse; nothing of the server.
package pagetoken

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
)

// Encode makes the token for the page after last (a pool name or a
// decimal number).
func Encode(last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(last))
}

// Pool reads a token of ListPools or GetStats, made by Encode from a pool
// name; "" is the first page.
func Pool(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || limiter.ValidatePoolName(string(b)) != nil {
		return "", refused(tok, "ListPools")
	}
	return string(b), nil
}

// Number reads a token made by Encode from a decimal number (the last of
// the previous page) for the call named call; "" is the first page, 0.
func Number(tok, call string) (uint64, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	var after uint64
	if err == nil {
		after, err = strconv.ParseUint(string(b), 10, 64)
	}
	if err != nil {
		return 0, refused(tok, call)
	}
	return after, nil
}

// EncodeResource makes the ListResources token for the page after the
// instance id.
func EncodeResource(id string) string { return Encode("r" + id) }

// Resource reads a ListResources token; "" is the first page.
func Resource(tok string) (after string, first bool, err error) {
	if tok == "" {
		return "", true, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 2 || b[0] != 'r' {
		return "", false, refused(tok, "ListResources")
	}
	return string(b[1:]), false, nil
}

func refused(tok, call string) error {
	return refuse.InvalidArg("page_token %q is not one this server issued; pass next_page_token from the previous %s response unchanged, or leave it empty for the first page", refuse.Truncate(tok, 64), call)
}

// EncodeSession makes the token of a ListClients page asked of a cluster,
// whose sessions are in (server, session id) order: the page after the
// session id of server.
func EncodeSession(server string, id uint64) string {
	return Encode(strconv.FormatUint(id, 10) + "@" + server)
}

// Session reads a ListClients token of a cluster: the server and session
// id after which the page starts. A token of one server's (a decimal id
// alone) is after that id of self. "" is the first page: server "".
func Session(tok, self string) (server string, after uint64, err error) {
	if tok == "" {
		return "", 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", 0, refused(tok, "ListClients")
	}
	num, server, found := strings.Cut(string(b), "@")
	if !found {
		server = self
	}
	if after, err = strconv.ParseUint(num, 10, 64); err != nil || (found && server == "") {
		return "", 0, refused(tok, "ListClients")
	}
	return server, after, nil
}
