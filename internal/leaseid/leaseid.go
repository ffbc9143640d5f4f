// Package leaseid signs and checks the ids the server hands to holders:
// lease ids, rate share ids and expiry receipts. A lease is known to the
// engine by its pool and fencing token, but fencing tokens are
// sequential: if the token were the id, any client allowed on a pool could
// release or renew another's lease by counting. So the id a holder gets is
// "<fencing token>.<tag>", where the tag is an HMAC-SHA256 of the pool name
// and the token under a key only the server knows, cut to 96 bits. Release
// and Renew check the tag before the engine sees the call; the server keeps
// no per-lease secret, and with the key kept in the data directory, ids
// stay valid across restarts (so leases are re-adopted).
//
// Rate share ids are signed the same way, with a different kind byte in
// the MAC, so that no lease tag is a valid share tag.
//
// Operators' calls (RevokeLease, GetLease) are admin-only and take the
// bare fencing token as well; events, logs and the status page, which
// may be seen by more people than the holder, show only the token.
//
// It may import the engine (limiter), for its errors, and internal/refuse;
// nothing of the server.
package leaseid

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/refuse"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// leaseTagLen is the tag's length in bytes before base64 (96 bits).
const leaseTagLen = 12

// Hint tells people what a lease id looks like.
const Hint = "pass the id field of the lease that Acquire returned, unchanged (such as \"42.Hx3kq0Vb8mWzT1aL\")"

// IDs signs and checks holders' lease ids, share ids and expiry
// receipts with one key.
type IDs struct {
	macs sync.Pool // of *macer: HMAC-SHA256 under the key
}

// New returns lease ids signed with key; a nil key means a
// random one (a server without a data directory: its ids die with it,
// as its leases do).
func New(key []byte) *IDs {
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			panic("tollgate: no randomness for the lease id key: " + err.Error())
		}
	}
	key = append([]byte(nil), key...)
	ids := &IDs{}
	ids.macs.New = func() any { return &macer{h: hmac.New(sha256.New, key)} }
	return ids
}

// Kinds of signed ids, so that a lease's tag is never a share's.
const (
	kindLease  byte = 'L'
	kindShare  byte = 'S'
	kindExpiry byte = 'E' // the receipts of earlier servers: expiry only
	// kindReceipt signs a receipt: expiry, weight and instances.
	kindReceipt byte = 'R'
)

// maxIDLen bounds an id or receipt this package builds: a 64-bit number in
// decimal with its sign, the dot and the tag.
const maxIDLen = 20 + 1 + tagLen

// tagLen is the tag's length in base64.
const tagLen = 16 // base64.RawURLEncoding.EncodedLen(leaseTagLen)

// signed returns "<num>.<tag>", num being a number in decimal (in a
// buffer of maxIDLen bytes) and the tag of kind over pool, n and x: one
// allocation, the string returned.
func (ids *IDs) signed(num []byte, kind byte, pool string, n uint64, x int64) string {
	return string(ids.appendMAC(append(num, '.'), kind, pool, n, x))
}

// matches reports whether tag is the tag of kind over pool, n and x.
func (ids *IDs) matches(tag string, kind byte, pool string, n uint64, x int64) bool {
	var buf [tagLen]byte
	return hmac.Equal([]byte(tag), ids.appendMAC(buf[:0], kind, pool, n, x))
}

// appendMAC appends the tag of kind over pool, n and x to dst.
func (ids *IDs) appendMAC(dst []byte, kind byte, pool string, n uint64, x int64) []byte {
	m := ids.macs.Get().(*macer)
	defer ids.macs.Put(m)
	m.in = append(m.in[:0], kind)
	m.in = binary.BigEndian.AppendUint64(m.in, n)
	if kind == kindExpiry {
		m.in = binary.BigEndian.AppendUint64(m.in, uint64(x))
	}
	m.in = append(m.in, pool...)
	m.h.Reset()
	m.h.Write(m.in)
	return base64.RawURLEncoding.AppendEncode(dst, m.h.Sum(m.sum[:0])[:leaseTagLen])
}

// macer is an HMAC with buffers of its own, kept in a pool, so that a tag
// costs no allocation.
type macer struct {
	h   hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// Format returns the id a holder gets for lease token of pool.
func (ids *IDs) Format(pool string, token uint64) string {
	var buf [maxIDLen]byte
	return ids.signed(strconv.AppendUint(buf[:0], token, 10), kindLease, pool, token, 0)
}

// Parse checks a holder's lease id for pool and returns its fencing
// token. A malformed id is INVALID_ARGUMENT; a fencing token without its
// tag, or with a wrong one, is NOT_FOUND (LEASE_NOT_FOUND), as for a
// lease that does not exist, so that guessing learns nothing.
func (ids *IDs) Parse(pool, id string) (uint64, error) {
	tok, tag, err := split(id)
	if err != nil {
		return 0, err
	}
	if tag == "" {
		return 0, &apierr.Error{Code: apierr.CodeNotFound, Reason: apierr.ReasonLeaseNotFound,
			Message: "lease_id " + strconv.Quote(refuse.Truncate(id, 64)) + " lacks the tag after the fencing token that identifies its holder; " + Hint}
	}
	if !ids.matches(tag, kindLease, pool, tok, 0) {
		return 0, notIssued(pool, tok)
	}
	return tok, nil
}

// ParseAdmin returns the fencing token of an id an operator gave:
// a holder's id (its tag is not checked: operators may act on any lease)
// or the bare fencing token.
func ParseAdmin(id string) (uint64, error) {
	tok, _, err := split(id)
	return tok, err
}

// split splits "<token>[.<tag>]".
func split(id string) (uint64, string, error) {
	if id == "" {
		return 0, "", refuse.InvalidArg("lease_id is required; %s", Hint)
	}
	num, tag, _ := strings.Cut(id, ".")
	tok, err := strconv.ParseUint(num, 10, 64)
	if err != nil || len(tag) > 64 {
		return 0, "", refuse.InvalidArg("lease_id %q is not a lease id; %s", refuse.Truncate(id, 64), Hint)
	}
	return tok, tag, nil
}

// shareHint tells people what a share id looks like.
const shareHint = "pass the id field of the share that AcquireShare returned, unchanged (such as \"7.Hx3kq0Vb8mWzT1aL\")"

// FormatShare returns the id a holder gets for rate share id of pool:
// signed like a lease id, so that only its holder can refresh or release
// it.
func (ids *IDs) FormatShare(pool string, id uint64) string {
	var buf [maxIDLen]byte
	return ids.signed(strconv.AppendUint(buf[:0], id, 10), kindShare, pool, id, 0)
}

// ParseShare checks a holder's share id for pool and returns the
// engine's share id. A malformed id is INVALID_ARGUMENT; a missing or
// wrong tag is NOT_FOUND (SHARE_NOT_FOUND), as for a share that does not
// exist.
func (ids *IDs) ParseShare(pool, id string) (uint64, error) {
	if id == "" {
		return 0, refuse.InvalidArg("share_id is required; %s", shareHint)
	}
	num, tag, _ := strings.Cut(id, ".")
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || len(tag) > 64 {
		return 0, refuse.InvalidArg("share_id %q is not a share id; %s", refuse.Truncate(id, 64), shareHint)
	}
	if tag == "" || !ids.matches(tag, kindShare, pool, n, 0) {
		return 0, &apierr.Error{Code: apierr.CodeNotFound, Reason: apierr.ReasonShareNotFound,
			Message: "no rate share of pool " + strconv.Quote(pool) + " has the id " + strconv.Quote(refuse.Truncate(id, 64)) + "; " + shareHint}
	}
	return n, nil
}

// Receipt returns the expiry receipt of lease token of pool, granted until
// expiry with weight on the instances ids (none in a free pool):
// "<expiry in Unix ns>.<weight>.<tag>", the tag signing pool, token,
// expiry, weight and the set of ids. A restarted server re-adopts a lease
// only on a receipt whose expiry is still ahead, for exactly the weight
// and instances it signs (docs/recovery.md).
func (ids *IDs) Receipt(pool string, token uint64, expiry time.Time, weight int64, resources []string) string {
	ns := expiry.UnixNano()
	var buf [maxReceiptLen]byte
	b := strconv.AppendInt(buf[:0], ns, 10)
	b = strconv.AppendInt(append(b, '.'), weight, 10)
	return string(ids.appendReceiptMAC(append(b, '.'), pool, token, ns, weight, resources))
}

// maxReceiptLen bounds a receipt: two 64-bit numbers in decimal with
// their signs, two dots and the tag.
const maxReceiptLen = 20 + 1 + 20 + 1 + tagLen

// appendReceiptMAC appends the tag of a receipt (kindReceipt) to dst: over
// token, expiry ns, weight, the ids in sorted order, each with its length,
// and pool.
func (ids *IDs) appendReceiptMAC(dst []byte, pool string, token uint64, ns, weight int64, resources []string) []byte {
	m := ids.macs.Get().(*macer)
	defer ids.macs.Put(m)
	m.in = append(m.in[:0], kindReceipt)
	m.in = binary.BigEndian.AppendUint64(m.in, token)
	m.in = binary.BigEndian.AppendUint64(m.in, uint64(ns))
	m.in = binary.BigEndian.AppendUint64(m.in, uint64(weight))
	m.in = binary.BigEndian.AppendUint32(m.in, uint32(len(resources)))
	if len(resources) > 1 && !slices.IsSorted(resources) {
		resources = slices.Sorted(slices.Values(resources))
	}
	for _, id := range resources {
		m.in = binary.BigEndian.AppendUint32(m.in, uint32(len(id)))
		m.in = append(m.in, id...)
	}
	m.in = append(m.in, pool...)
	m.h.Reset()
	m.h.Write(m.in)
	return base64.RawURLEncoding.AppendEncode(dst, m.h.Sum(m.sum[:0])[:leaseTagLen])
}

// ParseReceipt returns what an expiry receipt of lease token of pool
// vouches for, given the instances the renew names: its expiry and
// weight, or (Readopt.ReceiptProblem) why it vouches for nothing. An empty
// receipt vouches for nothing and has no problem (such a lease is not
// re-adopted, as the engine says); INVALID_ARGUMENT for one that is not a
// receipt.
func (ids *IDs) ParseReceipt(pool string, token uint64, r string, resources []string) (limiter.Receipt, error) {
	if r == "" {
		return limiter.Receipt{}, nil
	}
	bad := func() (limiter.Receipt, error) {
		return limiter.Receipt{}, refuse.InvalidArg("expiry_receipt %q is not an expiry receipt; pass the expiry_receipt field of the lease's last Acquire, Renew or ResizeLease answer, unchanged", refuse.Truncate(r, 64))
	}
	num, rest, _ := strings.Cut(r, ".")
	ns, err := strconv.ParseInt(num, 10, 64)
	if err != nil || len(rest) > 100 {
		return bad()
	}
	w, tag, signsWeight := strings.Cut(rest, ".")
	if !signsWeight { // "<ns>.<tag>": a receipt of a server before receipts signed the weight
		if ids.matches(rest, kindExpiry, pool, token, ns) {
			return limiter.Receipt{Problem: "its expiry receipt was signed by an earlier version of the server, which did not sign the lease's weight and instances"}, nil
		}
		return limiter.Receipt{Problem: "its expiry receipt was not signed by this server for this lease"}, nil
	}
	weight, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		return bad()
	}
	var buf [tagLen]byte
	if !hmac.Equal([]byte(tag), ids.appendReceiptMAC(buf[:0], pool, token, ns, weight, resources)) {
		what := "this lease"
		if len(resources) > 0 {
			what = "this lease on the instances the renew names (resource_ids must be exactly the lease's instances)"
		}
		return limiter.Receipt{Problem: "its expiry receipt was not signed by this server for " + what}, nil
	}
	return limiter.Receipt{Expiry: time.Unix(0, ns), Weight: weight}, nil
}

// notIssued is the error of a lease id whose tag is not the server's:
// the same NOT_FOUND as for a lease that does not exist.
func notIssued(pool string, token uint64) error {
	return &apierr.Error{Code: apierr.CodeNotFound, Reason: apierr.ReasonLeaseNotFound,
		Message: "no lease of pool " + strconv.Quote(pool) + " has this id (token " + strconv.FormatUint(token, 10) + "): the id was changed, or it is from another pool or server; " + Hint}
}
