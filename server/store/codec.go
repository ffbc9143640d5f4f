package store

import (
	"encoding/json"
	"fmt"

	"github.com/tollgate/tollgate/limiter"
)

// The codec of the records, for other stores of the same records (the
// etcd store of a cluster): a pool's record, and an active pool's
// instances, kept apart.

// EncodeRecord returns the stored bytes of sp's record (without its
// instances: EncodeResources).
func EncodeRecord(sp limiter.SavedPool) ([]byte, error) { return encode(sp) }

// DecodeRecord reads the record v stored under the pool name key.
func DecodeRecord(key, v []byte) (limiter.SavedPool, error) { return decode(key, v) }

// EncodeResources returns the stored bytes of an active pool's instances;
// nil for none.
func EncodeResources(rs []limiter.Resource) ([]byte, error) { return encodeResources(rs) }

// DecodeResources reads what EncodeResources wrote for the named pool.
func DecodeResources(name string, v []byte) ([]limiter.Resource, error) {
	var recs []resourceRecord
	if err := json.Unmarshal(v, &recs); err != nil {
		return nil, fmt.Errorf("the instances of pool %q are damaged (%v)", name, err)
	}
	rs := make([]limiter.Resource, len(recs))
	for i, r := range recs {
		rs[i] = limiter.Resource{ID: r.ID, Attributes: r.Attributes}
	}
	return rs, nil
}
