package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// SyncPolicy says when the writer forces records to stable storage.
type SyncPolicy uint8

const (
	// SyncEveryBatch fsyncs every batch commit: once an automatic batch
	// commit or Flush has returned, its records survive a process kill and
	// a power loss. Each commit costs one fsync (a few milliseconds on a
	// disk, far less on NVMe), amortised over Options.BatchRecords records.
	SyncEveryBatch SyncPolicy = iota
	// SyncOnClose commits automatic batches without fsync and syncs only at
	// Flush and Close. Appending is faster, but only records covered by a
	// Flush or Close that returned are acknowledged: Pebble may still hold a
	// no-sync commit in its own memory, so even a killed process (not only
	// a power loss) can lose records committed since the last Flush.
	SyncOnClose
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncEveryBatch:
		return "every-batch"
	case SyncOnClose:
		return "on-close"
	}
	return fmt.Sprintf("sync(%d)", uint8(p))
}

// DefaultBatchRecords is the batch size used when Options.BatchRecords is 0.
const DefaultBatchRecords = 4096

// Options tune a Writer. The zero value is SyncEveryBatch with batches of
// DefaultBatchRecords.
type Options struct {
	Sync         SyncPolicy
	BatchRecords int // records per batch; 0 means DefaultBatchRecords
}

// Writer appends one run's records to its journal. It implements
// event.Recorder. Its methods are safe for concurrent use, though records
// are expected from one goroutine in the order they happen.
type Writer struct {
	mu       sync.Mutex
	dir      string
	db       *pebble.DB
	batch    *pebble.Batch
	opts     Options
	n        int    // records in batch
	last     uint64 // highest Seq buffered (0 is the metadata record)
	acked    uint64 // highest Seq acknowledged: committed and synced
	dirty    bool   // no-sync commits not yet fsynced
	err      error  // sticky
	closed   bool
	closeErr error      // what the first Close returned
	bg       *stickyErr // Pebble's background and fatal errors
	records  uint64     // records appended, run metadata included
	crc      uint32     // CRC-32C of the records appended (see sumRecord)
	key      [keyLen]byte
	buf      []byte
}

var _ event.Recorder = (*Writer)(nil)

// errClosed is the sticky error of a Writer used after Close.
var errClosed = errors.New("journal: writer is closed")

// Create makes a new journal in dir (created if missing; it must not
// already hold a journal) and durably writes the run's metadata as the
// record with Seq 0, Kind event.KindRunMeta. Create stamps meta.Schema with
// event.SchemaVersion.
func Create(dir string, meta event.RunMeta, opts Options) (*Writer, error) {
	if opts.Sync != SyncEveryBatch && opts.Sync != SyncOnClose {
		return nil, fmt.Errorf("journal %s: unknown sync policy %d", dir, opts.Sync)
	}
	if opts.BatchRecords < 0 {
		return nil, fmt.Errorf("journal %s: BatchRecords %d: expected >= 0 (0 = %d)", dir, opts.BatchRecords, DefaultBatchRecords)
	}
	if opts.BatchRecords == 0 {
		opts.BatchRecords = DefaultBatchRecords
	}
	for _, name := range []string{markerName, eventsName, markerName + ".tmp"} { // as LooksLikeRun
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return nil, fmt.Errorf("journal %s: already holds a journal (or the remains of one): refusing to overwrite it", dir)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal %s: %w", dir, err)
	}
	bg := &stickyErr{}
	db, err := openStore(dir, false, bg)
	if err != nil {
		return nil, fmt.Errorf("journal %s: creating event store: %w", dir, err)
	}
	w := &Writer{dir: dir, db: db, batch: db.NewBatch(), opts: opts, bg: bg}
	meta.Schema = event.SchemaVersion
	rec := event.Record{Kind: event.KindRunMeta, Inst: event.NoInstance, Peer: event.NoInstance, Text: meta.Encode()}
	w.append(0, &rec)
	w.commit(true)
	if w.err == nil {
		if err := writeMarker(dir); err != nil {
			w.err = fmt.Errorf("journal %s: writing marker: %w", dir, err)
		}
	}
	if w.err != nil {
		err := w.err
		_ = w.batch.Close()
		_ = db.Close()
		return nil, err
	}
	return w, nil
}

// Record copies r into the current batch and commits the batch once it
// holds Options.BatchRecords records. A record with Seq 0 gets the next
// sequence number; any other Seq must be above every earlier one. Errors
// are sticky: after the first, Record drops everything and Err, Flush and
// Close report it.
func (w *Writer) Record(r *event.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pullBackground()
	if w.err != nil {
		return
	}
	if w.closed {
		w.err = errClosed
		return
	}
	seq := r.Seq
	if seq == 0 {
		seq = w.last + 1
	} else if seq > maxSeq {
		w.err = fmt.Errorf("journal %s: record seq %d (%s at %v): expected below 2^56", w.dir, seq, r.Kind, r.At)
		return
	} else if seq <= w.last {
		w.err = fmt.Errorf("journal %s: record seq %d (%s at %v) after seq %d: sequence numbers must increase", w.dir, seq, r.Kind, r.At, w.last)
		return
	}
	if r.Kind == event.KindRunMeta {
		w.err = fmt.Errorf("journal %s: record seq %d is run metadata: Create already wrote it", w.dir, seq)
		return
	}
	w.append(seq, r)
	if w.n >= w.opts.BatchRecords {
		w.commit(false)
	}
}

func (w *Writer) append(seq uint64, r *event.Record) {
	putKey(&w.key, seq)
	w.buf = appendValue(w.buf[:0], r)
	if err := w.batch.Set(w.key[:], w.buf, nil); err != nil {
		w.err = fmt.Errorf("journal %s: buffering record seq %d: %w", w.dir, seq, err)
		return
	}
	w.last = seq
	w.n++
	w.records++
	w.crc = sumRecord(w.crc, w.key[:], w.buf)
}

// pullBackground makes a background error Pebble reported the writer's
// sticky error.
func (w *Writer) pullBackground() {
	if w.err == nil {
		if err := w.bg.get(); err != nil {
			w.err = fmt.Errorf("journal %s: %w", w.dir, err)
		}
	}
}

// commit writes the buffered batch: synced when the policy says so or when
// durable is set. With nothing buffered, durable still syncs earlier
// no-sync commits.
func (w *Writer) commit(durable bool) {
	w.pullBackground()
	if w.err != nil {
		return
	}
	sync := durable || w.opts.Sync == SyncEveryBatch
	var err error
	func() {
		defer catchFatal(&err)
		switch {
		case w.n > 0 && sync:
			err = w.batch.Commit(pebble.Sync)
		case w.n > 0:
			err = w.batch.Commit(pebble.NoSync)
		case durable && w.dirty:
			// An empty log record with Sync fsyncs the WAL, and with it
			// every no-sync commit before it.
			err = w.db.LogData(nil, pebble.Sync)
		default:
			return
		}
	}()
	if err != nil {
		w.err = fmt.Errorf("journal %s: committing records up to seq %d: %w", w.dir, w.last, err)
		return
	}
	if w.n > 0 {
		w.batch.Reset()
		w.n = 0
	}
	w.dirty = !sync
	if sync {
		w.acked = w.last
	}
	w.pullBackground()
}

// Flush commits the buffered records now, with an fsync under either
// policy. Once Flush returns nil, every record given so far is
// acknowledged: it survives a crash.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil && w.closed {
		return errClosed
	}
	w.commit(true)
	return w.err
}

// Acked returns the highest Seq acknowledged so far: its commit returned
// and was synced, so it survives a crash. Under SyncEveryBatch that is the
// last record of the last automatic batch or Flush; under SyncOnClose, the
// last record covered by a Flush. The run metadata is Seq 0.
func (w *Writer) Acked() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// Err returns the writer's sticky error, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pullBackground()
	return w.err
}

// Close ends a whole run: it appends the end-of-run record (the record
// count, the last Seq and a checksum of every record; see End), commits and
// syncs everything, flushes the store to its tables and closes it, and
// deletes the write-ahead logs, so the finished journal takes its data plus
// a few kilobytes of Pebble metadata. Readers refuse a run without its
// end-of-run record. After an error (the writer's sticky error, Pebble's
// background errors included) no end-of-run record is written: the run
// stays incomplete and readers say so. Closing twice returns the same
// result as the first Close (or ClosePartial).
func (w *Writer) Close() error { return w.close("") }

// ClosePartial ends a run that stopped early (an interrupt, a cancelled
// sweep, a router shutting down mid-traffic): like Close, but the
// end-of-run record marks the run partial with reason, so readers refuse
// it unless asked for partial runs, and label what they score from it
// "partial". An empty reason reads as "interrupted".
func (w *Writer) ClosePartial(reason string) error {
	if reason == "" {
		reason = "interrupted"
	}
	return w.close(reason)
}

func (w *Writer) close(partial string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	w.pullBackground()
	if w.err == nil {
		end := End{Records: w.records, LastSeq: w.last, CRC32C: w.crc, Partial: partial}
		if err := w.batch.Set(endKey, end.encode(), nil); err != nil {
			w.err = fmt.Errorf("journal %s: buffering the end-of-run record: %w", w.dir, err)
		} else {
			w.n++
		}
	}
	w.commit(true)
	flushed := false
	if w.err == nil {
		var err error
		func() {
			defer catchFatal(&err)
			err = w.db.Flush()
		}()
		if err != nil {
			w.err = fmt.Errorf("journal %s: flushing the event store: %w", w.dir, err)
		}
		w.pullBackground()
		flushed = w.err == nil
	}
	_ = w.batch.Close()
	var err error
	func() {
		defer catchFatal(&err)
		err = w.db.Close()
	}()
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("journal %s: closing event store: %w", w.dir, err)
	}
	if w.err == nil && flushed {
		if err := removeLogs(w.dir); err != nil {
			w.err = fmt.Errorf("journal %s: removing flushed write-ahead logs: %w", w.dir, err)
		}
	}
	w.closeErr = w.err
	return w.closeErr
}

// Dir returns the journal's directory.
func (w *Writer) Dir() string { return w.dir }
