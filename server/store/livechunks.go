package store

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate/tollgate/limiter"
	storev1 "github.com/tollgate/tollgate/proto/tollgate/store/v1"
)

// A pool's live set (limiter.LiveChunk) is stored apart from its record,
// one value per chunk, so that a write carries only the chunks that
// changed: in bucket "live", a bucket per pool, under the chunk's index
// (8 bytes, big-endian).

// EncodeLiveChunk returns the stored bytes of chunk c (not Delete): a
// storev1.LiveChunk, its tokens as offsets or as a bitmap, whichever is
// shorter.
func EncodeLiveChunk(c limiter.LiveChunk) ([]byte, error) {
	r := &storev1.LiveChunk{}
	n := 0
	for _, w := range c.Bits {
		n += bits.OnesCount64(w)
	}
	var bitmap [len(limiter.LiveBits{}) * 8]byte
	for i, w := range c.Bits {
		binary.LittleEndian.PutUint64(bitmap[i*8:], w)
	}
	end := len(bitmap)
	for end > 0 && bitmap[end-1] == 0 {
		end--
	}
	if 2*n < end { // an offset takes at most two bytes
		r.Offsets = make([]uint32, 0, n)
		for i, w := range c.Bits {
			for w != 0 {
				b := bits.TrailingZeros64(w)
				r.Offsets = append(r.Offsets, uint32(i*64+b))
				w &^= 1 << b
			}
		}
	} else {
		r.Bits = bitmap[:end]
	}
	for _, rz := range c.Resized {
		r.Resized = append(r.Resized, &storev1.ResizedLease{Token: rz.Token, Weight: rz.Weight})
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(r)
}

// DecodeLiveChunk reads what EncodeLiveChunk wrote for chunk index of the
// named pool.
func DecodeLiveChunk(name string, index uint64, v []byte) (limiter.LiveChunk, error) {
	var r storev1.LiveChunk
	bad := func(err error) (limiter.LiveChunk, error) {
		return limiter.LiveChunk{}, fmt.Errorf("live chunk %d of pool %q is damaged (%v); restore the data directory from a backup", index, name, err)
	}
	if err := proto.Unmarshal(v, &r); err != nil {
		return bad(err)
	}
	c := limiter.LiveChunk{Index: index}
	if len(r.GetBits()) > len(c.Bits)*8 {
		return bad(fmt.Errorf("%d bytes of bits", len(r.GetBits())))
	}
	var bitmap [len(limiter.LiveBits{}) * 8]byte
	copy(bitmap[:], r.GetBits())
	for i := range c.Bits {
		c.Bits[i] = binary.LittleEndian.Uint64(bitmap[i*8:])
	}
	for _, o := range r.GetOffsets() {
		if o >= limiter.LiveChunkTokens {
			return bad(fmt.Errorf("offset %d", o))
		}
		c.Bits[o/64] |= 1 << (o % 64)
	}
	for _, rz := range r.GetResized() {
		c.Resized = append(c.Resized, limiter.ResizedLease{Token: rz.GetToken(), Weight: rz.GetWeight()})
	}
	return c, nil
}

// chunkKey is chunk index's key in its pool's bucket.
func chunkKey(index uint64) []byte { return binary.BigEndian.AppendUint64(nil, index) }

// putLiveChunks applies the chunk changes of pool name in tx.
func putLiveChunks(tx *bolt.Tx, name string, chunks []limiter.LiveChunk) error {
	if len(chunks) == 0 {
		return nil
	}
	b, err := tx.Bucket(liveBucket).CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return err
	}
	for _, c := range chunks {
		if c.Delete {
			if err := b.Delete(chunkKey(c.Index)); err != nil {
				return err
			}
			continue
		}
		v, err := EncodeLiveChunk(c)
		if err != nil {
			return err
		}
		if err := b.Put(chunkKey(c.Index), v); err != nil {
			return err
		}
	}
	return nil
}

// loadLiveChunks returns the chunks stored for the named pool.
func loadLiveChunks(tx *bolt.Tx, name string) ([]limiter.LiveChunk, error) {
	b := tx.Bucket(liveBucket).Bucket([]byte(name))
	if b == nil {
		return nil, nil
	}
	var out []limiter.LiveChunk
	err := b.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("live chunk key %x of pool %q is damaged; restore the data directory from a backup", k, name)
		}
		c, err := DecodeLiveChunk(name, binary.BigEndian.Uint64(k), v)
		out = append(out, c)
		return err
	})
	return out, err
}
