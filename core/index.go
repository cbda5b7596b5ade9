package core

import (
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// placement index: Algorithm 1 in O(log instances) per leg.
//
// Algorithm 1 (arrow.go) scans its pool for the lexicographically least
// cost, and the least among costs meeting the SLO, first in index order on
// ties. On a fleet of one timing profile with no prefix affinity, a leg's
// cost on instance i is a monotone function of two of i's counters:
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
// choice is bit-for-bit the same. The index is used only while it is
// exact: no instance down, none still offline after a move, the role's
// pool not empty; otherwise Algorithm 1 scans.

// indexMin is the least fleet size the index is used for: below it a scan
// is as cheap.
const indexMin = 24

// roleTree is a min segment tree over instance indices for one role.
type roleTree struct {
	size    int       // leaves, a power of two
	a, b    []float64 // per node: least primary and secondary counter
	members int       // instances holding the role
}

type placeIndex struct {
	trees [2]roleTree // 0: prefill, 1: decode
	// prefill is the fleet's one profile's T(n) (PrefillSpan from 0), mt
	// its MT.
	mt float64
}

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
	if len(v.inst) < indexMin || v.affinity != nil {
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
		tr.a = make([]float64, 2*size)
		tr.b = make([]float64, 2*size)
		for k := range tr.a {
			tr.a[k], tr.b[k] = math.Inf(1), math.Inf(1)
		}
	}
	v.idx = x
	for i := range v.inst {
		v.leaf(i)
	}
	for t := range x.trees {
		tr := &x.trees[t]
		for k := size - 1; k >= 1; k-- {
			tr.a[k] = min(tr.a[2*k], tr.a[2*k+1])
			tr.b[k] = min(tr.b[2*k], tr.b[2*k+1])
		}
	}
}

// leaf writes instance i's leaves (without fixing the nodes above).
func (v *View) leaf(i int) {
	in := &v.inst[i]
	for t := range v.idx.trees {
		tr := &v.idx.trees[t]
		k := tr.size + i
		was := tr.a[k] != math.Inf(1)
		a, b := math.Inf(1), math.Inf(1)
		switch {
		case t == 0 && in.Role == event.RolePrefill:
			a, b = float64(in.DecodeTokens), in.PrefillWork
		case t == 1 && in.Role == event.RoleDecode:
			a, b = float64(in.PrefillTokens), float64(in.DecodeTokens)
		}
		is := a != math.Inf(1)
		if is && !was {
			tr.members++
		} else if was && !is {
			tr.members--
		}
		tr.a[k], tr.b[k] = a, b
	}
}

// touch re-indexes instance i after its role or counters changed.
func (v *View) touch(i event.Instance) {
	if v.idx == nil {
		return
	}
	v.leaf(int(i))
	for t := range v.idx.trees {
		tr := &v.idx.trees[t]
		for k := (tr.size + int(i)) / 2; k >= 1; k /= 2 {
			a, b := min(tr.a[2*k], tr.a[2*k+1]), min(tr.b[2*k], tr.b[2*k+1])
			if a == tr.a[k] && b == tr.b[k] {
				break
			}
			tr.a[k], tr.b[k] = a, b
		}
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
	if v.idx == nil || t < 0 || v.downs > 0 || v.now < v.offMax || v.idx.trees[t].members == 0 {
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
	best, bestOK = event.NoInstance, event.NoInstance
	var bestCost, bestOKCost Cost
	var walk func(k int)
	walk = func(k int) {
		if tr.a[k] == math.Inf(1) {
			return // no member below
		}
		bound := Cost{tr.a[k], second(tr.b[k])}
		wantBest := best == event.NoInstance || bound.Less(bestCost)
		wantOK := bound[1] <= thresh && (bestOK == event.NoInstance || bound.Less(bestOKCost))
		if !wantBest && !wantOK {
			return
		}
		if k >= tr.size {
			i := event.Instance(k - tr.size)
			// The cost the scan computes, from the instance itself.
			var c Cost
			if decode {
				c = v.DecodeCost(i, r)
			} else {
				c = v.PrefillCost(i, r)
			}
			if best == event.NoInstance || c.Less(bestCost) {
				best, bestCost = i, c
			}
			if c[1] <= thresh && (bestOK == event.NoInstance || c.Less(bestOKCost)) {
				bestOK, bestOKCost = i, c
			}
			return
		}
		walk(2 * k)
		walk(2*k + 1)
	}
	walk(1)
	return best, bestOK, true
}
