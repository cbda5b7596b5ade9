package traces

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkOpenAzureConv imports the shipped Azure conversation trace
// (19,366 rows) from disk, hashing included.
func BenchmarkOpenAzureConv(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open("azure/conv.csv", ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/19366, "ns/row")
}

// BenchmarkParseMooncake parses 20,000 Mooncake rows of 16 hash_ids each,
// half of them sharing a leading run with an earlier row.
func BenchmarkParseMooncake(b *testing.B) {
	const rows = 20_000
	var sb strings.Builder
	for i := range rows {
		ids := make([]string, 16)
		for j := range ids {
			id := i*16 + j
			if i%2 == 1 && j < 8 {
				id = (i%50)*16 + j // shares 8 blocks with an earlier row
			}
			ids[j] = fmt.Sprint(id)
		}
		fmt.Fprintf(&sb, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`+"\n",
			i*50, 16*512-i%100, 1+i%300, strings.Join(ids, ", "))
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseMooncake(bytes.NewReader(data), int64(len(data)), "bench.jsonl", "bench", 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rows, "ns/row")
}

// BenchmarkReplayImported replays the 28,185 requests of code+conv at
// scale 2.
func BenchmarkReplayImported(b *testing.B) {
	tr, err := Open("azure/code.csv+azure/conv.csv", "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Generate(1, 2); err != nil {
			b.Fatal(err)
		}
	}
}
