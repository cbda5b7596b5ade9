package api

import (
	"encoding/binary"
	"hash/fnv"
	"testing"
)

// The inline FNV-1a is hash/fnv's: each block's hash is FNV-1a over the
// previous hash's eight bytes (little-endian) then the block's bytes.
func TestBlockHashesAreFNV(t *testing.T) {
	text := ""
	for len(text) < 300 {
		text += "some words of a prompt "
	}
	r := &Request{Prompt: text}
	got := BlockHashes(r, 75, 16) // four 64-byte blocks
	var prev [8]byte
	for b := range 4 {
		h := fnv.New64a()
		h.Write(prev[:])
		h.Write([]byte(text[b*64 : (b+1)*64]))
		if got[b] != h.Sum64() {
			t.Fatalf("block %d: %x, want %x", b, got[b], h.Sum64())
		}
		binary.LittleEndian.PutUint64(prev[:], got[b])
	}
	ids := &Request{PromptIDs: make([]int, 20)}
	h := fnv.New64a()
	h.Write(make([]byte, 8+16*8))
	if g := BlockHashes(ids, 20, 16); len(g) != 1 || g[0] != h.Sum64() {
		t.Fatalf("token ids: %x, want [%x]", g, h.Sum64())
	}
}
