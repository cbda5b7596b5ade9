package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/narwhal-bench/narwhal-bench/event"
)

// Reader is a read-only view of one run's journal. Several Replays may run
// at once; Close must not overlap them.
type Reader struct {
	dir     string
	db      *pebble.DB
	meta    event.RunMeta
	end     End
	hasEnd  bool
	lastSeq uint64 // the highest record Seq in the store
}

// OpenOptions tune Open.
type OpenOptions struct {
	// Partial accepts a run that is not whole: one without an end-of-run
	// record (its writer never closed) or one marked partial by
	// Writer.ClosePartial. Its records are read as they are; Reader.Partial
	// says why the run is partial. Damage is still an error.
	Partial bool
}

// Open opens a whole run's journal read-only; it is OpenWith with no
// options. A run without its end-of-run record, or marked partial, is
// refused with an *IncompleteError; a store Pebble cannot open, or whose
// end-of-run record is unreadable, with a *CorruptError.
func Open(dir string) (*Reader, error) { return OpenWith(dir, OpenOptions{}) }

// OpenWith opens the journal in dir read-only. It works after a clean Close
// and after a crash: Pebble replays its write-ahead log, which yields every
// batch whose commit returned (under the writer's sync policy) and drops a
// torn tail whole, so no record is ever half there. The run metadata and
// the end-of-run record are read and checked here: a journal from a newer
// schema is refused, and so is a run that is not whole unless o.Partial.
// Replay checks every record against the end-of-run record. A journal
// whose Writer is still open cannot be opened.
func OpenWith(dir string, o OpenOptions) (*Reader, error) {
	if err := checkLayout(dir); err != nil {
		return nil, err
	}
	db, err := openStore(dir, true, nil)
	if err != nil {
		if strings.Contains(err.Error(), "lock held") || errors.Is(err, syscall.EWOULDBLOCK) {
			// Pebble's lock error has no sentinel to test with errors.Is:
			// "lock held" within this process, the flock's EWOULDBLOCK
			// when another process (a router still serving) holds it.
			return nil, fmt.Errorf("journal %s: in use: its Writer is still open, in this process or another (stop the run or the router writing it first) (%w)", dir, err)
		}
		return nil, &CorruptError{Dir: dir, What: fmt.Sprintf("opening the event store: %v", err), Err: err}
	}
	r := &Reader{dir: dir, db: db}
	if err := r.readMeta(); err != nil {
		_ = closeDB(db)
		return nil, asCorrupt(dir, err)
	}
	if err := r.readEnd(o); err != nil {
		_ = closeDB(db)
		return nil, asCorrupt(dir, err)
	}
	return r, nil
}

// asCorrupt makes a read error that is not already typed a *CorruptError
// (Pebble reports damaged blocks by panicking through its logger).
func asCorrupt(dir string, err error) error {
	var c *CorruptError
	var inc *IncompleteError
	if errors.As(err, &c) || errors.As(err, &inc) || errors.Is(err, event.ErrNewerSchema) {
		return err // a newer schema is whole, not damaged
	}
	return &CorruptError{Dir: dir, What: err.Error(), Err: err}
}

// readEnd reads the end-of-run record and the last record's Seq.
func (r *Reader) readEnd(o OpenOptions) (err error) {
	defer catchFatal(&err)
	it, err := r.db.NewIter(&pebble.IterOptions{UpperBound: []byte{0xff}})
	if err != nil {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("reading the last record: %v", err), Err: err}
	}
	if it.Last() && len(it.Key()) == keyLen {
		r.lastSeq = binary.BigEndian.Uint64(it.Key())
	}
	if err := it.Close(); err != nil {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("reading the last record: %v", err), Err: err}
	}
	v, closer, err := r.db.Get(endKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if !o.Partial {
			return &IncompleteError{Dir: r.dir, Missing: "end-of-run record", LastSeq: r.lastSeq}
		}
		return nil
	case err != nil:
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("reading the end-of-run record: %v", err), LastSeq: r.lastSeq, Err: err}
	}
	defer closer.Close()
	e, err := decodeEnd(v)
	if err != nil {
		return &CorruptError{Dir: r.dir, What: err.Error(), LastSeq: r.lastSeq, Err: err}
	}
	if e.LastSeq != r.lastSeq {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("the last record is seq %d, the end-of-run record says seq %d", r.lastSeq, e.LastSeq), LastSeq: r.lastSeq}
	}
	if e.Partial != "" && !o.Partial {
		return &IncompleteError{Dir: r.dir, Missing: "the rest of the run", Reason: e.Partial, LastSeq: r.lastSeq}
	}
	r.end, r.hasEnd = e, true
	return nil
}

// End returns the run's end-of-run record, and false when it has none (a
// run opened with OpenOptions.Partial whose writer never closed).
func (r *Reader) End() (End, bool) { return r.end, r.hasEnd }

// Partial says why the run is not whole, or "" when it is: the reason
// ClosePartial recorded, or that the end-of-run record is missing. Only a
// Reader opened with OpenOptions.Partial can be partial.
func (r *Reader) Partial() string {
	switch {
	case !r.hasEnd:
		return fmt.Sprintf("no end-of-run record (the writer never closed); records up to seq %d", r.lastSeq)
	case r.end.Partial != "":
		return r.end.Partial
	}
	return ""
}

func (r *Reader) readMeta() (err error) {
	defer catchFatal(&err)
	var key [keyLen]byte
	putKey(&key, 0)
	v, closer, err := r.db.Get(key[:])
	if errors.Is(err, pebble.ErrNotFound) {
		return &CorruptError{Dir: r.dir, What: "no run-metadata record (seq 0)"}
	}
	if err != nil {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("reading run metadata: %v", err), Err: err}
	}
	defer closer.Close()
	var d decoder
	var rec event.Record
	if err := d.decode(0, v, &rec); err != nil {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("run metadata: %v", err), Err: err}
	}
	if rec.Kind != event.KindRunMeta {
		return &CorruptError{Dir: r.dir, What: fmt.Sprintf("record seq 0 is %s, expected %s", rec.Kind, event.KindRunMeta)}
	}
	m, err := event.DecodeRunMeta(rec.Text)
	if err != nil {
		return fmt.Errorf("journal %s: %w", r.dir, err)
	}
	r.meta = m
	return nil
}

// RunName is the name a run goes by in reports and exports: its
// directory's last element, taken from the absolute path, so that "." or
// "run/.." name the run and not the dot.
func RunName(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Base(dir)
}

// Dir returns the journal's directory.
func (r *Reader) Dir() string { return r.dir }

// Meta returns the run's metadata.
func (r *Reader) Meta() event.RunMeta { return r.meta }

// Replay calls fn with every record in Seq order, the run-metadata record
// (Seq 0) first. fn receives a pointer to a Record that Replay reuses: copy
// the Record to keep it (its strings are safe to keep). Replay stops at the
// first error fn returns and returns it; a record that cannot be decoded
// stops Replay with an error naming its key. At the end of the store it
// checks what it read against the end-of-run record (count, last Seq,
// checksum) and returns a *CorruptError if they differ.
//
// fn runs on the caller's goroutine. Underneath, a second goroutine walks
// the store and hands raw values over in chunks, so the store's iteration
// overlaps decoding and fn; it has ended by the time Replay returns.
func (r *Reader) Replay(fn func(*event.Record) error) error {
	if r.db == nil {
		return fmt.Errorf("journal %s: reader is closed", r.dir)
	}
	p := newPump(r.db)
	defer p.stop()
	var d decoder
	var rec event.Record
	var key [keyLen]byte
	var crc uint32
	var n, last uint64
	for {
		c, ok := <-p.full
		if !ok {
			// The producer ended without error (it sends errors in a chunk).
			return r.verify(n, last, crc)
		}
		start := 0
		for i, seq := range c.seqs {
			v := c.buf[start:c.ends[i]]
			start = c.ends[i]
			if err := d.decode(seq, v, &rec); err != nil {
				return &CorruptError{Dir: r.dir, What: err.Error(), Read: n, LastSeq: last, Err: err}
			}
			putKey(&key, seq)
			crc = sumRecord(crc, key[:], v)
			n++
			last = seq
			if err := fn(&rec); err != nil {
				return err
			}
		}
		if c.panicVal != nil {
			panic(c.panicVal)
		}
		if c.err != nil {
			return &CorruptError{Dir: r.dir, What: c.err.Error(), Read: n, LastSeq: last, Err: c.err}
		}
		p.free <- c
	}
}

// verify compares what a whole Replay read with the end-of-run record.
func (r *Reader) verify(n, last uint64, crc uint32) error {
	if !r.hasEnd {
		return nil
	}
	e := r.end
	bad := func(what string) error { return &CorruptError{Dir: r.dir, What: what, Read: n, LastSeq: last} }
	switch {
	case n != e.Records:
		return bad(fmt.Sprintf("%d records read, the end-of-run record says %d", n, e.Records))
	case last != e.LastSeq:
		return bad(fmt.Sprintf("the last record read is seq %d, the end-of-run record says seq %d", last, e.LastSeq))
	case crc != e.CRC32C:
		return bad(fmt.Sprintf("records checksum %08x, the end-of-run record says %08x (records altered)", crc, e.CRC32C))
	}
	return nil
}

// Chunks bound what the pump holds: pumpChunks chunks of up to
// chunkRecords values or about chunkBytes bytes each.
const (
	pumpChunks   = 3
	chunkRecords = 4096
	chunkBytes   = 256 << 10
)

// rawChunk is a run of consecutive values copied out of the store. err (or
// panicVal) ends the stream after the chunk's values.
type rawChunk struct {
	seqs     []uint64
	ends     []int // end of each value in buf
	buf      []byte
	err      error
	panicVal any
}

// pump walks a store on its own goroutine and sends chunks of raw values.
type pump struct {
	full chan *rawChunk // filled chunks, closed at the end of the store
	free chan *rawChunk // chunks back from the consumer
	done chan struct{}  // closed by stop: the consumer has gone
	wg   sync.WaitGroup
}

func newPump(db *pebble.DB) *pump {
	p := &pump{full: make(chan *rawChunk, pumpChunks), free: make(chan *rawChunk, pumpChunks), done: make(chan struct{})}
	for i := 0; i < pumpChunks; i++ {
		p.free <- &rawChunk{}
	}
	p.wg.Add(1)
	go p.run(db)
	return p
}

// stop tells the producer to quit and waits for it.
func (p *pump) stop() {
	close(p.done)
	p.wg.Wait()
}

func (p *pump) run(db *pebble.DB) {
	defer p.wg.Done()
	var c *rawChunk
	take := func() bool {
		select {
		case c = <-p.free:
			c.seqs, c.ends, c.buf, c.err, c.panicVal = c.seqs[:0], c.ends[:0], c.buf[:0], nil, nil
			return true
		case <-p.done:
			return false
		}
	}
	send := func() bool {
		select {
		case p.full <- c:
			c = nil
			return true
		case <-p.done:
			return false
		}
	}
	if !take() {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if c == nil && !take() {
				return
			}
			if f, ok := v.(pebbleFatal); ok {
				c.err = fmt.Errorf("pebble: %s", f.msg)
			} else {
				c.panicVal = v
			}
			send()
		}
	}()
	err := p.walk(db, &c, take, send)
	if c == nil {
		return // stopped
	}
	if err != nil {
		c.err = err
		send()
		return
	}
	if len(c.seqs) > 0 && !send() {
		return
	}
	close(p.full)
}

// walk iterates the store into chunks; it returns the iteration's error, or
// nil with *c nil when the consumer stopped it.
func (p *pump) walk(db *pebble.DB, c **rawChunk, take, send func() bool) (err error) {
	// Record keys sort below 0xff; the end-of-run record is above.
	it, err := db.NewIter(&pebble.IterOptions{UpperBound: []byte{0xff}})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != keyLen {
			return fmt.Errorf("key %x: expected %d bytes, found %d", k, keyLen, len(k))
		}
		seq := binary.BigEndian.Uint64(k)
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("record seq %d: %w", seq, err)
		}
		ch := *c
		ch.seqs = append(ch.seqs, seq)
		ch.buf = append(ch.buf, v...)
		ch.ends = append(ch.ends, len(ch.buf))
		if len(ch.seqs) >= chunkRecords || len(ch.buf) >= chunkBytes {
			if !send() || !take() {
				return nil
			}
		}
	}
	return it.Error()
}

// Close releases the store.
func (r *Reader) Close() error {
	if r.db == nil {
		return nil
	}
	db := r.db
	r.db = nil
	if err := closeDB(db); err != nil {
		return fmt.Errorf("journal %s: %w", r.dir, err)
	}
	return nil
}

// closeDB closes a read-only store. After a read hit damaged files Pebble
// may panic in Close (a cache entry left referenced on its error path);
// nothing was written, so that becomes an error too.
func closeDB(db *pebble.DB) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pebble: closing after an error: %v", v)
		}
	}()
	return db.Close()
}
