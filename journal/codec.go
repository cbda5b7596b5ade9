package journal

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// Keys and values of the event store.
//
// A key is the record's Seq as 8 big-endian bytes, so Pebble's byte order
// is Seq order. A value is one event.Record without its Seq:
//
//	[0]    format version (valueFormat)
//	[1]    Kind
//	uvarint presence flags (flagCause ... flagText)
//	varint At (zig-zag)
//	then, in flag order, only the fields whose flag is set:
//	  Cause byte; From byte, To byte; Inst varint; Peer varint; Req varint;
//	  Tokens varint; Want varint; Ref varint; Class uvarint length + bytes;
//	  Text uvarint length + bytes; Epoch uvarint; PrefixGroup varint,
//	  PrefixTokens varint.
//
// Epoch (flagEpoch) and the prefix pair (flagPrefix) came after the first
// journals: a record without them is encoded exactly as before, so
// simulator journals are unchanged, and a reader that predates them
// refuses a record that carries one (unknown flag) rather than misreading
// it.
//
// An absent field takes its zero value, except Inst and Peer, which take
// event.NoInstance. A request record at hours into a run takes 12 to 16
// bytes (an arrival, with its class, about 28).

// valueFormat is the version byte that leads every value. A reader refuses
// any other version rather than guessing at its layout.
const valueFormat = 1

const keyLen = 8

// Presence flags, in the order their fields follow.
const (
	flagCause = 1 << iota
	flagRoles
	flagInst
	flagPeer
	flagReq
	flagTokens
	flagWant
	flagRef
	flagClass
	flagText
	flagEpoch
	flagPrefix
	flagsKnown = 1<<iota - 1
)

func putKey(dst *[keyLen]byte, seq uint64) { binary.BigEndian.PutUint64(dst[:], seq) }

// appendValue appends r's encoding (without Seq) to dst.
func appendValue(dst []byte, r *event.Record) []byte {
	var flags uint64
	if r.Cause != event.CauseNone {
		flags |= flagCause
	}
	if r.From != event.RoleNone || r.To != event.RoleNone {
		flags |= flagRoles
	}
	if r.Inst != event.NoInstance {
		flags |= flagInst
	}
	if r.Peer != event.NoInstance {
		flags |= flagPeer
	}
	if r.Req != 0 {
		flags |= flagReq
	}
	if r.Tokens != 0 {
		flags |= flagTokens
	}
	if r.Want != 0 {
		flags |= flagWant
	}
	if r.Ref != 0 {
		flags |= flagRef
	}
	if r.Class != "" {
		flags |= flagClass
	}
	if r.Text != "" {
		flags |= flagText
	}
	if r.Epoch != 0 {
		flags |= flagEpoch
	}
	if r.PrefixGroup != 0 || r.PrefixTokens != 0 {
		flags |= flagPrefix
	}
	dst = append(dst, valueFormat, byte(r.Kind))
	dst = binary.AppendUvarint(dst, flags)
	dst = binary.AppendVarint(dst, int64(r.At))
	if flags&flagCause != 0 {
		dst = append(dst, byte(r.Cause))
	}
	if flags&flagRoles != 0 {
		dst = append(dst, byte(r.From), byte(r.To))
	}
	if flags&flagInst != 0 {
		dst = binary.AppendVarint(dst, int64(r.Inst))
	}
	if flags&flagPeer != 0 {
		dst = binary.AppendVarint(dst, int64(r.Peer))
	}
	if flags&flagReq != 0 {
		dst = binary.AppendVarint(dst, int64(r.Req))
	}
	if flags&flagTokens != 0 {
		dst = binary.AppendVarint(dst, r.Tokens)
	}
	if flags&flagWant != 0 {
		dst = binary.AppendVarint(dst, r.Want)
	}
	if flags&flagRef != 0 {
		dst = binary.AppendVarint(dst, int64(r.Ref))
	}
	if flags&flagClass != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(r.Class)))
		dst = append(dst, r.Class...)
	}
	if flags&flagText != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(r.Text)))
		dst = append(dst, r.Text...)
	}
	if flags&flagEpoch != 0 {
		dst = binary.AppendUvarint(dst, r.Epoch)
	}
	if flags&flagPrefix != 0 {
		dst = binary.AppendVarint(dst, r.PrefixGroup)
		dst = binary.AppendVarint(dst, r.PrefixTokens)
	}
	return dst
}

// decoder turns values back into records. It interns Class strings, which
// repeat on every arrival, so a large replay does not allocate one per
// request.
type decoder struct {
	classes map[string]string
}

// maxInterned bounds the class intern table; classes past it are simply
// allocated.
const maxInterned = 1024

// decodeErr names the key of a value that cannot be decoded.
type decodeErr struct {
	seq uint64
	msg string
}

func (e *decodeErr) Error() string {
	return fmt.Sprintf("record key %016x (seq %d): %s", e.seq, e.seq, e.msg)
}

// cursor reads a value front to back; the first failure sticks.
type cursor struct {
	b   []byte
	off int
	err string
}

func (c *cursor) fail(msg string) {
	if c.err == "" {
		c.err = msg
	}
}

func (c *cursor) byte1(field string) byte {
	if c.err != "" {
		return 0
	}
	if c.off >= len(c.b) {
		c.fail("truncated at " + field)
		return 0
	}
	v := c.b[c.off]
	c.off++
	return v
}

func (c *cursor) varint(field string) int64 {
	if c.err != "" {
		return 0
	}
	v, n := binary.Varint(c.b[c.off:])
	if n <= 0 {
		c.fail("bad varint at " + field)
		return 0
	}
	c.off += n
	return v
}

func (c *cursor) uvarint(field string) uint64 {
	if c.err != "" {
		return 0
	}
	v, n := binary.Uvarint(c.b[c.off:])
	if n <= 0 {
		c.fail("bad uvarint at " + field)
		return 0
	}
	c.off += n
	return v
}

func (c *cursor) bytes(field string) []byte {
	n := c.uvarint(field + " length")
	if c.err != "" {
		return nil
	}
	if n > uint64(len(c.b)-c.off) {
		c.fail(fmt.Sprintf("%s length %d exceeds the %d bytes left", field, n, len(c.b)-c.off))
		return nil
	}
	v := c.b[c.off : c.off+int(n)]
	c.off += int(n)
	return v
}

func (c *cursor) instance(field string) event.Instance {
	v := c.varint(field)
	if v < math.MinInt32 || v > math.MaxInt32 {
		c.fail(fmt.Sprintf("%s %d out of range", field, v))
		return event.NoInstance
	}
	return event.Instance(v)
}

// decode fills r from the value stored under seq. It never panics: any
// malformed value gives an error naming the key.
func (d *decoder) decode(seq uint64, v []byte, r *event.Record) error {
	*r = event.Record{Seq: seq, Inst: event.NoInstance, Peer: event.NoInstance}
	if len(v) == 0 {
		return &decodeErr{seq, "empty value"}
	}
	if v[0] != valueFormat {
		return &decodeErr{seq, fmt.Sprintf("value format %d: this reader knows format %d only", v[0], valueFormat)}
	}
	c := cursor{b: v, off: 1}
	r.Kind = event.Kind(c.byte1("kind"))
	flags := c.uvarint("flags")
	if c.err == "" && flags&^uint64(flagsKnown) != 0 {
		c.fail(fmt.Sprintf("unknown field flags %#x", flags&^uint64(flagsKnown)))
	}
	r.At = event.Time(c.varint("at"))
	if flags&flagCause != 0 {
		r.Cause = event.Cause(c.byte1("cause"))
	}
	if flags&flagRoles != 0 {
		r.From = event.Role(c.byte1("from"))
		r.To = event.Role(c.byte1("to"))
	}
	if flags&flagInst != 0 {
		r.Inst = c.instance("inst")
	}
	if flags&flagPeer != 0 {
		r.Peer = c.instance("peer")
	}
	if flags&flagReq != 0 {
		r.Req = event.RequestID(c.varint("req"))
	}
	if flags&flagTokens != 0 {
		r.Tokens = c.varint("tokens")
	}
	if flags&flagWant != 0 {
		r.Want = c.varint("want")
	}
	if flags&flagRef != 0 {
		r.Ref = event.Time(c.varint("ref"))
	}
	if flags&flagClass != 0 {
		if b := c.bytes("class"); c.err == "" {
			r.Class = d.class(b)
		}
	}
	if flags&flagText != 0 {
		if b := c.bytes("text"); c.err == "" {
			r.Text = string(b)
		}
	}
	if flags&flagEpoch != 0 {
		r.Epoch = c.uvarint("epoch")
	}
	if flags&flagPrefix != 0 {
		r.PrefixGroup = c.varint("prefix group")
		r.PrefixTokens = c.varint("prefix tokens")
	}
	if c.err == "" && c.off != len(v) {
		c.fail(fmt.Sprintf("%d trailing bytes", len(v)-c.off))
	}
	if c.err != "" {
		*r = event.Record{Seq: seq, Inst: event.NoInstance, Peer: event.NoInstance}
		return &decodeErr{seq, c.err}
	}
	return nil
}

func (d *decoder) class(b []byte) string {
	if s, ok := d.classes[string(b)]; ok {
		return s
	}
	s := string(b)
	if d.classes == nil {
		d.classes = make(map[string]string)
	}
	if len(d.classes) < maxInterned {
		d.classes[s] = s
	}
	return s
}
