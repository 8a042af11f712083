package reboundbolt

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rebound-go/rebound/batch"
)

// formatVersion is the version of the layout below. A journal records the
// version that made it; Open refuses a newer one, since an older build
// would misread it, and reads every older one it knows.
//
// Format 1:
//
//	bucket "rebound-journal"  "format" → uvarint version
//	                          "digest" → Input.Digest
//	                          "total"  → uvarint number of items
//	bucket "items"     key(pos) → state byte, flags byte, custom_id
//	bucket "outcomes"  key(pos) → outcome (encodeOutcome)
//
// key(pos) is the item's input position as 4 big-endian bytes, so that a
// cursor walks the items in input order. An item has an entry in
// "outcomes", its last outcome, from its first recorded outcome on: always
// when its state is Succeeded, Failed or FailedPermanent (the entry's
// state is then the item's), and also while it is claimed again or given
// back, until a new outcome replaces the entry. The small "items" entries
// are what Prepare and Counts read, and the bodies stay out of their way.
//
// (Early builds deleted a failure's entry when the item was claimed again.
// Either build reads the other's files right, since an entry means the
// same in both, so the version stayed 1.)
const formatVersion = 1

var (
	metaBucket     = []byte("rebound-journal")
	itemsBucket    = []byte("items")
	outcomesBucket = []byte("outcomes")

	keyFormat = []byte("format")
	keyDigest = []byte("digest")
	keyTotal  = []byte("total")
)

// flagResent, in an item's flags, says that a claim of the item was never
// recorded: the run that made it stopped.
const flagResent = 1 << 0

// putKey appends pos's key to b.
func putKey(b []byte, pos uint32) []byte { return binary.BigEndian.AppendUint32(b, pos) }

func keyPos(k []byte) (uint32, bool) {
	if len(k) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(k), true
}

func appendItem(b []byte, s batch.State, flags uint8, id string) []byte {
	b = append(b, byte(s), flags)
	return append(b, id...)
}

// decodeItem reads an "items" value; id aliases v.
func decodeItem(v []byte) (batch.State, uint8, []byte, error) {
	if len(v) < 2 {
		return 0, 0, nil, fmt.Errorf("item record of %d bytes", len(v))
	}
	s := batch.State(v[0])
	if s > batch.FailedPermanent {
		return 0, 0, nil, fmt.Errorf("item in unknown state %d", v[0])
	}
	if v[1]&^flagResent != 0 {
		return 0, 0, nil, fmt.Errorf("item with unknown flags %#x", v[1])
	}
	return s, v[1], v[2:], nil
}

// appendOutcome appends o without its ID (the item's key says whose it is)
// and with the body last, unprefixed, so that a large body costs one copy.
func appendOutcome(b []byte, o *batch.Outcome) []byte {
	b = append(b, byte(o.State))
	b = binary.AppendVarint(b, int64(o.StatusCode))
	b = binary.AppendVarint(b, int64(o.Attempts))
	for _, s := range [...]string{o.RequestID, o.ErrorCode, o.ErrorMessage} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return append(b, o.Body...)
}

func outcomeSize(o *batch.Outcome) int {
	return 1 + 2*binary.MaxVarintLen64 + 3*binary.MaxVarintLen64 +
		len(o.RequestID) + len(o.ErrorCode) + len(o.ErrorMessage) + len(o.Body)
}

var errShort = errors.New("outcome record cut short")

// decodeOutcome reads an "outcomes" value into o, copying what it keeps:
// v lives only as long as its transaction.
func decodeOutcome(v []byte, o *batch.Outcome) error {
	if len(v) < 1 {
		return errShort
	}
	o.State = batch.State(v[0])
	if o.State < batch.Succeeded || o.State > batch.FailedPermanent {
		return fmt.Errorf("outcome in state %d", v[0])
	}
	v = v[1:]
	var ints [2]int64
	for i := range ints {
		n, w := binary.Varint(v)
		if w <= 0 {
			return errShort
		}
		ints[i], v = n, v[w:]
	}
	o.StatusCode, o.Attempts = int(ints[0]), int(ints[1])
	var strs [3]string
	for i := range strs {
		n, w := binary.Uvarint(v)
		if w <= 0 || n > uint64(len(v)-w) {
			return errShort
		}
		strs[i], v = string(v[w:w+int(n)]), v[w+int(n):]
	}
	o.RequestID, o.ErrorCode, o.ErrorMessage = strs[0], strs[1], strs[2]
	o.Body = nil
	if len(v) > 0 {
		o.Body = append([]byte(nil), v...)
	}
	return nil
}
