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
	tokens int64
}

func newPrefixCache(cfg PrefixCache) *prefixCache {
	return &prefixCache{cfg: cfg, lru: list.New(), index: map[int64]*list.Element{}}
}

// lookup returns how many of a prompt's prefix tokens are cached (whole
// blocks, at most want) and marks the group recently used.
func (c *prefixCache) lookup(group int64, want int) int {
	if group == 0 || want <= 0 {
		return 0
	}
	el, ok := c.index[group]
	if !ok {
		return 0
	}
	c.lru.MoveToFront(el)
	n := min(el.Value.(*cacheEntry).tokens, int64(want))
	return int(n - n%int64(c.cfg.BlockTokens))
}

// insert records that a prompt of group with prefix tokens was prefilled
// here, evicting least recently used groups beyond capacity.
func (c *prefixCache) insert(group int64, prefix int) {
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
			e.tokens = tokens
		}
		c.lru.MoveToFront(el)
	} else {
		c.index[group] = c.lru.PushFront(&cacheEntry{group: group, tokens: tokens})
		c.used += tokens
	}
	for c.used > c.cfg.CapacityTokens {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.index, e.group)
		c.used -= e.tokens
	}
}
