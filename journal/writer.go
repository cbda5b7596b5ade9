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
	// SyncEveryBatch fsyncs every batch commit: once a batch's commit has
	// returned (Acked covers it) or Flush has returned nil, its records
	// survive a process kill and a power loss. Each commit costs one fsync
	// (a few milliseconds on a disk, far less on NVMe), amortised over
	// Options.BatchRecords records and paid on the writer's committer
	// goroutine, not by Record.
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
//
// Record only buffers: it copies the record into the batch being filled
// and, once that batch is full, hands it to the writer's committer
// goroutine and starts another. The committer commits the batches, with or
// without fsync as the policy says, one at a time in the order they were
// handed over, so Record never waits for the disk except as back-pressure:
// when a full batch is already queued behind the one being committed, the
// next full batch waits for the committer to take it (the writer holds at
// most three batches). Flush and Close hand over the batch being filled
// and wait for the committer; Close ends it.
type Writer struct {
	mu       sync.Mutex
	cond     *sync.Cond // on mu; broadcast when queue, acked, err or closing change
	dir      string
	db       *pebble.DB
	batch    *pebble.Batch // being filled
	opts     Options
	n        int             // records in batch
	last     uint64          // highest Seq buffered (0 is the metadata record)
	acked    uint64          // highest Seq acknowledged: committed and synced
	queue    []handoff       // handed to the committer and not yet taken by it
	spare    []*pebble.Batch // committed batches, reset, for reuse
	stop     bool            // set by Close: the committer ends once the queue is empty
	done     chan struct{}   // closed when the committer has ended
	waits    int             // hand-overs that waited for room in the queue
	err      error           // sticky
	closed   bool
	closing  bool       // Close has begun and not yet returned
	closeMu  sync.Mutex // serialises Close and ClosePartial
	closeErr error      // what the first Close returned
	bg       *stickyErr // Pebble's background and fatal errors
	records  uint64     // records appended, run metadata included
	crc      uint32     // CRC-32C of the records appended (see sumRecord)
	key      [keyLen]byte
	buf      []byte

	commitHook func() // tests: the committer calls it before each commit, without mu
}

// handoff is one unit of work for the committer.
type handoff struct {
	b    *pebble.Batch // records to commit; nil: only sync what came before
	last uint64        // highest Seq buffered when it was handed over
	sync bool          // fsync with it, whatever the policy
}

// maxQueued is how many hand-overs may wait for the committer besides the
// one it is committing; a further hand-over waits for room.
const maxQueued = 1

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
	w := &Writer{dir: dir, db: db, batch: db.NewBatch(), opts: opts, bg: bg, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	meta.Schema = event.SchemaVersion
	rec := event.Record{Kind: event.KindRunMeta, Inst: event.NoInstance, Peer: event.NoInstance, Text: meta.Encode()}
	w.append(0, &rec)
	if w.err == nil {
		// Committed here, before the committer starts: Create returns
		// once the metadata is durable.
		if err := w.commit(handoff{b: w.batch, sync: true}, new(bool)); err != nil {
			w.err = fmt.Errorf("journal %s: committing records up to seq 0: %w", dir, err)
		}
		w.pullBackground()
	}
	if w.err == nil {
		w.batch.Reset()
		w.n = 0
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
	go w.committer()
	return w, nil
}

// Record copies r into the current batch and, once it holds
// Options.BatchRecords records, hands it to the committer goroutine, which
// commits it (see SyncPolicy) while Record returns. A record with Seq 0
// gets the next sequence number; any other Seq must be above every earlier
// one. Errors are sticky: after the first (a commit's included, as soon as
// the committer has seen it), Record drops everything and Err, Flush and
// Close report it.
func (w *Writer) Record(r *event.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pullBackground()
	if w.err != nil {
		return
	}
	if w.closed {
		// As if Record had waited for Close to finish, as it did when
		// Close held the lock throughout.
		for w.closing {
			w.cond.Wait()
		}
		if w.err == nil {
			w.err = errClosed
		}
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
		w.handOff(false)
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

// handOff, with w.mu held, queues the batch being filled for the committer
// and starts a new one; with sync, it queues a synced commit even when
// the batch is empty (to sync earlier no-sync commits). While another
// hand-over is queued and not yet taken, it waits (releasing w.mu):
// back-pressure. It reports false when the writer has failed.
func (w *Writer) handOff(sync bool) bool {
	waited := false
	for len(w.queue) >= maxQueued && w.err == nil {
		if !waited {
			w.waits++
			waited = true
		}
		w.cond.Wait()
	}
	if w.err != nil {
		return false
	}
	if w.n == 0 && !sync {
		return true // another caller handed this batch over while this one waited
	}
	h := handoff{last: w.last, sync: sync}
	if w.n > 0 {
		h.b = w.batch
		if k := len(w.spare); k > 0 {
			w.batch = w.spare[k-1]
			w.spare = w.spare[:k-1]
		} else {
			w.batch = w.db.NewBatch()
		}
		w.n = 0
	}
	w.queue = append(w.queue, h)
	w.cond.Broadcast()
	return true
}

// committer commits what handOff queues, in order, until Close stops it.
// It holds w.mu except while it commits. After the writer's first error it
// commits nothing more, and only drains the queue.
func (w *Writer) committer() {
	defer close(w.done)
	dirty := false // no-sync commits not yet fsynced
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.queue) == 0 && !w.stop {
			w.cond.Wait()
		}
		if len(w.queue) == 0 {
			return
		}
		h := w.queue[0]
		w.queue[0] = handoff{}
		w.queue = w.queue[1:]
		w.pullBackground()
		failed := w.err != nil
		hook := w.commitHook
		w.cond.Broadcast() // room in the queue
		w.mu.Unlock()
		var err error
		if !failed {
			if hook != nil {
				hook()
			}
			err = w.commit(h, &dirty)
		}
		if h.b != nil {
			h.b.Reset()
		}
		w.mu.Lock()
		if !failed {
			switch {
			case err != nil:
				if w.err == nil {
					w.err = fmt.Errorf("journal %s: committing records up to seq %d: %w", w.dir, h.last, err)
				}
			case !dirty:
				// Synced: this commit and, since the write-ahead log is
				// one sequence, every commit before it.
				w.acked = h.last
			}
			w.pullBackground()
		}
		if h.b != nil {
			if len(w.spare) < maxQueued+1 {
				w.spare = append(w.spare, h.b)
			} else {
				_ = h.b.Close()
			}
		}
		w.cond.Broadcast()
	}
}

// commit writes one hand-over, synced when the policy says so or when h
// asks; *dirty tracks no-sync commits not yet fsynced. An empty hand-over
// with sync fsyncs earlier no-sync commits. Only the committer (and Create,
// before it starts) calls it, without w.mu.
func (w *Writer) commit(h handoff, dirty *bool) (err error) {
	defer catchFatal(&err)
	sync := h.sync || w.opts.Sync == SyncEveryBatch
	switch {
	case h.b != nil && sync:
		err = h.b.Commit(pebble.Sync)
	case h.b != nil:
		err = h.b.Commit(pebble.NoSync)
	case sync && *dirty:
		// An empty log record with Sync fsyncs the WAL, and with it
		// every no-sync commit before it.
		err = w.db.LogData(nil, pebble.Sync)
	}
	if err == nil {
		*dirty = !sync
	}
	return err
}

// Flush hands the buffered records to the committer and waits until they,
// and every batch handed over before them, are committed and fsynced,
// under either policy. Once Flush returns nil, every record given so far is
// acknowledged: it survives a crash.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pullBackground()
	if w.err == nil && w.closed {
		return errClosed
	}
	if w.err != nil || w.acked >= w.last {
		return w.err
	}
	target := w.last
	if !w.handOff(true) {
		return w.err
	}
	for w.acked < target && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// Acked returns the highest Seq acknowledged so far: its commit returned
// and was synced, so it survives a crash. Under SyncEveryBatch that is the
// last record of the last batch the committer has committed (a full batch
// from Record, or one from Flush); under SyncOnClose, the last record
// covered by a Flush. The run metadata is Seq 0.
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
// count, the last Seq and a checksum of every record; see End), waits for
// the committer to commit and sync everything and end, flushes the store to its
// tables and closes it, and deletes the write-ahead logs, so the finished
// journal takes its data plus a few kilobytes of Pebble metadata. Readers
// refuse a run without its end-of-run record. After an error (the writer's
// sticky error, Pebble's background errors included) no end-of-run record
// is written: the run stays incomplete and readers say so. Closing twice
// returns the same result as the first Close (or ClosePartial).
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
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.closeErr
	}
	w.closed, w.closing = true, true
	w.pullBackground()
	if w.err == nil {
		end := End{Records: w.records, LastSeq: w.last, CRC32C: w.crc, Partial: partial}
		if err := w.batch.Set(endKey, end.encode(), nil); err != nil {
			w.err = fmt.Errorf("journal %s: buffering the end-of-run record: %w", w.dir, err)
		} else {
			w.n++
			w.handOff(true)
		}
	}
	// Let the committer drain the queue (after an error it commits
	// nothing more) and end.
	w.stop = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
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
	for _, b := range w.spare {
		_ = b.Close()
	}
	w.spare = nil
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
	w.closing = false
	w.cond.Broadcast()
	return w.closeErr
}

// Dir returns the journal's directory.
func (w *Writer) Dir() string { return w.dir }
