package sim

import (
	"container/list"

	eng "github.com/narwhal-bench/narwhal-bench/engine"
)

// PrefixCache configures each engine's prefix cache: KV blocks of prompts
// it prefilled, kept by shared-prefix group, least recently used first out.
// A prompt whose group is cached skips computing the cached tokens (its
// last token always computes).
type PrefixCache struct {
	// Enabled turns the cache on for the run.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// PrefixCache sizes it (the fleet file's prefix_cache).
	eng.PrefixCache
}

// DefaultPrefixCache is the cache a run gets when it enables one without
// sizing it.
var DefaultPrefixCache = PrefixCache{Enabled: true, PrefixCache: eng.DefaultPrefixCache}

// prefixCache is one engine's LRU of prefix groups.
type prefixCache struct {
	cfg   PrefixCache
	used  int64
	lru   *list.List // front = most recent; values are *cacheEntry
	index map[int64]*list.Element
	hits  int64 // tokens served from the cache
}

type cacheEntry struct {
	group  int64
	tokens int64 // the group's cached prefix
	// cost is what the entry adds to the cache's use: its tokens, or,
	// when it extends its parent's blocks (a later turn's path over the
	// earlier turn's: insertAfter), only the blocks past them.
	cost   int64
	parent int64 // the group whose blocks it extends, or 0 (by name, so that a clone's entries find the clone's)
}

func newPrefixCache(cfg PrefixCache) *prefixCache {
	return &prefixCache{cfg: cfg, lru: list.New(), index: map[int64]*list.Element{}}
}

// lookup returns how many of a prompt's prefix tokens are cached (whole
// blocks, at most want) and marks the group recently used (and the
// entries whose blocks it extends, as reading a prefix reads its blocks).
func (c *prefixCache) lookup(group int64, want int) int {
	if group == 0 || want <= 0 {
		return 0
	}
	el, ok := c.index[group]
	if !ok {
		return 0
	}
	c.touch(el)
	n := min(el.Value.(*cacheEntry).tokens, int64(want))
	return int(n - n%int64(c.cfg.BlockTokens))
}

// touch marks el most recently used, then the entries it extends, each
// ahead of the one after it: an entry is never older than one extending
// it, so the least recently used is evicted first and a prefix outlives
// the paths built on it, as a block cache evicts a sequence's tail first.
func (c *prefixCache) touch(el *list.Element) {
	for n := 0; el != nil && n < maxChain; n++ {
		c.lru.MoveToFront(el)
		p := el.Value.(*cacheEntry).parent
		if p == 0 {
			return
		}
		el = c.index[p] // nil once evicted
	}
}

// maxChain bounds the entries touch walks (a conversation's turns): a
// cycle of names, which the importer never makes, cannot loop.
const maxChain = 1 << 10

// insert records that a prompt of group with prefix tokens was prefilled
// here, evicting least recently used groups beyond capacity.
func (c *prefixCache) insert(group int64, prefix int) {
	c.insertAfter(group, prefix, 0)
}

// insertAfter is insert for a group whose blocks extend those of the
// group after (0: none), as a conversation's turn extends the turn before:
// while after is cached here, the group costs only its own blocks past
// after's.
func (c *prefixCache) insertAfter(group int64, prefix int, after int64) {
	if group == 0 {
		return
	}
	tokens := int64(prefix) - int64(prefix)%int64(c.cfg.BlockTokens)
	if tokens <= 0 || tokens > c.cfg.CapacityTokens {
		return
	}
	if el, ok := c.index[group]; ok {
		e := el.Value.(*cacheEntry)
		if tokens > e.tokens {
			c.used += tokens - e.tokens
			e.cost += tokens - e.tokens
			e.tokens = tokens
		}
		c.touch(el)
	} else {
		e := &cacheEntry{group: group, tokens: tokens, cost: tokens}
		if pe, ok := c.index[after]; ok && after != 0 && after != group {
			if p := pe.Value.(*cacheEntry); p.tokens <= tokens {
				e.parent, e.cost = after, tokens-p.tokens
			}
		}
		c.index[group] = c.lru.PushFront(e)
		c.used += e.cost
		c.touch(c.index[group])
	}
	for c.used > c.cfg.CapacityTokens {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.index, e.group)
		c.used -= e.cost
	}
}
