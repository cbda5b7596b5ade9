package journal

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// The crash test runs its writer in a child process (this test binary,
// re-executed with -test.run=TestCrashChild) and kills it with SIGKILL
// while it appends. The child prints "ACK <seq>" whenever Writer.Acked
// has advanced (a batch commit under SyncEveryBatch, which the writer's
// committer goroutine makes while the child goes on appending; a Flush
// under either policy); the parent then checks that the reopened journal
// holds every acknowledged record, intact, with no torn record and no gap.

const (
	crashDirEnv    = "NARWHAL_JOURNAL_CRASH_DIR"
	crashSyncEnv   = "NARWHAL_JOURNAL_CRASH_SYNC"
	crashBatch     = 37  // records per batch: odd, so batches and flushes interleave
	crashFlushStep = 101 // the child also calls Flush every this many records
	crashAcks      = 150 // the parent kills the child after this many acks
)

// crashRecord is the record the child writes under seq, a pure function of
// seq so the parent can check every record it reads back. Some records
// carry several kilobytes of text so batches span the WAL's 32 KiB blocks.
func crashRecord(seq uint64) event.Record {
	kinds := []event.Kind{event.KindArrival, event.KindAdmit, event.KindQueue, event.KindPrefillStart,
		event.KindPrefillDone, event.KindKVStart, event.KindKVDone, event.KindDecodeStart, event.KindFinish,
		event.KindRefuse, event.KindExpire, event.KindFail, event.KindRoleMove, event.KindDecision, event.KindHealth}
	s := int64(seq)
	r := event.Record{
		Seq: seq, At: event.Time(s * 1000), Kind: kinds[seq%uint64(len(kinds))], Cause: event.Cause(seq % 14),
		From: event.Role(seq % 4), To: event.Role((seq + 1) % 4), Inst: event.Instance(s % 9), Peer: event.Instance(s%5 - 1),
		Req: event.RequestID(s/3 + 1), Tokens: s * 7, Want: s % 1000, Ref: event.Time(-s),
		Class: []string{"chat", "code", ""}[seq%3],
	}
	switch {
	case seq%97 == 0:
		r.Text = strings.Repeat(fmt.Sprintf("<%d>", seq), 1500)
	case seq%5 == 0:
		r.Text = fmt.Sprintf(`{"seq":%d}`, seq)
	}
	return r
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrash; runs only when " + crashDirEnv + " is set")
	}
	pol := SyncEveryBatch
	if os.Getenv(crashSyncEnv) == SyncOnClose.String() {
		pol = SyncOnClose
	}
	w, err := Create(dir, testMeta("crash", 1), Options{Sync: pol, BatchRecords: crashBatch})
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(1)
	}
	deadline := time.Now().Add(60 * time.Second)
	printed := uint64(0)
	for seq := uint64(1); time.Now().Before(deadline); seq++ {
		r := crashRecord(seq)
		w.Record(&r) // hands over a batch every crashBatch records since the last hand-over
		if seq%crashFlushStep == 0 {
			if err := w.Flush(); err != nil {
				fmt.Printf("ERR %v\n", err)
				os.Exit(1)
			}
			if w.Acked() != seq {
				fmt.Printf("ERR Acked() = %d after Flush of seq %d\n", w.Acked(), seq)
				os.Exit(1)
			}
		}
		if err := w.Err(); err != nil {
			fmt.Printf("ERR %v\n", err)
			os.Exit(1)
		}
		if a := w.Acked(); a > printed {
			// Unbuffered: the line is in the pipe before the next record.
			fmt.Printf("ACK %d\n", a)
			printed = a
		}
	}
	fmt.Println("ERR the parent never killed this child")
	os.Exit(1)
}

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the crash test")
	}
	for _, pol := range []SyncPolicy{SyncEveryBatch, SyncOnClose} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.v=false")
			cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSyncEnv+"="+pol.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var once sync.Once
			var killed atomic.Bool
			kill := func() {
				once.Do(func() {
					killed.Store(true)
					_ = cmd.Process.Kill() // SIGKILL on Unix
				})
			}
			timer := time.AfterFunc(90*time.Second, kill)
			defer timer.Stop()
			var maxAck uint64
			acks := 0
			var errLine string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "ACK "):
					seq, err := strconv.ParseUint(strings.TrimPrefix(line, "ACK "), 10, 64)
					if err != nil {
						t.Fatalf("child printed %q", line)
					}
					if seq <= maxAck {
						t.Fatalf("acks out of order: %d after %d", seq, maxAck)
					}
					maxAck = seq
					if acks++; acks == crashAcks {
						// Kill at a random moment a little later, so
						// the child dies anywhere in a batch or commit.
						time.AfterFunc(time.Duration(rand.IntN(20000))*time.Microsecond, kill)
					}
				case strings.HasPrefix(line, "ERR "):
					errLine = line
				}
			}
			// The scan read every line the child wrote before it died, so
			// maxAck is the highest acknowledged seq.
			_ = cmd.Wait()
			if errLine != "" {
				t.Fatalf("child: %s", errLine)
			}
			if !killed.Load() || acks < crashAcks {
				t.Fatalf("child ended after %d acks without being killed", acks)
			}

			// A killed writer leaves no end-of-run record: readers refuse
			// the run unless asked for partial runs.
			var inc *IncompleteError
			if _, err := Open(dir); !errors.As(err, &inc) || inc.Missing != "end-of-run record" {
				t.Fatalf("Open after SIGKILL = %v, want an *IncompleteError for the missing end-of-run record", err)
			}
			r, err := OpenWith(dir, OpenOptions{Partial: true})
			if err != nil {
				t.Fatalf("Open (partial) after SIGKILL: %v", err)
			}
			if r.Partial() == "" {
				t.Fatal("Partial() is empty for a killed run")
			}
			defer r.Close()
			if m := r.Meta(); m.Arm != "crash" {
				t.Fatalf("Meta = %+v", m)
			}
			next := uint64(0)
			err = r.Replay(func(rec *event.Record) error {
				if rec.Seq != next {
					return fmt.Errorf("seq %d where %d was expected: a gap", rec.Seq, next)
				}
				if rec.Seq > 0 {
					if want := crashRecord(rec.Seq); *rec != want {
						return fmt.Errorf("seq %d torn or altered:\n got %+v\nwant %+v", rec.Seq, trunc(*rec), trunc(want))
					}
				} else if rec.Kind != event.KindRunMeta {
					return fmt.Errorf("seq 0 is %s", rec.Kind)
				}
				next++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			last := next - 1
			if last < maxAck {
				t.Fatalf("journal ends at seq %d but the child acknowledged seq %d", last, maxAck)
			}
			t.Logf("%s: killed after %d acks; highest acked seq %d, journal holds seqs 0..%d (%d unacknowledged survived)",
				pol, acks, maxAck, last, last-maxAck)
			if _, err := Create(dir, testMeta("again", 1), Options{}); err == nil {
				t.Fatal("Create over a crashed journal succeeded")
			}
		})
	}
}
