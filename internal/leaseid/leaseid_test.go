package leaseid

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSignedBytesStay pins the ids, share ids and receipts one key signs,
// so that a change to how they are built cannot change them: ids already
// handed out (and kept across restarts) must still verify.
func TestSignedBytesStay(t *testing.T) {
	ids := New(fuzzIDKey)
	at := time.Unix(1700000000, 123456789)
	for _, c := range []struct {
		tok                   uint64
		lease, share, receipt string
	}{
		{0, "0.gH-AfIM_njCB2hEi", "0.kQI1lyauvqZ8ovHT", "1700000000123456789.3.qobEDJ76dceLWq93"},
		{7, "7.mL74cjVzG_USEzDT", "7.4vXb-9mlikjDRG7Y", "1700000000123456789.3.14K8c2LnpgBCcJvY"},
		{42, "42.tpimvrbH74MwdhQ4", "42.ENvGM5p23vjCucbv", "1700000000123456789.3.I792M73q-rK1LpLe"},
		{100, "100.CrzXMZh_IdLTm5X4", "100.q7NxQFuLekNVkSMD", "1700000000123456789.3.ADtWeLGxTjGuVb26"},
		{18446744073709551615, "18446744073709551615.fUDHqpvy-2sUISsK", "18446744073709551615.K6j86AqVhsPKykAp", "1700000000123456789.3.e8XOTewpjws7gIXI"},
	} {
		if got := ids.Format("db", c.tok); got != c.lease {
			t.Errorf("Format(db, %d) = %q, want %q", c.tok, got, c.lease)
		}
		if got, err := ids.Parse("db", c.lease); err != nil || got != c.tok {
			t.Errorf("Parse(db, %q) = %d, %v; want %d", c.lease, got, err, c.tok)
		}
		if got := ids.FormatShare("api/x", c.tok); got != c.share {
			t.Errorf("FormatShare(api/x, %d) = %q, want %q", c.tok, got, c.share)
		}
		if got := ids.Receipt("db", c.tok, at, 3, nil); got != c.receipt {
			t.Errorf("Receipt(db, %d) = %q, want %q", c.tok, got, c.receipt)
		}
		if got, err := ids.ParseReceipt("db", c.tok, c.receipt, nil); err != nil || !got.Expiry.Equal(at) || got.Weight != 3 || got.Problem != "" {
			t.Errorf("ParseReceipt(db, %d, %q) = %+v, %v; want %v, weight 3", c.tok, c.receipt, got, err, at)
		}
	}
	if got, want := ids.Receipt("db", 3, time.Unix(-5, 0), 1, []string{"b", "a"}), "-5000000000.1.aTFN55ADmzL4VETR"; got != want {
		t.Errorf("Receipt before 1970 = %q, want %q", got, want)
	}
}

// TestReceiptSignsWeightAndInstances checks that a receipt vouches only
// for the weight and the instance set it was signed for, and that a
// receipt of an earlier server (expiry only) vouches for nothing, with a
// problem that says so.
func TestReceiptSignsWeightAndInstances(t *testing.T) {
	ids := New(fuzzIDKey)
	at := time.Unix(1700000000, 0)
	r := ids.Receipt("db", 7, at, 2, []string{"c2", "c1"})
	if got, err := ids.ParseReceipt("db", 7, r, []string{"c1", "c2"}); err != nil || got.Weight != 2 || !got.Expiry.Equal(at) {
		t.Fatalf("the same instances in another order: %+v, %v", got, err)
	}
	forged := strings.Replace(r, ".2.", ".5.", 1)
	for name, c := range map[string]struct {
		receipt string
		ids     []string
	}{
		"weight":         {forged, []string{"c1", "c2"}},
		"instances":      {r, []string{"c1", "c3"}},
		"fewer":          {r, []string{"c1"}},
		"token":          {ids.Receipt("db", 8, at, 2, []string{"c1", "c2"}), []string{"c1", "c2"}},
		"earlier server": {ids.signed(strconv.AppendInt(nil, at.UnixNano(), 10), kindExpiry, "db", 7, at.UnixNano()), []string{"c1", "c2"}},
	} {
		got, err := ids.ParseReceipt("db", 7, c.receipt, c.ids)
		if err != nil || !got.Expiry.IsZero() || got.Problem == "" {
			t.Errorf("%s: ParseReceipt = %+v, %v; want no expiry and a problem", name, got, err)
		}
		if name == "earlier server" && !strings.Contains(got.Problem, "earlier version") {
			t.Errorf("%s: problem %q does not say so", name, got.Problem)
		}
	}
	if _, err := ids.ParseReceipt("db", 7, "x.1.y", nil); err == nil {
		t.Error("a malformed receipt was accepted")
	}
}

// tag returns the tag of lease token in pool.
func (ids *IDs) tag(pool string, token uint64) string {
	var buf [tagLen]byte
	return string(ids.appendMAC(buf[:0], kindLease, pool, token, 0))
}

// BenchmarkFormat measures what a grant's id and receipt cost.
func BenchmarkFormat(b *testing.B) {
	ids := New(fuzzIDKey)
	at := time.Unix(1700000000, 123456789)
	b.ReportAllocs()
	for i := range uint64(b.N) {
		id := ids.Format("db", 1000+i)
		if _, err := ids.Parse("db", id); err != nil {
			b.Fatal(err)
		}
		_ = ids.Receipt("db", 1000+i, at, 1, nil)
	}
}
