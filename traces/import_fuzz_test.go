package traces

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// FuzzMooncake checks that the Mooncake importer never panics, that every
// problem names the file, and that whatever it accepts replays well-formed
// at any scale, alone and concatenated.
func FuzzMooncake(f *testing.F) {
	for _, s := range []string{
		okRow + "\n",
		`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]}
{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 60]}
{"timestamp": 29000.5, "input_length": 512, "output_length": 1e2, "hash_ids": [46], "session_id": "s"}
`,
		"\xef\xbb\xbf" + okRow + "\r\n\r\n" + `{"timestamp": 0.0000001, "input_length": 1, "output_length": 1, "hash_ids": [1]}`,
		`{"timestamp": 3600000000, "input_length": 10000000, "output_length": 1, "hash_ids": [-1, 9223372036854775807]}` + "\n" + okRow,
		`{"timestamp": 1, "input_length": 5,` + "\n[]\n{}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seg, err := parseMooncake(bytes.NewReader(data), 0, "f.jsonl", "f", 0)
		checkFuzzImport(t, "f.jsonl", seg, err)
	})
}

// FuzzAzure is FuzzMooncake for the Azure CSV importer.
func FuzzAzure(f *testing.F) {
	if file, err := os.Open("azure/conv.csv"); err == nil {
		var sb strings.Builder
		sc := bufio.NewScanner(file)
		for i := 0; i < 20 && sc.Scan(); i++ {
			sb.WriteString(sc.Text() + "\r\n")
		}
		file.Close()
		f.Add([]byte(sb.String()))
	}
	for _, s := range []string{
		azureHeaderLine + "\n" + azureOKRow + "\n",
		"GeneratedTokens,TIMESTAMP,ContextTokens\r\n44,2023-11-16 18:15:46.6805900,374\r\n\r\n0,2023-11-16 18:15:46.000000001,0",
		azureHeaderLine + "\n2023-11-16 18:00:02,30,3\n2023-11-16 18:00:00,10,1\n2023-11-16 18:00:00,20,2\n",
		azureHeaderLine + "\n2023-11-16 18:15:46.6805900,37a,44\n1,2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seg, err := parseAzure(bytes.NewReader(data), 0, "f.csv", "f", 0)
		checkFuzzImport(t, "f.csv", seg, err)
	})
}

func checkFuzzImport(t *testing.T, source string, seg *segment, err error) {
	t.Helper()
	if err != nil {
		if seg != nil {
			t.Fatal("segment and error")
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, source+":") || strings.Contains(line, "internal error") {
				t.Fatalf("bad error line %q", line)
			}
		}
		return
	}
	if len(seg.reqs) == 0 || seg.reqs[0].At != 0 || seg.gap < 1 {
		t.Fatalf("segment: %d requests, gap %v", len(seg.reqs), seg.gap)
	}
	for i, r := range seg.reqs {
		if i > 0 && r.At < seg.reqs[i-1].At || r.Class != "f" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	n := len(seg.reqs)
	for _, segs := range [][]*segment{{seg}, {seg, seg}} {
		tr, err := assemble(segs, "")
		if err != nil {
			if len(segs) == 2 && strings.Contains(err.Error(), "expected at most") {
				continue // twice the span is too long
			}
			t.Fatalf("assemble: %v", err)
		}
		for _, scale := range []float64{1, 0.25, 7.5, 1e9, 1e300} {
			reqs, err := tr.Generate(1, scale)
			if err != nil {
				t.Fatalf("scale %v: %v", scale, err)
			}
			if len(reqs) != n*len(segs) {
				t.Fatalf("scale %v: %d requests", scale, len(reqs))
			}
			checkImported(t, tr, reqs, scale)
			if len(segs) == 2 {
				b := tr.Bounds(scale)
				if reqs[n-1].At >= b[1] || reqs[n].At < b[1] {
					t.Fatalf("scale %v: segments cross bound %v: %v, %v", scale, b[1], reqs[n-1].At, reqs[n].At)
				}
			}
		}
	}
}
