package live

import "github.com/narwhal-bench/narwhal-bench/live/api"

// prefixIndex is the router's picture of the prompts' shared prefixes
// when the engines keep prefix caches (Config.PrefixCache): the chained
// block hashes (api.BlockHashes) of the prompts it has routed, the most
// recent prefixCap blocks. It gives each prompt what the core's
// prefix-aware placement prices (core.Request's PrefixGroup and
// PrefixTokens, as the simulator gives them from the trace): the group
// is the prompt's first block, and the prefix is how many of its leading
// blocks an earlier prompt had. A prompt sharing nothing yet counts all
// its full blocks as its prefix, so that the core remembers where it was
// prefilled and the next prompt of its group finds it. Like the
// simulator's groups, one first block names one group: prompts that share
// a first block and part ways later (one system prompt before different
// documents) are one group, priced by the longest prefix seen. Only the
// owner goroutine uses it.
type prefixIndex struct {
	block int
	seen  map[uint64]struct{}
	ring  []uint64
	next  int
}

// prefixCap bounds the blocks remembered: 4 M tokens of 16-token blocks,
// more than a fleet's default caches hold (200,000 tokens an engine), in
// some 12 MB.
const prefixCap = 1 << 18

func newPrefixIndex(block int) *prefixIndex {
	return &prefixIndex{block: block, seen: map[uint64]struct{}{}}
}

// place returns the prefix group and tokens of a prompt with these block
// hashes, and remembers its blocks.
func (x *prefixIndex) place(hashes []uint64) (group int64, tokens int) {
	if len(hashes) == 0 {
		return 0, 0
	}
	k := 0
	for k < len(hashes) {
		if _, ok := x.seen[hashes[k]]; !ok {
			break
		}
		k++
	}
	if k == 0 {
		k = len(hashes)
	}
	for _, h := range hashes {
		x.add(h)
	}
	group = int64(hashes[0] >> 1) // >= 0
	if group == 0 {
		group = 1
	}
	return group, k * x.block
}

func (x *prefixIndex) add(h uint64) {
	if _, ok := x.seen[h]; ok {
		return
	}
	if len(x.ring) < prefixCap {
		x.ring = append(x.ring, h)
	} else {
		delete(x.seen, x.ring[x.next])
		x.ring[x.next] = h
		x.next = (x.next + 1) % prefixCap
	}
	x.seen[h] = struct{}{}
}

// prefixHashes is what the index needs of a request: its block hashes,
// when the router is prefix-aware.
func (r *Router) prefixHashes(req *api.Request, input int) []uint64 {
	if r.cfg.PrefixCache == nil {
		return nil
	}
	return api.BlockHashes(req, input, r.cfg.PrefixCache.BlockTokens)
}
