package leaseid

import (
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
		{0, "0.gH-AfIM_njCB2hEi", "0.kQI1lyauvqZ8ovHT", "1700000000123456789.gr1eHTrLgu26FKmu"},
		{7, "7.mL74cjVzG_USEzDT", "7.4vXb-9mlikjDRG7Y", "1700000000123456789.y5DofOfgP43BOH7Y"},
		{42, "42.tpimvrbH74MwdhQ4", "42.ENvGM5p23vjCucbv", "1700000000123456789.WTu1Wxvf4anpl60i"},
		{100, "100.CrzXMZh_IdLTm5X4", "100.q7NxQFuLekNVkSMD", "1700000000123456789.F9icbJ9uuLOxzpSf"},
		{18446744073709551615, "18446744073709551615.fUDHqpvy-2sUISsK", "18446744073709551615.K6j86AqVhsPKykAp", "1700000000123456789.i_CiM7QS_xgsnBiO"},
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
		if got := ids.Receipt("db", c.tok, at); got != c.receipt {
			t.Errorf("Receipt(db, %d) = %q, want %q", c.tok, got, c.receipt)
		}
		if got, err := ids.ParseReceipt("db", c.tok, c.receipt); err != nil || !got.Equal(at) {
			t.Errorf("ParseReceipt(db, %d, %q) = %v, %v; want %v", c.tok, c.receipt, got, err, at)
		}
	}
	if got, want := ids.Receipt("db", 3, time.Unix(-5, 0)), "-5000000000.a9H2u_tv2L0U1zhY"; got != want {
		t.Errorf("Receipt before 1970 = %q, want %q", got, want)
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
		_ = ids.Receipt("db", 1000+i, at)
	}
}
