package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// A run directory holds two entries:
//
//	JOURNAL   the marker: markerText, written last by Create
//	events/   the Pebble store of the run's records
const (
	markerName = "JOURNAL"
	eventsName = "events"
	markerText = "narwhal-bench journal\nlayout 1\n"
)

// quietLogger keeps Pebble off stderr. Informational and error messages are
// dropped: every failure that matters to a caller also comes back as an
// error from the call that hit it, or (for a writer) through the event
// listener's BackgroundError into the writer's sticky error. Fatalf means
// Pebble cannot continue (its default logger exits the process); here it
// first records the message as the writer's sticky error, then panics with
// a pebbleFatal, which the writer's and reader's calls turn into an error.
// A Fatalf on one of Pebble's own background goroutines cannot be recovered
// and ends the process; the run then has no end-of-run record, and every
// reader refuses it as incomplete.
type quietLogger struct{ sink *stickyErr }

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (l quietLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	// Pebble's messages may carry a wrapped error's whole stack trace on
	// the lines after the first: the first line says what failed.
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if l.sink != nil {
		l.sink.set(fmt.Errorf("pebble: fatal: %s", msg))
	}
	panic(pebbleFatal{msg})
}

type pebbleFatal struct{ msg string }

func (p pebbleFatal) Error() string { return p.msg }

// stickyErr holds the first error Pebble reports from its background work
// (flushes, compactions, table statistics); the writer checks it on every
// call. It has its own lock: Pebble may report while a commit holds the
// writer's.
type stickyErr struct {
	mu  sync.Mutex
	err error
}

func (s *stickyErr) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *stickyErr) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// catchFatal converts a pebbleFatal panic (and only that) into *err.
func catchFatal(err *error) {
	if v := recover(); v != nil {
		f, ok := v.(pebbleFatal)
		if !ok {
			panic(v)
		}
		*err = fmt.Errorf("pebble: %s", f.msg)
	}
}

// pebbleOptions are the store's settings. sink, for a writer, receives
// Pebble's background errors (its EventListener's BackgroundError) and
// fatal errors.
func pebbleOptions(readOnly bool, sink *stickyErr) *pebble.Options {
	o := &pebble.Options{
		Logger:   quietLogger{sink: sink},
		ReadOnly: readOnly,
		// Larger than Pebble's 4 MiB default so a fast writer flushes
		// memtables less often. Pebble grows memtables from 256 KiB up to
		// this size, so a small run stays small in memory. The write-ahead
		// log is preallocated at 110% of this size while a run is written;
		// Close flushes the memtable and deletes the logs, so none of that
		// space outlives the run.
		MemTableSize:  32 << 20,
		ErrorIfExists: !readOnly,
	}
	// Pebble's default is GOMAXPROCS, which its OPTIONS file records: a
	// fixed count keeps that file the same on every machine. One reader
	// or writer uses a run's store at a time.
	o.Experimental.FileCacheShards = 4
	if sink != nil {
		o.EventListener = &pebble.EventListener{BackgroundError: func(err error) {
			sink.set(fmt.Errorf("pebble background error: %w", err))
		}}
	}
	// Values are already compact varints, which Snappy shrinks by only
	// about 30% on disk; storing blocks uncompressed, in 32 KiB blocks,
	// makes both memtable flushes and full replays noticeably faster. Keys only
	// ever increase, so flushed tables never overlap and Pebble needs no
	// compactions to keep reads cheap.
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	for i := range o.Levels {
		o.Levels[i].BlockSize = 32 << 10
	}
	return o
}

// openStore opens the Pebble store of a run directory, turning any panic
// Pebble raises on damaged files into an error.
func openStore(dir string, readOnly bool, sink *stickyErr) (db *pebble.DB, err error) {
	defer func() {
		if v := recover(); v != nil {
			db, err = nil, fmt.Errorf("pebble: %v", v)
		}
	}()
	return pebble.Open(filepath.Join(dir, eventsName), pebbleOptions(readOnly, sink))
}

// removeLogs deletes the write-ahead logs of a closed store whose memtable
// was flushed: they hold nothing a reader needs (the tables do), and the
// active one is preallocated.
func removeLogs(dir string) error {
	store := filepath.Join(dir, eventsName)
	ents, err := os.ReadDir(store)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			if err := os.Remove(filepath.Join(store, e.Name())); err != nil {
				return err
			}
		}
	}
	return syncDir(store)
}

// IsJournal reports whether dir is laid out as a journal: its marker file
// with the expected contents and an events store beside it. It is a cheap
// check that reads no records; Open still validates the store and the run
// metadata.
func IsJournal(dir string) bool {
	return checkLayout(dir) == nil
}

// checkLayout explains why dir is not a journal, or returns nil.
func checkLayout(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("journal %s: no such directory", dir)
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("journal %s: not a directory", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if errors.Is(err, fs.ErrNotExist) {
		ents, rerr := os.ReadDir(dir)
		switch {
		case rerr != nil:
			return fmt.Errorf("journal %s: %w", dir, rerr)
		case len(ents) == 0:
			return fmt.Errorf("journal %s: empty directory, not a journal", dir)
		default:
			return fmt.Errorf("journal %s: not a journal: no %s marker among its %d entries (a Create that did not finish leaves none)", dir, markerName, len(ents))
		}
	}
	if err != nil {
		return fmt.Errorf("journal %s: reading marker: %w", dir, err)
	}
	if string(b) != markerText {
		if strings.HasPrefix(string(b), "narwhal-bench journal\n") {
			return fmt.Errorf("journal %s: marker says %q: this narwhal-bench reads %q; upgrade it", dir, strings.TrimSpace(strings.TrimPrefix(string(b), "narwhal-bench journal\n")), strings.TrimSpace(strings.TrimPrefix(markerText, "narwhal-bench journal\n")))
		}
		return fmt.Errorf("journal %s: %s is not a narwhal-bench journal marker", dir, markerName)
	}
	st, err = os.Stat(filepath.Join(dir, eventsName))
	if err != nil || !st.IsDir() {
		return fmt.Errorf("journal %s: marker present but no %s/ store", dir, eventsName)
	}
	return nil
}

// writeMarker writes the marker durably: a temporary file, fsync, rename,
// fsync of the directory.
func writeMarker(dir string) error {
	tmp := filepath.Join(dir, markerName+".tmp")
	// O_EXCL: never through a link left there, never over another file.
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.WriteString(markerText); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, markerName)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Runs lists the run directories under root, sorted: root itself when it is
// one run, else its immediate subdirectories that are journals or the
// remains of one (a marker or an events/ store: a run whose other half was
// deleted is listed, so that reading it fails, rather than being skipped).
// A root with no journals gives an empty list.
func Runs(root string) ([]string, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("journal runs: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("journal runs: %s: not a directory", root)
	}
	if IsJournal(root) {
		return []string{root}, nil
	}
	ents, err := os.ReadDir(root) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("journal runs: %w", err)
	}
	var runs []string
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if e.IsDir() && LooksLikeRun(p) {
			runs = append(runs, p)
		}
	}
	return runs, nil
}

// LooksLikeRun reports whether dir holds a journal or the remains of one:
// its marker or its events/ store (whole or not).
func LooksLikeRun(dir string) bool {
	for _, name := range []string{markerName, eventsName, markerName + ".tmp"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}
