package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
// error from the call that hit it. Fatalf means Pebble cannot continue (its
// default logger exits the process); here it panics with a pebbleFatal,
// which the writer's commit path turns into a sticky error.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(pebbleFatal{fmt.Sprintf(format, args...)})
}

type pebbleFatal struct{ msg string }

func (p pebbleFatal) Error() string { return p.msg }

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

func pebbleOptions(readOnly bool) *pebble.Options {
	o := &pebble.Options{
		Logger:   quietLogger{},
		ReadOnly: readOnly,
		// Larger than Pebble's 4 MiB default so a fast writer flushes
		// memtables less often. Pebble grows memtables from 256 KiB up to
		// this size, so a small run stays small.
		MemTableSize:  32 << 20,
		ErrorIfExists: !readOnly,
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
func openStore(dir string, readOnly bool) (db *pebble.DB, err error) {
	defer func() {
		if v := recover(); v != nil {
			db, err = nil, fmt.Errorf("pebble: %v", v)
		}
	}()
	return pebble.Open(filepath.Join(dir, eventsName), pebbleOptions(readOnly))
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
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
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
// one run, else its immediate subdirectories that are journals. A root with
// no journals gives an empty list.
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
		if e.IsDir() && IsJournal(p) {
			runs = append(runs, p)
		}
	}
	return runs, nil
}
