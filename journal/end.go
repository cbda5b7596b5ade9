package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// The end-of-run record.
//
// Close and ClosePartial store one last entry under endKey, a key outside
// the space of record keys (every record key is 8 bytes below 0xff00...;
// endKey starts with 0xff and has 4 bytes). Its value is End as JSON. A run
// without it never closed: its writer was killed, crashed or hit an error.
// A reader checks the record count, the last Seq and the checksum of every
// record against it when a Replay reaches the end of the store, so a
// missing, shortened, reordered or altered record is an error, never a
// smaller run.

// endKey is the key of the end-of-run record.
var endKey = []byte{0xff, 'e', 'n', 'd'}

// recordKeyLimit bounds record keys: a Seq must stay below it so its key
// sorts before endKey (Seqs are counters from 1; 2^56 is never reached).
const maxSeq = 1<<56 - 1

// crcTable is CRC-32C (Castagnoli), which amd64 and arm64 compute in
// hardware.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// sumRecord folds one stored record (its key and encoded value) into a
// running checksum.
func sumRecord(crc uint32, key []byte, value []byte) uint32 {
	crc = crc32.Update(crc, crcTable, key)
	var n [binary.MaxVarintLen64]byte
	crc = crc32.Update(crc, crcTable, n[:binary.PutUvarint(n[:], uint64(len(value)))])
	return crc32.Update(crc, crcTable, value)
}

// End is a run's end-of-run record, written by Writer.Close (a whole run)
// or Writer.ClosePartial (a run that stopped early).
type End struct {
	// Records counts the run's records, the run metadata (Seq 0) included.
	Records uint64 `json:"records"`
	// LastSeq is the highest Seq written.
	LastSeq uint64 `json:"last_seq"`
	// CRC32C is the CRC-32C of every record's key, value length and value,
	// in Seq order.
	CRC32C uint32 `json:"crc32c"`
	// Partial says why the run stopped early; "" for a whole run.
	Partial string `json:"partial,omitempty"`
}

func (e End) encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // plain data always encodes
	}
	return b
}

func decodeEnd(b []byte) (End, error) {
	var e End
	if err := json.Unmarshal(b, &e); err != nil {
		return End{}, fmt.Errorf("end-of-run record: %w", err)
	}
	if e.Records == 0 {
		return End{}, errors.New("end-of-run record: counts 0 records (the run metadata alone is one)")
	}
	return e, nil
}

// IncompleteError is returned when a run is not whole: it has no
// end-of-run record (its writer never closed: killed, crashed or failed),
// or its end-of-run record marks it partial (Writer.ClosePartial, as after
// an interrupt). Readers refuse such a run unless opened with
// OpenOptions.Partial.
type IncompleteError struct {
	Dir string
	// Missing says what is missing: "end-of-run record", or "the rest of
	// the run" for a run marked partial.
	Missing string
	// Reason is the partial marker's reason ("" without an end-of-run
	// record).
	Reason string
	// LastSeq is the last record Seq found in the store.
	LastSeq uint64
	// Run is set when the run was found in a Parquet export (Dir is then
	// the export's directory); LastSeq is then unknown.
	Run string
}

func (e *IncompleteError) Error() string {
	if e.Run != "" {
		return fmt.Sprintf("export %s: run %s: incomplete run, exported as partial (%s)", e.Dir, e.Run, e.Reason)
	}
	if e.Reason != "" {
		return fmt.Sprintf("journal %s: incomplete run: marked partial (%s): missing %s; last record read: seq %d", e.Dir, e.Reason, e.Missing, e.LastSeq)
	}
	return fmt.Sprintf("journal %s: incomplete run: no %s (its writer never closed: killed, crashed or failed); last record read: seq %d", e.Dir, e.Missing, e.LastSeq)
}

// CorruptError is returned when a run's stored records disagree with
// themselves or with its end-of-run record: files missing or damaged,
// records lost or altered.
type CorruptError struct {
	Dir string
	// What went wrong, e.g. "records: 140 read, end-of-run record says 142".
	What string
	// Read counts the records read before the damage was found; LastSeq
	// is the last one's Seq.
	Read    uint64
	LastSeq uint64
	Err     error // the underlying error, if any
}

func (e *CorruptError) Error() string {
	if e.Read == 0 {
		return fmt.Sprintf("journal %s: damaged: %s; no record read", e.Dir, e.What)
	}
	return fmt.Sprintf("journal %s: damaged: %s; last record read: seq %d", e.Dir, e.What, e.LastSeq)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// BadInput marks a damaged journal as bad input (exit code 2,
// internal/cliexit).
func (e *CorruptError) BadInput() {}

// BadInput marks a partial journal as bad input (exit code 2,
// internal/cliexit).
func (e *IncompleteError) BadInput() {}
