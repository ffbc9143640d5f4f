package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/limiter"
	storev1 "github.com/tollgate/tollgate/proto/tollgate/store/v1"
)

// fixturePool is the pool testdata/record_v1.json records, as a server of
// format 1 wrote it (with its instances in the record, as before they were
// kept apart).
func fixturePool() limiter.SavedPool {
	ct := time.Date(2026, 11, 1, 9, 30, 0, 123456789, time.UTC)
	return limiter.SavedPool{Config: limiter.PoolConfig{Name: "orders-db", Description: "primary database", ConcurrencyLimit: 20, Rate: 100.5, Burst: 200,
		DefaultLeaseTTL: 15 * time.Second, MaxLeaseTTL: 5 * time.Minute, MaxWaiters: 64, SafeRate: 5,
		Adaptive: limiter.AdaptiveConfig{Enabled: true, Target: limiter.AdaptConcurrency, Window: 10 * time.Second, ErrorThreshold: 0.1, MinSamples: 20,
			Backoff: 0.8, Increase: 0.05, Interval: 2 * time.Second, Cooldown: 2 * time.Second, MinConcurrency: 1, MinRate: 1.005, LatencyTolerance: 3},
		RevocationPolicy: limiter.RevocationRevoke, ResourceKind: limiter.ResourceActive, Selection: limiter.SelectSpread,
		OverloadMark: 40, NearFullMark: limiter.MarkOff, LowUtilisationMark: 0.2, LowUtilisationPeriod: 30 * time.Minute},
		CreateTime: ct, UpdateTime: ct.Add(time.Hour), Suspended: true,
		State: limiter.DurableState{TokenCeiling: 4096, LeaseHorizon: ct.Add(2 * time.Hour), TTLBound: 5 * time.Minute, ShareHorizon: ct.Add(3 * time.Hour),
			ShareTTLBound: time.Minute, EffectiveConcurrency: 12, EffectiveRate: 50.25, HeldBound: -1},
		Resources: []limiter.Resource{{ID: "conn-1", Attributes: map[string]string{"addr": "db-1:5432"}}},
	}
}

// TestOpenFormat1: a data directory of format 1, whose records are JSON,
// opens and loads every field of them; the pool is then rewritten as a
// version 2 record that reads back the same.
func TestOpenFormat1(t *testing.T) {
	dir := t.TempDir()
	rec, err := os.ReadFile(filepath.Join("testdata", "record_v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		pools, err := tx.CreateBucket(poolsBucket)
		if err != nil {
			return err
		}
		if err := meta.Put(formatKey, []byte("1")); err != nil {
			return err
		}
		if err := meta.Put(initializedKey, []byte("2026-11-01T09:30:00Z")); err != nil {
			return err
		}
		return pools.Put([]byte("orders-db"), rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := mustOpen(t, dir)
	want := fixturePool()
	if got := load(t, s)["orders-db"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("format 1 record:\n got %+v\nwant %+v", got, want)
	}
	if err := s.SavePool(want); err != nil {
		t.Fatal(err)
	}
	var v []byte
	err = s.db.View(func(tx *bolt.Tx) error {
		v = append(v, tx.Bucket(poolsBucket).Get([]byte("orders-db"))...)
		if f := string(tx.Bucket(metaBucket).Get(formatKey)); f != formatVersion {
			t.Errorf("format after open = %q, want %s", f, formatVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var r storev1.PoolRecord
	if err := proto.Unmarshal(v, &r); err != nil || r.GetVersion() != recordVersion || r.GetPool().GetName() != "orders-db" {
		t.Fatalf("rewritten record: %v, %v", &r, err)
	}
	if got := load(t, s)["orders-db"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("version 2 record:\n got %+v\nwant %+v", got, want)
	}
}

// TestRecordVersions: a record of an unknown version, or without a pool,
// is refused with a message that says what to do.
func TestRecordVersions(t *testing.T) {
	v, err := encode(fixturePool())
	if err != nil {
		t.Fatal(err)
	}
	var r storev1.PoolRecord
	if err := proto.Unmarshal(v, &r); err != nil {
		t.Fatal(err)
	}
	r.Version = recordVersion + 1
	newer, _ := proto.Marshal(&r)
	if _, err := decode([]byte("orders-db"), newer); err == nil || !strings.Contains(err.Error(), "version 4") {
		t.Fatalf("version 4: %v", err)
	}
	r.Version, r.Pool = recordVersion, nil
	empty, _ := proto.Marshal(&r)
	if _, err := decode([]byte("orders-db"), empty); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("no pool: %v", err)
	}
	if _, err := decode([]byte("other"), v); err == nil || !strings.Contains(err.Error(), "names pool") {
		t.Fatalf("record under another name: %v", err)
	}
}

// TestEveryStateFieldIsStored: a durable state with every field set comes
// back from a record the same. It fails when a field is added to
// limiter.DurableState without a line in stateFields.
func TestEveryStateFieldIsStored(t *testing.T) {
	sp := fixturePool()
	sp.Resources = nil
	st := reflect.ValueOf(&sp.State).Elem()
	for i := 0; i < st.NumField(); i++ {
		switch f := st.Field(i); {
		case f.Type() == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(t0.Add(time.Duration(i) * time.Hour)))
		case f.CanInt():
			f.SetInt(int64(i + 1))
		case f.CanUint():
			f.SetUint(uint64(i + 1))
		case f.CanFloat():
			f.SetFloat(float64(i) + 0.5)
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.Type() == reflect.TypeOf([]limiter.EndedLease{}): // LegacyEnded: read from version 2 only, never written
		case f.Type() == reflect.TypeOf([]limiter.TokenRange{}):
			f.Set(reflect.ValueOf([]limiter.TokenRange{{First: 3, Last: 9}, {First: 20, Last: 20}}))
		default:
			t.Fatalf("DurableState.%s: teach this test its type", st.Type().Field(i).Name)
		}
	}
	v, err := encode(sp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode([]byte(sp.Config.Name), v)
	if err != nil || !reflect.DeepEqual(got, sp) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, sp)
	}
}

// The held-weight bound round-trips, 0 included; unknown (negative) is
// stored unset and read back unknown.
func TestHeldBoundRoundTrip(t *testing.T) {
	for _, b := range []int64{-1, 0, 7} {
		sp := fixturePool()
		sp.Resources = nil
		sp.State.HeldBound = b
		v, err := encode(sp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode([]byte(sp.Config.Name), v)
		if err != nil {
			t.Fatal(err)
		}
		if got.State.HeldBound != b {
			t.Fatalf("held bound %d read back as %d", b, got.State.HeldBound)
		}
	}
}

// A record of version 2 (ended leases and a readopt floor, no live set)
// opens: its floor is the live mark, its ended leases LegacyEnded.
func TestReadsVersion2Record(t *testing.T) {
	sp := fixturePool()
	sp.Resources = nil
	v, err := encode(sp)
	if err != nil {
		t.Fatal(err)
	}
	var r storev1.PoolRecord
	if err := proto.Unmarshal(v, &r); err != nil {
		t.Fatal(err)
	}
	r.Version = 2
	r.State.LiveMark = 0
	r.State.ReadoptFloor = 41
	r.State.Ended = []*storev1.EndedLease{{Token: 45, Expiry: timestamppb.New(t0.Add(time.Minute)), Revoked: true}}
	old, err := proto.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode([]byte(sp.Config.Name), old)
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.EndedLease{{Token: 45, Expiry: t0.Add(time.Minute), Revoked: true}}
	if got.State.LiveMark != 41 || !reflect.DeepEqual(got.State.LegacyEnded, want) {
		t.Fatalf("version 2: mark %d, ended %+v; want 41, %+v", got.State.LiveMark, got.State.LegacyEnded, want)
	}
}

// Live chunks round-trip, sparse (offsets) and dense (a bitmap), with
// their resized leases.
func TestLiveChunkRoundTrip(t *testing.T) {
	sparse := limiter.LiveChunk{Index: 3, Resized: []limiter.ResizedLease{{Token: 3*limiter.LiveChunkTokens + 5, Weight: 2}}}
	sparse.Bits[0] = 1 << 5
	sparse.Bits[63] = 1 << 63
	dense := limiter.LiveChunk{Index: 9}
	for i := range 40 {
		dense.Bits[i] = ^uint64(0)
	}
	for _, c := range []limiter.LiveChunk{sparse, dense} {
		v, err := EncodeLiveChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) > 330 {
			t.Errorf("chunk %d stored in %d bytes", c.Index, len(v))
		}
		got, err := DecodeLiveChunk("db", c.Index, v)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of chunk %d: %v\n got %+v\nwant %+v", c.Index, err, got, c)
		}
	}
	if _, err := DecodeLiveChunk("db", 1, []byte{0x12, 0x01, 0xff}); err == nil {
		t.Fatal("a damaged chunk was read")
	}
}
