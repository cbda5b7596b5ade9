package journal

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// hangGuard bounds how long a test waits for something that must happen:
// it catches a call that blocks for good (the failure these tests look
// for), never measures how fast anything is.
const hangGuard = time.Minute

// wait fails the test if ch is not closed before hangGuard.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("%s: still blocked after %v", what, hangGuard)
	}
}

// until polls cond (under the writer's lock) until it holds.
func until(t *testing.T, w *Writer, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// queueRecord is a record the writer numbers itself.
func queueRecord() *event.Record {
	return &event.Record{Kind: event.KindQueue, Inst: event.NoInstance, Peer: event.NoInstance}
}

// blockCommits makes every commit of w wait until release is closed; each
// commit first sends on the returned channel.
func blockCommits(w *Writer, release <-chan struct{}) <-chan struct{} {
	entered := make(chan struct{}, 64)
	w.mu.Lock()
	w.commitHook = func() {
		entered <- struct{}{}
		<-release
	}
	w.mu.Unlock()
	return entered
}

// TestRecordDoesNotWaitForCommit: while a batch's commit (and fsync) is
// stuck, Record keeps returning for a whole further batch and more; only
// the batch after that waits (bounded memory). Flush waits for the stuck
// commit; once it is released, Flush returns nil and Acked covers every
// record, and the closed run holds them all.
func TestRecordDoesNotWaitForCommit(t *testing.T) {
	const batch = 16
	for _, pol := range []SyncPolicy{SyncEveryBatch, SyncOnClose} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			w, err := Create(dir, testMeta("async", 1), Options{Sync: pol, BatchRecords: batch})
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			entered := blockCommits(w, release)
			released := false
			defer func() {
				if !released {
					close(release) // let the committer end
				}
			}()

			// A full batch: handed to the committer, whose commit then
			// blocks. Record returns all the same.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < batch; i++ {
					w.Record(queueRecord())
				}
			}()
			wait(t, done, "Record of the first batch")
			select {
			case <-entered:
			case <-time.After(hangGuard):
				t.Fatal("the first full batch never reached a commit")
			}
			if a := w.Acked(); a != 0 {
				t.Fatalf("Acked = %d while the first commit is blocked, want 0", a)
			}

			// A second full batch (queued behind the blocked one) and a
			// partial third: Record still returns, without waiting.
			done = make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < 2*batch-1; i++ {
					w.Record(queueRecord())
				}
			}()
			wait(t, done, "Record while a commit is blocked")
			w.mu.Lock()
			waits, last := w.waits, w.last
			w.mu.Unlock()
			if waits != 0 || last != 3*batch-1 {
				t.Fatalf("after %d records: %d waits, last seq %d; want 0 waits, last %d", 3*batch-1, waits, last, 3*batch-1)
			}

			// The record that fills the third batch finds one batch
			// committing and one queued: it waits (back-pressure).
			recDone := make(chan struct{})
			go func() {
				defer close(recDone)
				w.Record(queueRecord())
			}()
			until(t, w, "the third full batch waits for room", func() bool { return w.waits == 1 })
			// Flush waits too: for room, then for the commits.
			var flushErr error
			flushDone := make(chan struct{})
			go func() {
				defer close(flushDone)
				flushErr = w.Flush()
			}()
			until(t, w, "Flush waits for room", func() bool { return w.waits == 2 })
			if isDone(recDone) || isDone(flushDone) {
				t.Fatal("a hand-over returned while the committer was blocked with a full queue")
			}
			if a := w.Acked(); a != 0 {
				t.Fatalf("Acked = %d while the first commit is blocked, want 0", a)
			}

			close(release)
			released = true
			wait(t, recDone, "Record after the commit was released")
			wait(t, flushDone, "Flush after the commit was released")
			if flushErr != nil {
				t.Fatal(flushErr)
			}
			if a := w.Acked(); a != 3*batch {
				t.Fatalf("Acked = %d after Flush, want %d", a, 3*batch)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got := replayAll(t, r)
			if len(got) != 3*batch+1 || got[len(got)-1].Seq != 3*batch {
				t.Fatalf("journal holds %d records, want seqs 0..%d", len(got), 3*batch)
			}
		})
	}
}

// TestCommitErrorWhileFlushing: an error that reaches the writer while a
// Flush waits for the committer makes that Flush fail; the records it
// covered are not acknowledged, and the run stays incomplete.
func TestCommitErrorWhileFlushing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, testMeta("async", 1), Options{BatchRecords: 8})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := blockCommits(w, release)
	for i := 0; i < 8; i++ {
		w.Record(queueRecord())
	}
	<-entered // the first batch's commit is blocked
	for i := 0; i < 3; i++ {
		w.Record(queueRecord())
	}
	flushDone := make(chan struct{})
	var flushErr error
	go func() {
		defer close(flushDone)
		flushErr = w.Flush()
	}()
	until(t, w, "Flush hands over its batch", func() bool { return len(w.queue) == 1 && w.queue[0].sync })
	w.bg.set(errors.New("disk on fire")) // as Pebble's listener does
	close(release)
	wait(t, flushDone, "Flush")
	if flushErr == nil || !strings.Contains(flushErr.Error(), "disk on fire") {
		t.Fatalf("Flush = %v, want the error", flushErr)
	}
	if a := w.Acked(); a > 8 {
		t.Fatalf("Acked = %d after a failed Flush; the records after seq 8 were never committed", a)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Close = %v, want the error", err)
	}
	var inc *IncompleteError
	if _, err := Open(dir); !errors.As(err, &inc) {
		t.Fatalf("Open = %v, want an incomplete run", err)
	}
}

// TestConcurrentFlush: records from one goroutine while others Flush and
// read Acked and Err, as `serve` does; every Flush that returns nil leaves
// Acked at or above the last record given before it, Acked never goes
// back, and the closed run holds every record in order. Run it with -race.
func TestConcurrentFlush(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncEveryBatch, SyncOnClose} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			w, err := Create(dir, testMeta("async", 1), Options{Sync: pol, BatchRecords: 37})
			if err != nil {
				t.Fatal(err)
			}
			const n = 20000
			var given atomic.Uint64 // highest Seq whose Record has returned
			stop := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					before := given.Load()
					if err := w.Flush(); err != nil {
						errs <- err
						return
					}
					if a := w.Acked(); a < before {
						errs <- errors.New("Flush returned nil with Acked below a record given before it")
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				var prev uint64
				for {
					select {
					case <-stop:
						return
					default:
					}
					a := w.Acked()
					if a < prev {
						errs <- errors.New("Acked went back")
						return
					}
					prev = a
					if err := w.Err(); err != nil {
						errs <- err
						return
					}
				}
			}()
			synth(n, 9, func(r *event.Record) {
				w.Record(r)
				given.Add(1)
			})
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			next := uint64(0)
			if err := r.Replay(func(rec *event.Record) error {
				if rec.Seq != next {
					t.Fatalf("seq %d where %d was expected", rec.Seq, next)
				}
				next++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if next-1 != given.Load() {
				t.Fatalf("journal ends at seq %d, %d records were given", next-1, given.Load())
			}
		})
	}
}
