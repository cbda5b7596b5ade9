package live

import (
	"container/list"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// prefixIndex is the router's picture of the engines' prefix caches when
// they keep them (Config.PrefixCache): for each prompt block it has
// placed (the chained block hashes of api.BlockHashes), the engine that
// last prefilled a prompt holding it, the most recently used prefixCap
// blocks. A block's hash covers every block before it, so the engine of
// the deepest block a new prompt shares with earlier ones holds that
// whole prefix (unless its own cache let it go): the core prices the
// prompt's prefill there as T(n) − T(prefix) and elsewhere in full
// (core.Request's CachedOn and CachedTokens), as the simulator prices the
// engine that last took the prompt's prefix group. Prompts that share an
// opening (one system prompt) and part ways later share only the
// opening's blocks here. Only the owner goroutine uses it.
type prefixIndex struct {
	block  int
	lru    *list.List // front = most recent; values are *blockAt
	blocks map[uint64]*list.Element
}

type blockAt struct {
	hash uint64
	inst event.Instance
}

// prefixCap bounds the blocks remembered: 4 M tokens of 16-token blocks,
// more than a fleet's default caches hold (200,000 tokens an engine).
const prefixCap = 1 << 18

func newPrefixIndex(block int) *prefixIndex {
	return &prefixIndex{block: block, lru: list.New(), blocks: map[uint64]*list.Element{}}
}

// lookup returns where a prompt with these block hashes finds its longest
// cached prefix and how many tokens it is (0: nowhere), and the prefix
// group and length the simulator's model takes (core.Request's
// PrefixGroup and PrefixTokens, for the controllers' rehearsals): the
// group is the prompt's first block, and its prefix the blocks it shares,
// or all its full blocks when it shares none (so that its group is
// remembered where it is placed).
func (x *prefixIndex) lookup(hashes []uint64) (on event.Instance, cached int, group int64, prefix int) {
	on = event.NoInstance
	if len(hashes) == 0 {
		return on, 0, 0, 0
	}
	k := 0
	for k < len(hashes) {
		el, ok := x.blocks[hashes[k]]
		if !ok {
			break
		}
		on = el.Value.(*blockAt).inst
		k++
	}
	group = int64(hashes[0] >> 1) // >= 0
	if group == 0 {
		group = 1
	}
	prefix = k * x.block
	if k == 0 {
		prefix = len(hashes) * x.block
	}
	return on, k * x.block, group, prefix
}

// placed records that the engine inst prefills a prompt with these block
// hashes: it will hold them all.
func (x *prefixIndex) placed(hashes []uint64, inst event.Instance) {
	for i := len(hashes) - 1; i >= 0; i-- { // the head ends most recent
		h := hashes[i]
		if el, ok := x.blocks[h]; ok {
			el.Value.(*blockAt).inst = inst
			x.lru.MoveToFront(el)
			continue
		}
		x.blocks[h] = x.lru.PushFront(&blockAt{hash: h, inst: inst})
	}
	for x.lru.Len() > prefixCap {
		el := x.lru.Back()
		x.lru.Remove(el)
		delete(x.blocks, el.Value.(*blockAt).hash)
	}
}

// prefixHashes is what the index needs of a request: its block hashes,
// when the router is prefix-aware.
func (r *Router) prefixHashes(req *api.Request, input int) []uint64 {
	if r.cfg.PrefixCache == nil {
		return nil
	}
	return api.BlockHashes(req, input, r.cfg.PrefixCache.BlockTokens)
}
