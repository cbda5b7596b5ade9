package loadgen

import (
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/narwhal-bench/narwhal-bench/live/api"
)

// promptWords are the words prompts are made of.
var promptWords = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there one all we their has been would when who will more if
no out so said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know while last
might us great old year off come since against go came right used take three`)

// baseLen is the length of each seed's base text that prompts are cut
// from (1 MiB: 262,144 tokens).
const baseLen = 1 << 20

var bases sync.Map // seed -> string

// base is seed's base text: words drawn by a PCG seeded with seed,
// separated by single spaces.
func base(seed uint64) string {
	if b, ok := bases.Load(seed); ok {
		return b.(string)
	}
	r := rand.New(rand.NewPCG(seed, 0x6e617277))
	var b strings.Builder
	b.Grow(baseLen + 16)
	for b.Len() < baseLen {
		b.WriteString(promptWords[r.IntN(len(promptWords))])
		b.WriteByte(' ')
	}
	s := b.String()[:baseLen]
	bases.Store(seed, s)
	return s
}

// PromptText is request index's prompt of the given length in tokens: a
// deterministic function of (seed, index, tokens), English words, exactly
// tokens·api.CharsPerToken bytes, so the router's and the stubs' estimate
// (live/api: bytes/4, rounded) is exactly tokens. A real tokenizer counts
// these words at about one token per 4-5 bytes.
func PromptText(seed uint64, index, tokens int) string {
	return SaltedPromptText(seed, 0, index, tokens)
}

// SaltedPromptText is PromptText cut at another place of the same text for
// each salt: salt 0 is PromptText.
func SaltedPromptText(seed, salt uint64, index, tokens int) string {
	return cut(base(seed), int(mix(seed^salt, uint64(index))%uint64(baseLen)), tokens*int(api.CharsPerToken))
}

// groupSalt keeps a prefix group's text apart from request index's.
const groupSalt = 0x70726566697867 // "prefixg"

// SharedPromptText is request index's prompt of the given length in tokens
// whose first prefix tokens are its prefix group's, the same text in every
// prompt of the group (and salt): a server's prefix cache sees what the
// trace's shared prefixes mean. The rest is SaltedPromptText's, index's
// own. Group 0 or prefix 0 is SaltedPromptText; prefix is clipped to
// tokens. Still exactly tokens·api.CharsPerToken bytes.
func SharedPromptText(seed, salt uint64, index, tokens int, group int64, prefix int) string {
	prefix = min(prefix, tokens)
	if group == 0 || prefix <= 0 {
		return SaltedPromptText(seed, salt, index, tokens)
	}
	head := groupHead(seed, salt, group, prefix)
	if prefix == tokens {
		return head
	}
	return head + SaltedPromptText(seed, salt, index, tokens-prefix)
}

// groupHead is the first tokens of prefix group's shared text.
func groupHead(seed, salt uint64, group int64, tokens int) string {
	return cut(base(seed), int(mix(seed^salt^groupSalt, uint64(group))%uint64(baseLen)), tokens*int(api.CharsPerToken))
}

// turnTexts writes the prompts of a plan whose items leave groups cached
// (Item.CacheGroup: imported Mooncake conversations): a prompt whose
// prefix group an earlier item left is that item's own text for the
// prefix's length, so a conversation's next turn begins with the text of
// the turn before, as it does in the trace, and an engine's prefix cache
// finds it. Other prompts are SharedPromptText's. prompt registers each
// item as it writes it, in plan order, so a prompt reads only earlier items.
type turnTexts struct {
	seed, salt uint64
	plan       []Item
	made       map[int64]int // group -> the first item that leaves it cached
}

// prompt is item i's prompt, and registers the group it leaves.
func (x *turnTexts) prompt(i int) string {
	it := &x.plan[i]
	var text string
	if c, ok := x.made[it.PrefixGroup]; ok && it.PrefixGroup != 0 && it.PrefixTokens > 0 && c < i {
		p := min(it.PrefixTokens, it.Input)
		var b strings.Builder
		b.Grow(it.Input * int(api.CharsPerToken))
		x.head(&b, it.PrefixGroup, p, i)
		if p < it.Input {
			b.WriteString(SaltedPromptText(x.seed, x.salt, i, it.Input-p))
		}
		text = b.String()
	} else {
		text = SharedPromptText(x.seed, x.salt, i, it.Input, it.PrefixGroup, it.PrefixTokens)
	}
	if g := it.CacheGroup; g != 0 {
		if x.made == nil {
			x.made = map[int64]int{}
		}
		if _, ok := x.made[g]; !ok {
			x.made[g] = i
		}
	}
	return text
}

// head writes the first tokens of the text of group g as item before
// sees it: the text of the earlier item that left g cached (its own
// prefix's text, then its own), else the group's shared text.
func (x *turnTexts) head(b *strings.Builder, g int64, tokens, before int) {
	c, ok := x.made[g]
	if !ok || c >= before || tokens > x.plan[c].Input {
		b.WriteString(groupHead(x.seed, x.salt, g, tokens))
		return
	}
	it := &x.plan[c]
	p := 0
	if it.PrefixGroup != 0 {
		p = min(it.PrefixTokens, it.Input)
	}
	if _, viaTurn := x.made[it.PrefixGroup]; p > 0 && viaTurn && x.made[it.PrefixGroup] < c {
		x.head(b, it.PrefixGroup, min(p, tokens), c)
	} else if p > 0 {
		b.WriteString(groupHead(x.seed, x.salt, it.PrefixGroup, min(p, tokens)))
	}
	if tokens > p {
		b.WriteString(SaltedPromptText(x.seed, x.salt, c, tokens-p))
	}
}

// cut is n bytes of b from off, wrapping around to b's start.
func cut(b string, off, n int) string {
	if off+n <= len(b) {
		return b[off : off+n]
	}
	var sb strings.Builder
	sb.Grow(n)
	for sb.Len() < n {
		chunk := b[off:]
		if rest := n - sb.Len(); len(chunk) > rest {
			chunk = chunk[:rest]
		}
		sb.WriteString(chunk)
		off = 0
	}
	return sb.String()
}

// mix is SplitMix64 over (seed, index).
func mix(seed, index uint64) uint64 {
	x := seed*0x9e3779b97f4a7c15 + index + 1
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}
