package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/limiter/fakeclock"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// FuzzRestoreDamagedRecord stores the input as pool "p"'s record (and
// instances, when given) in a real store, then loads it and restores it
// into an engine as a server's start does. Its seeds are records this
// store wrote, which the fuzzer damages. Loading must fail with an error
// that says the store is damaged, or restoring must fail with
// INVALID_ARGUMENT, or the pool must be restored and grant fencing tokens
// above its stored ceiling; never a panic.
func FuzzRestoreDamagedRecord(f *testing.F) {
	s, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	s.db.NoSync = true // a fuzz input's writes need not survive a crash
	if _, _, err := s.LoadOrSeed(nil); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rec, instances []byte) {
		if len(rec) == 0 {
			return // bbolt stores no empty value differently from a missing one
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			if err := tx.Bucket(poolsBucket).Put([]byte("p"), rec); err != nil {
				return err
			}
			if len(instances) == 0 {
				return tx.Bucket(resBucket).Delete([]byte("p"))
			}
			return tx.Bucket(resBucket).Put([]byte("p"), instances)
		})
		if err != nil {
			t.Fatal(err)
		}
		pools, _, err := s.LoadOrSeed(nil)
		if err != nil {
			if !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("loading a damaged record: %v; the error does not say the store is damaged", err)
			}
			return
		}
		if len(pools) != 1 || pools[0].Config.Name != "p" {
			t.Fatalf("loaded %v, want the one pool p", pools)
		}
		fc := fakeclock.New(t0)
		e := limiter.New(limiter.Options{Clock: fc})
		defer e.Close()
		if _, err := e.RestorePool(pools[0]); err != nil {
			var le *apierr.Error
			if !errors.As(err, &le) || le.Code != apierr.CodeInvalidArgument {
				t.Fatalf("RestorePool of a damaged record: %v, want INVALID_ARGUMENT", err)
			}
			return
		}
		l, err := e.Acquire(context.Background(), limiter.AcquireRequest{Pool: "p", NoWait: true})
		var le *apierr.Error
		switch {
		case err == nil && l.FencingToken <= pools[0].State.TokenCeiling:
			t.Fatalf("restored pool granted fencing token %d, not above the stored ceiling %d", l.FencingToken, pools[0].State.TokenCeiling)
		case err != nil && !errors.As(err, &le):
			t.Fatalf("acquire on the restored pool: %v, not an engine error", err)
		}
	})
}
