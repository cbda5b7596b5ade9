package journal

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// TestBackgroundErrors: an error Pebble reports from its background work
// (through the event listener the store is opened with) or a fatal error
// becomes the writer's sticky error; the run then gets no end-of-run
// record, and readers say it is incomplete.
func TestBackgroundErrors(t *testing.T) {
	sink := &stickyErr{}
	o := pebbleOptions(false, sink)
	if o.EventListener == nil || o.EventListener.BackgroundError == nil {
		t.Fatal("the writer's store has no BackgroundError listener")
	}
	o.EventListener.BackgroundError(errors.New("flush: disk on fire"))
	if err := sink.get(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("listener: sink holds %v", err)
	}
	sink2 := &stickyErr{}
	func() {
		defer func() { recover() }()
		quietLogger{sink: sink2}.Fatalf("MANIFEST %s", "unwritable")
	}()
	if err := sink2.get(); err == nil || !strings.Contains(err.Error(), "MANIFEST unwritable") {
		t.Fatalf("Fatalf: sink holds %v", err)
	}

	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testMeta("bg", 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	synth(10, 1, func(r *event.Record) { w.Record(r) })
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	w.bg.set(errors.New("compaction: checksum mismatch")) // as the listener does
	synth(10, 2, func(r *event.Record) { w.Record(r) })
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("Err = %v, want the background error", err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("Close = %v, want the background error", err)
	}
	var inc *IncompleteError
	if _, err := Open(dir); !errors.As(err, &inc) || inc.Missing != "end-of-run record" {
		t.Fatalf("Open after a background error = %v, want an incomplete run", err)
	}
}
