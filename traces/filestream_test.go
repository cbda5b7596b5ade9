package traces

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mooncakeFixture is a Mooncake file of n rows with shared block prefixes,
// rows without hash_ids, an unknown field, and, when swaps, some rows out
// of time order.
func mooncakeFixture(seed uint64, n int, swaps bool) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var rows []string
	ms := 0.0
	for i := range n {
		ms += float64(rng.IntN(400)) + 0.25
		in := 1 + rng.IntN(6000)
		blocks := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens
		base := 1000 * rng.IntN(4)
		shared := rng.IntN(blocks + 1)
		var ids []string
		for j := range blocks {
			if j < shared {
				ids = append(ids, fmt.Sprint(base+j))
			} else {
				ids = append(ids, fmt.Sprint(100000+20*i+j))
			}
		}
		line := fmt.Sprintf(`{"timestamp": %g, "input_length": %d, "output_length": %d`, ms, in, 1+rng.IntN(400))
		switch i % 9 {
		case 0:
			line += `, "session": "s"}`
		case 1:
			line += `}`
		default:
			line += `, "hash_ids": [` + strings.Join(ids, ", ") + `]}`
		}
		rows = append(rows, line)
	}
	if swaps {
		for k := 1; k+1 < len(rows); k += 13 {
			rows[k], rows[k+1] = rows[k+1], rows[k]
		}
	}
	return strings.Join(rows, "\n") + "\n"
}

// azureFixture is the first n rows of the shipped code.csv, with some rows
// out of time order when swaps.
func azureFixture(t *testing.T, n int, swaps bool) string {
	data, err := os.ReadFile("azure/code.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\r\n"), "\n")
	lines = lines[:min(n+1, len(lines))]
	if swaps {
		for k := 2; k+1 < len(lines); k += 17 {
			lines[k], lines[k+1] = lines[k+1], lines[k]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// memoryTrace is the trace of paths read whole into memory, as Open did
// before imported traces streamed from their files: the reference.
func memoryTrace(t *testing.T, paths ...string) *Trace {
	t.Helper()
	h := sha256.New()
	var segs []*segment
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(data)
		var seg *segment
		if formatOf(p) == FormatMooncake {
			seg, err = parseMooncake(bytes.NewReader(data), 0, p, classOf(p), i)
		} else {
			seg, err = parseAzure(bytes.NewReader(data), 0, p, classOf(p), i)
		}
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, seg)
	}
	tr, err := assemble(segs, hex.EncodeToString(h.Sum(nil)))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// An imported file whose rows are in time order is streamed from disk:
// Open keeps no request of it, and Stream and Generate hand out exactly
// what the in-memory import does (Mooncake prefix groups included), alone
// and concatenated, at every scale, batched or not. A file that had to be
// sorted is held in memory, with the same requests.
func TestStreamFromFile(t *testing.T) {
	dir := t.TempDir()
	mc := writeFile(t, dir, "mc.jsonl", mooncakeFixture(1, 2500, false))
	mc2 := writeFile(t, dir, "mc2.jsonl", mooncakeFixture(2, 1500, false))
	mcu := writeFile(t, dir, "mcu.jsonl", mooncakeFixture(3, 1500, true))
	az := writeFile(t, dir, "az.csv", azureFixture(t, 3000, false))
	azu := writeFile(t, dir, "azu.csv", azureFixture(t, 3000, true))
	cases := []struct {
		paths    []string
		inMemory []bool // per segment
	}{
		{[]string{az}, []bool{false}},
		{[]string{mc}, []bool{false}},
		{[]string{"azure/code.csv"}, []bool{false}},
		{[]string{azu}, []bool{true}},
		{[]string{mcu}, []bool{true}},
		{[]string{mc, mc2, mc}, []bool{false, false, false}},
		{[]string{az, mcu, mc, azu, az}, []bool{false, true, false, true, false}},
	}
	for _, c := range cases {
		arg := strings.Join(c.paths, "+")
		fds := openFDs(t)
		tr := mustOpen(t, arg, "")
		ref := memoryTrace(t, c.paths...)
		if tr.Hash() != ref.Hash() || tr.Name != ref.Name || tr.MeanRate() != ref.MeanRate() ||
			!reflect.DeepEqual(tr.Notes(), ref.Notes()) || !reflect.DeepEqual(tr.Bounds(1), ref.Bounds(1)) {
			t.Fatalf("%s: trace %s %s rate %v notes %q, in memory %s %s rate %v notes %q", arg,
				tr.Name, tr.Hash(), tr.MeanRate(), tr.Notes(), ref.Name, ref.Hash(), ref.MeanRate(), ref.Notes())
		}
		for i, s := range tr.segs {
			if got := s.reqs != nil; got != c.inMemory[i] || (s.src == nil) != c.inMemory[i] {
				t.Errorf("%s: segment %d in memory %v, want %v", arg, i, got, c.inMemory[i])
			}
		}
		grouped := 0
		for _, batch := range []float64{0, 4} {
			bt, err := tr.WithBurst(0, batch)
			if err != nil {
				t.Fatal(err)
			}
			br, err := ref.WithBurst(0, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, scale := range []float64{0.5, 1, 3.7} {
				want, err := br.Generate(1, scale)
				if err != nil {
					t.Fatal(err)
				}
				got := mustReplay(t, bt, scale)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s batch %v scale %v: Generate differs from the in-memory import", arg, batch, scale)
				}
				st, err := bt.Stream(1, scale)
				if err != nil {
					t.Fatal(err)
				}
				if got := collect(t, st); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s batch %v scale %v: Stream differs from the in-memory import", arg, batch, scale)
				}
				for _, r := range got {
					if r.PrefixGroup != 0 {
						grouped++
					}
				}
			}
		}
		if strings.Contains(arg, ".jsonl") && grouped == 0 {
			t.Errorf("%s: no prefix groups", arg)
		}
		if got := openFDs(t); got != fds {
			t.Errorf("%s: %d files open after Open, Generate and Stream, %d before", arg, got, fds)
		}
	}
}

// Input that cannot be read twice (a named pipe here) is imported into
// memory in one pass, as before.
func TestStreamPipeInMemory(t *testing.T) {
	dir := t.TempDir()
	src := azureFixture(t, 500, false)
	file := writeFile(t, dir, "ref.csv", src)
	fifo := filepath.Join(t.TempDir(), "ref.csv") // the same class
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.WriteString(src)
		w.Close()
	}()
	tr := mustOpen(t, fifo, "")
	if tr.segs[0].src != nil || tr.segs[0].reqs == nil {
		t.Fatal("a pipe's requests are not held in memory")
	}
	ref := mustOpen(t, file, "")
	if tr.Hash() != ref.Hash() || !reflect.DeepEqual(mustReplay(t, tr, 2), mustReplay(t, ref, 2)) {
		t.Fatal("a pipe imports other requests than the same bytes in a file")
	}
}

// A file changed after Open stops the stream with an error that names it
// and says what was expected: changed size or time at Stream, a row that
// no longer parses, different bytes of the same size and time (SHA-256),
// a file deleted.
func TestStreamFileChanged(t *testing.T) {
	orig := mooncakeFixture(4, 800, false)
	same := func(path string, content string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	// A digit changed near the end: same size, parses, other bytes.
	i := strings.LastIndex(orig, `"output_length": `) + len(`"output_length": `)
	d := orig[i]
	if d == '9' {
		d = '1'
	} else {
		d++
	}
	edited := orig[:i] + string(d) + orig[i+1:]
	// A row that no longer parses, same size.
	j := strings.Index(orig[100:], `"input_length"`) + 100
	broken := orig[:j] + `"input_lengtx"` + orig[j+len(`"input_length"`):]
	cases := []struct {
		name   string
		change func(path string, mod time.Time)
		atOpen bool // found at Stream (size, time, deletion)
		want   []string
	}{
		{"longer", func(p string, _ time.Time) { os.WriteFile(p, []byte(orig+okRow+"\n"), 0o644) }, true,
			[]string{"changed since the trace was opened", fmt.Sprintf("now %d bytes", len(orig)+len(okRow)+1), fmt.Sprintf("expected the file as it was then, %d bytes", len(orig))}},
		{"touched", func(p string, mod time.Time) { os.Chtimes(p, mod.Add(time.Second), mod.Add(time.Second)) }, true,
			[]string{"changed since the trace was opened", "modified"}},
		{"deleted", func(p string, _ time.Time) { os.Remove(p) }, true,
			[]string{"cannot read it again to stream its requests", "no such file", "expected the file as it was when the trace was opened"}},
		{"edited", func(p string, mod time.Time) { same(p, edited, mod) }, false,
			[]string{"changed since the trace was opened (SHA-256 now", "expected the file as it was then"}},
		{"broken", func(p string, mod time.Time) { same(p, broken, mod) }, false,
			[]string{"changed since the trace was opened", "m.jsonl:2: input_length: missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "m.jsonl", orig)
			st0, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			tr := mustOpen(t, path, "")
			fds := openFDs(t)
			// A stream started before the change reads the file as it was.
			before, err := tr.Stream(1, 1)
			if err != nil {
				t.Fatal(err)
			}
			var r Request
			if !before.Next(&r) {
				t.Fatal(before.Err())
			}
			c.change(path, st0.ModTime())
			for before.Next(&r) {
			}
			switch err := before.Err(); {
			case c.name == "deleted" || c.name == "touched":
				// It holds the file open: its bytes are the same.
				if err != nil {
					t.Fatalf("a stream that opened the file before it was %s: %v", c.name, err)
				}
			case err != nil && !strings.Contains(err.Error(), "changed since the trace was opened"):
				// It may have read the changed bytes, or not.
				t.Fatalf("a stream that opened the file before it changed: %v", err)
			}
			before.Close()
			if got := openFDs(t); got != fds {
				t.Fatalf("%d files open after the stream, %d before", got, fds)
			}

			st, err := tr.Stream(1, 1)
			if c.atOpen {
				if err == nil {
					t.Fatal("Stream: no error")
				}
				for _, w := range append(c.want, path) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Stream: %v\nwant %q", err, w)
					}
				}
				if _, err := tr.Generate(1, 1); err == nil {
					t.Error("Generate: no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for st.Next(&r) {
				n++
			}
			err = st.Err()
			if err == nil {
				t.Fatalf("%d requests streamed and no error", n)
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Err: %v\nwant %q", err, w)
				}
			}
			if st.Next(&r) {
				t.Error("Next after an error")
			}
			if reqs, err := tr.Generate(1, 1); err == nil || reqs != nil {
				t.Errorf("Generate: %d requests, error %v", len(reqs), err)
			}
			if got := openFDs(t); got != fds {
				t.Errorf("%d files open after the failed streams, %d before", got, fds)
			}
		})
	}
}

// A stream closed before its end releases its file; an unread stream
// holds none.
func TestStreamClose(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.jsonl", mooncakeFixture(5, 300, false))
	b := writeFile(t, dir, "b.csv", azureFixture(t, 300, false))
	tr := mustOpen(t, a+"+"+b, "")
	fds := openFDs(t)
	var streams []*Stream
	for k := range 40 {
		st, err := tr.Stream(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		var r Request
		for i := 0; i < k*10 && st.Next(&r); i++ {
		}
		streams = append(streams, st)
	}
	if got := openFDs(t); got > fds+40 {
		t.Fatalf("%d files open for 40 streams, %d before: want at most one a stream", got, fds)
	}
	for _, st := range streams {
		st.Close()
		st.Close()
		var r Request
		if st.Next(&r) || st.Err() != nil {
			t.Fatalf("after Close: Next or Err %v", st.Err())
		}
	}
	if _, err := tr.Stream(1, 1); err != nil { // never read: opens nothing
		t.Fatal(err)
	}
	runtime.GC()
	if got := openFDs(t); got != fds {
		t.Fatalf("%d files open after Close, %d before", got, fds)
	}
}

// FuzzStreamFromFile checks that a file streamed from disk gives what the
// in-memory import of the same bytes gives: the same error, or the same
// notes and requests.
func FuzzStreamFromFile(f *testing.F) {
	f.Add([]byte(mooncakeFixture(6, 20, false)), true)
	f.Add([]byte(mooncakeFixture(7, 20, true)), true)
	f.Add([]byte(azureHeaderLine+"\n"+azureOKRow+"\n2023-11-16 18:15:47,0,3\n2023-11-16 18:15:45.5,9,0\n"), false)
	f.Add([]byte(azureHeaderLine+"\n"+azureOKRow+"\n1,2\n"), false)
	// Out of order and too long: the span error, not a change.
	f.Add([]byte(azureHeaderLine+"\n2070-01-01 00:00:00,0,0\n2000-01-01 00:00:00,0,0"), false)
	f.Fuzz(func(t *testing.T, data []byte, mooncake bool) {
		name := "f.csv"
		if mooncake {
			name = "f.jsonl"
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := Open(path, "")
		var seg *segment
		var rerr error
		if mooncake {
			seg, rerr = parseMooncake(bytes.NewReader(data), 0, path, "f", 0)
		} else {
			seg, rerr = parseAzure(bytes.NewReader(data), 0, path, "f", 0)
		}
		if (err == nil) != (rerr == nil) || err != nil && err.Error() != rerr.Error() {
			t.Fatalf("Open: %v\nin memory: %v", err, rerr)
		}
		if err != nil {
			return
		}
		ref, err := assemble([]*segment{seg}, tr.Hash())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tr.Notes(), ref.Notes()) {
			t.Fatalf("notes %q, in memory %q", tr.Notes(), ref.Notes())
		}
		got, err := tr.Generate(1, 1.5)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Generate(1, 1.5)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("streamed %v\nin memory %v", got, want)
		}
	})
}
