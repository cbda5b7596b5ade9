package core

import (
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// placement index: Algorithm 1 in O(log instances) per leg.
//
// Algorithm 1 (arrow.go) scans its pool for the lexicographically least
// cost, and the least among costs meeting the SLO, first in index order on
// ties. On a fleet of one timing profile, a leg's cost on instance i is a
// monotone function of two of i's counters:
//
//	prefill leg: (DecodeTokens, PrefillWork + T(n))
//	decode leg:  (PrefillTokens, DecodeTokens + n + 1 - MT)
//
// so a segment tree per role holding the least of each counter over every
// subtree gives a lexicographic lower bound for the subtree's costs, and a
// left-to-right walk that skips subtrees whose bound cannot beat the best
// so far finds exactly the instance the scan finds (same cost, lowest
// index among equals), visiting O(log instances) nodes in the usual case.
// The costs themselves are computed the same way as the scan's, so the
// choice is bit-for-bit the same. An instance offline after a move has no
// leaf until the clock reaches its ReadyAt (settleOffline), as the scan's
// pool skips it. The index is used only while it is exact: no instance
// down, the role's pool not empty; otherwise Algorithm 1 scans.
//
// Prefix caching breaks the monotone cost on one instance only: a prompt
// is cheaper where its prefix is cached, and the core expects it cached
// on one instance at most (cachedInst). The index answers as if nothing
// were cached, and that one instance, priced with its cache, is then
// weighed against the answer: every other instance's cost is the one the
// index saw, so the least of the two is the scan's choice.

// indexMin is the least fleet size the index is used for: below it a scan
// is as cheap.
const indexMin = 24

// roleTree is a min segment tree over instance indices for one role.
type roleTree struct {
	size    int        // leaves, a power of two
	node    []treeNode // the root at 1, node k's children at 2k and 2k+1
	members int        // instances holding the role
}

// treeNode summarises the leaves below it: a, b is their lexicographically
// least (primary, secondary) pair, mb their least secondary counter (one
// struct, so a node is one memory access).
type treeNode struct{ a, b, mb float64 }

type placeIndex struct {
	// trees: 0 prefill, 1 decode, 2 the idle decode engines burst spill
	// may take (spillTree: one holding no decode streams, keyed by its
	// resident prefill work).
	trees [3]roleTree
	// prefill is the fleet's one profile's T(n) (PrefillSpan from 0), mt
	// its MT.
	mt float64
}

// spillTree is the index of the idle decode engines' tree (see spill).
const spillTree = 2

func treeFor(r event.Role) int {
	switch r {
	case event.RolePrefill:
		return 0
	case event.RoleDecode:
		return 1
	}
	return -1
}

// buildIndex builds the index when the fleet qualifies (one profile, no
// prefix affinity, enough instances); otherwise v.idx stays nil.
func (v *View) buildIndex() {
	v.idxTried = true
	if len(v.inst) < indexMin {
		return
	}
	p0 := v.inst[0].Profile
	for i := range v.inst {
		if v.inst[i].Profile != p0 {
			return
		}
	}
	x := &placeIndex{mt: p0.MaxTokens(v.tpotS)}
	size := 1
	for size < len(v.inst) {
		size *= 2
	}
	for t := range x.trees {
		tr := &x.trees[t]
		tr.size = size
		tr.node = make([]treeNode, 2*size)
		for k := range tr.node {
			tr.node[k] = treeNode{math.Inf(1), math.Inf(1), math.Inf(1)}
		}
	}
	v.idx = x
	for i := range v.inst {
		v.leaf(i)
	}
	for t := range x.trees {
		tr := &x.trees[t]
		for k := size - 1; k >= 1; k-- {
			tr.fix(k)
		}
	}
}

// leaf writes instance i's leaves (without fixing the nodes above) and
// reports, per tree, whether its leaf changed. An instance offline (a
// move's ReadyAt ahead) has none, as the scans skip it, until
// settleOffline writes it again.
func (v *View) leaf(i int) (changed [3]bool) {
	in := &v.inst[i]
	inf := math.Inf(1)
	nd := [3]treeNode{{inf, inf, inf}, {inf, inf, inf}, {inf, inf, inf}}
	role := in.Role
	if v.now < in.OfflineUntil {
		role = event.RoleNone
		v.noteOffline(event.Instance(i))
	}
	switch role {
	case event.RolePrefill:
		nd[0] = treeNode{float64(in.DecodeTokens), in.PrefillWork, in.PrefillWork}
	case event.RoleDecode:
		b := float64(in.DecodeTokens)
		nd[1] = treeNode{float64(in.PrefillTokens), b, b}
		if in.DecodeCount == 0 {
			nd[spillTree] = treeNode{0, in.PrefillWork, in.PrefillWork}
		}
	}
	for t := range v.idx.trees {
		tr := &v.idx.trees[t]
		p := &tr.node[tr.size+i]
		was, is := p.a != inf, nd[t].a != inf
		if is && !was {
			tr.members++
		} else if was && !is {
			tr.members--
		}
		changed[t] = nd[t] != *p
		*p = nd[t]
	}
	return changed
}

// merge summarises two sibling nodes into their parent.
func merge(l, r *treeNode) treeNode {
	a, b := l.a, l.b
	if r.a < a || (r.a == a && r.b < b) {
		a, b = r.a, r.b
	}
	return treeNode{a, b, min(l.mb, r.mb)}
}

// fix recomputes node k from its children; it reports whether it changed.
func (tr *roleTree) fix(k int) bool {
	nd := merge(&tr.node[2*k], &tr.node[2*k+1])
	if nd == tr.node[k] {
		return false
	}
	tr.node[k] = nd
	return true
}

// touch marks instance i changed for the fleet's totals and re-indexes it after
// its role or counters changed.
func (v *View) touch(i event.Instance) {
	v.fleet.mark(len(v.inst), i)
	if v.aidx != nil {
		v.argTouch(i)
	}
	if v.idx == nil {
		return
	}
	changed := v.leaf(int(i))
	for t := range v.idx.trees {
		if !changed[t] {
			continue // nothing above it can change
		}
		v.idx.trees[t].up(int(i))
	}
}

// up recomputes the nodes above leaf i from their children, up to the
// first that does not change (nothing above it can): fix's walk, in one
// loop, as every placement and every counter change pays it.
func (tr *roleTree) up(i int) {
	node := tr.node
	for k := (tr.size + i) / 2; k >= 1; k /= 2 {
		nd := merge(&node[2*k], &node[2*k+1])
		if nd == node[k] {
			return
		}
		node[k] = nd
	}
}

// noteOffline lists instance i as written offline (once).
func (v *View) noteOffline(i event.Instance) {
	in := &v.inst[i]
	if in.offListed {
		return // its OfflineUntil changed: settleOffline reads it then
	}
	in.offListed = true
	if len(v.offline) == 0 || in.OfflineUntil < v.offNext {
		v.offNext = in.OfflineUntil
	}
	v.offline = append(v.offline, i)
}

// settleOffline writes again the index leaves of the instances written
// offline whose ReadyAt the clock has reached, so the indexes hold every
// instance online now and none other (the scans' pools). It costs nothing
// until the earliest of them is due, then one pass over the list (a
// fleet-wide scale-up lists hundreds).
func (v *View) settleOffline() {
	if len(v.offline) == 0 || v.now < v.offNext {
		return
	}
	var due []event.Instance
	keep, next := v.offline[:0], event.Never
	for _, i := range v.offline {
		if in := &v.inst[i]; v.now < in.OfflineUntil {
			keep = append(keep, i)
			next = min(next, in.OfflineUntil)
		} else {
			in.offListed = false
			due = append(due, i)
		}
	}
	v.offline, v.offNext = keep, next
	for _, i := range due {
		v.touch(i)
	}
}

// setDown marks instance i down or up, keeping count of down instances.
func (v *View) setDown(i event.Instance, down bool) {
	in := &v.inst[i]
	if in.Down != down {
		if down {
			v.downs++
		} else {
			v.downs--
		}
	}
	in.Down = down
}

// indexed finds Algorithm 1's two choices for r's leg in pool want with the
// index, or reports false when the index does not apply now.
func (v *View) indexed(r Request, decode bool, want event.Role) (best, bestOK event.Instance, ok bool) {
	if !v.idxTried {
		v.buildIndex()
	}
	t := treeFor(want)
	if v.idx != nil {
		v.settleOffline()
	}
	if v.idx == nil || t < 0 || v.downs > 0 || v.idx.trees[t].members == 0 {
		return 0, 0, false
	}
	tr := &v.idx.trees[t]
	// f maps a secondary counter to the cost's second term, exactly as
	// PrefillCost and DecodeCost compute it; thresh is the SLO test.
	var add, sub, thresh float64
	if decode {
		add, sub, thresh = float64(r.InputTokens+1), v.idx.mt, 0
	} else {
		add, thresh = v.inst[0].Profile.PrefillSpan(0, r.InputTokens), v.ttftS
	}
	second := func(b float64) float64 {
		if decode {
			return b + add - sub
		}
		return b + add
	}
	cost := func(i event.Instance) Cost {
		if decode {
			return v.DecodeCost(i, r)
		}
		// PrefillCost with nothing cached (the one cached instance is
		// weighed after the walk).
		return Cost{float64(v.inst[i].DecodeTokens), second(v.inst[i].PrefillWork)}
	}
	// The least cost: the root's least pair prices the cheapest leaf
	// exactly (the cost is monotone in the pair), and a subtree holds a
	// leaf of that cost exactly when its own least pair prices to it (its
	// least pair is then that leaf's, or one at least as cheap). One
	// descent, into the left child whenever it holds one, ends at the
	// lowest index among the cheapest: O(log instances), as the scan's
	// first-in-index-order tie rule wants.
	target := Cost{tr.node[1].a, second(tr.node[1].b)}
	holds := func(k int) bool { return tr.node[k].a == target[0] && second(tr.node[k].b) == target[1] }
	k := 1
	for k < tr.size {
		k *= 2
		if !holds(k) {
			k++
		}
	}
	best = event.Instance(k - tr.size)
	bestCost := cost(best)
	if bestCost[1] <= thresh {
		return v.weighCached(r, decode, tr, thresh, best, bestCost, best, bestCost) // the cheapest meets the SLO
	}
	// The least cost meeting the SLO: skip nodes where no leaf meets it
	// (least secondary counter) or none is cheaper than the best so far.
	bestOK = event.NoInstance
	var bestOKCost Cost
	var meeting func(k int)
	meeting = func(k int) {
		nd := &tr.node[k]
		if nd.a == math.Inf(1) || second(nd.mb) > thresh {
			return
		}
		if bestOK != event.NoInstance && !(Cost{nd.a, second(nd.b)}).Less(bestOKCost) {
			return
		}
		if k >= tr.size {
			if c := cost(event.Instance(k - tr.size)); c[1] <= thresh {
				bestOK, bestOKCost = event.Instance(k-tr.size), c
			}
			return
		}
		meeting(2 * k)
		meeting(2*k + 1)
	}
	meeting(1)
	return v.weighCached(r, decode, tr, thresh, best, bestCost, bestOK, bestOKCost)
}

// cachedInst is the one instance on which cachedOn may find r's prompt
// cached (its engine's report, else the prefix group's affinity), or
// NoInstance.
func (v *View) cachedInst(r Request) event.Instance {
	switch {
	case v.affinity == nil:
		return event.NoInstance
	case r.CachedTokens > 0:
		return r.CachedOn
	case r.PrefixGroup == 0:
		return event.NoInstance
	}
	if a, ok := v.affinity[r.PrefixGroup]; ok {
		return a.inst
	}
	return event.NoInstance
}

// inTree reports whether instance i has a leaf in tr (it holds the tree's
// role and is online).
func (tr *roleTree) inTree(i event.Instance) bool {
	return i >= 0 && int(i) < tr.size && tr.node[tr.size+int(i)].a != math.Inf(1)
}

// weighCached finishes indexed: best and bestOK are the index's choices
// with nothing cached; the instance holding r's prefix, if in the pool, is
// priced with its cache and takes either place when it is cheaper (or as
// cheap and earlier in index order), as the scan would find. Decode legs
// have no cache to weigh.
func (v *View) weighCached(r Request, decode bool, tr *roleTree, thresh float64, best event.Instance, bestCost Cost, bestOK event.Instance, bestOKCost Cost) (event.Instance, event.Instance, bool) {
	j := event.NoInstance
	if !decode {
		j = v.cachedInst(r)
	}
	if j == event.NoInstance || !tr.inTree(j) {
		return best, bestOK, true
	}
	in := &v.inst[j]
	kj := v.PrefillCost(j, r)
	if (Cost{float64(in.DecodeTokens), in.PrefillWork + in.Profile.PrefillSpan(0, r.InputTokens)}).Less(kj) {
		return 0, 0, false // a cache that makes the prompt dearer: the index's premise fails; scan
	}
	if j != best && (kj.Less(bestCost) || kj == bestCost && j < best) {
		best = j
	}
	if kj[1] <= thresh && j != bestOK && (bestOK == event.NoInstance || kj.Less(bestOKCost) || kj == bestOKCost && j < bestOK) {
		bestOK = j
	}
	return best, bestOK, true
}

// indexedSpill finds the idle decode engine burst spill would pick for a
// prompt of span seconds on every engine (the fleet's one profile, no
// prefix affinity): the least resident prefill work plus span, lowest
// index among equals, as spill's scan picks it; NoInstance when no decode
// engine is idle. It reports false when the index does not apply now.
// O(log instances): the scan it replaces cost a pass over the fleet for
// every prompt no prefill engine takes in time, which past saturation on
// 4,096 engines more than doubled the cost of a simulated request.
func (v *View) indexedSpill(r Request) (event.Instance, bool) {
	span := v.inst[0].Profile.PrefillSpan(0, r.InputTokens)
	if !v.idxTried {
		v.buildIndex()
	}
	if v.idx != nil {
		v.settleOffline()
	}
	if v.idx == nil || v.downs > 0 {
		return event.NoInstance, false
	}
	tr := &v.idx.trees[spillTree]
	if tr.members == 0 {
		return event.NoInstance, true
	}
	// The same descent as indexed's: into the left child whenever it
	// holds a leaf whose first token comes as early as the least.
	target := tr.node[1].b + span
	k := 1
	for k < tr.size {
		k *= 2
		if nd := &tr.node[k]; nd.a != 0 || nd.b+span != target {
			k++
		}
	}
	best := event.Instance(k - tr.size)
	// The engine holding r's prefix, priced with its cache, as indexed
	// weighs it.
	if j := v.cachedInst(r); j != event.NoInstance && tr.inTree(j) {
		tj := v.spillTTFT(j, r)
		if tj > v.inst[j].PrefillWork+span {
			return event.NoInstance, false // a cache that makes the prompt dearer: scan
		}
		if j != best && (tj < target || tj == target && j < best) {
			best = j
		}
	}
	return best, true
}
