package stub

import (
	"container/list"
)

// prefixCache is one stub engine's prefix cache, kept as vLLM's v1 keeps
// its (automatic prefix caching): the prompt cut into blocks of
// BlockTokens tokens, each full block named by a hash chained over the
// blocks before it (api.BlockHashes), so a block matches only when the whole prefix up to
// it does. A prompt is served from the cache for its longest run of
// cached leading blocks, never its last token (vLLM's max cache hit
// length is the prompt less one token); its full blocks are cached when
// its prefill ends. Blocks leave least recently used first; a prompt's
// blocks are touched last to first, so its tail leaves before its head,
// as vLLM frees a request's blocks in reverse order.
//
// Unlike vLLM's, the cache has its own capacity (the fleet's
// prefix_cache.capacity_tokens, as the simulator's) rather than the KV
// pool's free blocks. The simulator keeps a shared-prefix group's prefix
// only (sim --prefix-cache); this cache keeps every full block, so with a
// capacity near the working set it holds fewer groups than the
// simulator's. Only the owner goroutine uses it.
type prefixCache struct {
	block  int // tokens per block
	blocks int // capacity in blocks
	lru    *list.List
	index  map[uint64]*list.Element
}

func newPrefixCache(blockTokens int, capacityTokens int64) *prefixCache {
	return &prefixCache{block: blockTokens, blocks: int(capacityTokens / int64(blockTokens)),
		lru: list.New(), index: map[uint64]*list.Element{}}
}

// match returns how many of a prompt of n tokens with these block hashes
// the cache holds (whole leading blocks, at most n-1 tokens), and marks
// them recently used.
func (c *prefixCache) match(hashes []uint64, n int) int {
	most := min(len(hashes), (n-1)/c.block)
	k := 0
	for k < most {
		if _, ok := c.index[hashes[k]]; !ok {
			break
		}
		k++
	}
	for i := k - 1; i >= 0; i-- {
		c.lru.MoveToFront(c.index[hashes[i]])
	}
	return k * c.block
}

// insert caches a prefilled prompt's blocks, evicting the least recently
// used beyond capacity.
func (c *prefixCache) insert(hashes []uint64) {
	if c.blocks == 0 {
		return
	}
	if len(hashes) > c.blocks {
		hashes = hashes[:c.blocks]
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		if el, ok := c.index[hashes[i]]; ok {
			c.lru.MoveToFront(el)
			continue
		}
		c.index[hashes[i]] = c.lru.PushFront(hashes[i])
	}
	for c.lru.Len() > c.blocks {
		el := c.lru.Back()
		c.lru.Remove(el)
		delete(c.index, el.Value.(uint64))
	}
}
