package core

import (
	"fmt"
	"math"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// The least-loaded index: the static splits' and aggregated serving's
// placement (argmin: the online instance of a role with the fewest
// resident tokens, lowest index on ties) in O(1) per leg and O(log
// instances) per counter change, instead of a scan of the fleet. A min
// segment tree per key, each leaf an instance's key when it holds the role
// (else none), each node the least key below it and the lowest index
// holding it: the root is the scan's answer, bit for bit. An instance
// offline (a move's ReadyAt ahead) has no leaf until the clock reaches it
// (settleOffline). Used only while it is exact (no instance down, an
// online instance in the role); otherwise argmin scans, as the placement
// index does (index.go).

// argKey names the keys argmin is asked for.
type argKey uint8

const (
	argPrefillTokens argKey = iota // prefill role: PrefillTokens (static)
	argDecodeTokens                // decode role: DecodeTokens (static)
	argMixedTokens                 // mixed role: PrefillTokens + DecodeTokens (aggregated)
	argKeys
)

// argRole and argValue are each key's role and value.
var argRole = [argKeys]event.Role{event.RolePrefill, event.RoleDecode, event.RoleMixed}

func argValue(k argKey, in *Instance) int64 {
	switch k {
	case argPrefillTokens:
		return in.PrefillTokens
	case argDecodeTokens:
		return in.DecodeTokens
	}
	return in.PrefillTokens + in.DecodeTokens
}

// argNode is a subtree's least key and the lowest index holding it
// (key math.MaxInt64, index -1: no instance of the role below).
type argNode struct {
	key int64
	idx int32
}

var argNone = argNode{math.MaxInt64, -1}

// argTree is one key's min segment tree; the root is at 1.
type argTree struct {
	size int
	node []argNode
}

// argIndex holds the trees argmin asked for (nil until the first ask).
type argIndex struct{ trees [argKeys]*argTree }

func argLess(a, b argNode) bool {
	return a.idx >= 0 && (b.idx < 0 || a.key < b.key || a.key == b.key && a.idx < b.idx)
}

// setLeaf writes instance i's leaf of tree k and fixes the nodes above it,
// up to the first that does not change.
func (v *View) setLeaf(k argKey, i int) {
	tr := v.aidx.trees[k]
	in := &v.inst[i]
	nd := argNone
	if v.now < in.OfflineUntil {
		v.noteOffline(event.Instance(i)) // written again once it is online
	} else if in.Role == argRole[k] {
		nd = argNode{argValue(k, in), int32(i)}
	}
	p := tr.size + i
	if tr.node[p] == nd {
		return
	}
	tr.node[p] = nd
	for p /= 2; p >= 1; p /= 2 {
		l, r := tr.node[2*p], tr.node[2*p+1]
		m := l
		if argLess(r, l) {
			m = r
		}
		if tr.node[p] == m {
			return
		}
		tr.node[p] = m
	}
}

// argTouch re-indexes instance i in every tree built (from touch).
func (v *View) argTouch(i event.Instance) {
	for k := range v.aidx.trees {
		if v.aidx.trees[k] != nil {
			v.setLeaf(argKey(k), int(i))
		}
	}
}

// argIndexed is argmin for key k from the index, or false when the index
// does not apply now (a small fleet, an instance down or offline, no
// instance in the role).
func (v *View) argIndexed(k argKey) (event.Instance, bool) {
	if len(v.inst) < indexMin || v.downs > 0 {
		return event.NoInstance, false
	}
	v.settleOffline()
	if v.aidx == nil {
		v.aidx = &argIndex{}
	}
	tr := v.aidx.trees[k]
	if tr == nil {
		size := 1
		for size < len(v.inst) {
			size *= 2
		}
		tr = &argTree{size: size, node: make([]argNode, 2*size)}
		for p := range tr.node {
			tr.node[p] = argNone
		}
		v.aidx.trees[k] = tr
		for i := range v.inst {
			v.setLeaf(k, i)
		}
	}
	root := tr.node[1]
	if root.idx < 0 {
		return event.NoInstance, false
	}
	if checkIndex {
		argChecks++
		if want := argmin(v, argRole[k], func(in *Instance) int64 { return argValue(k, in) }); want != event.Instance(root.idx) {
			panic(fmt.Sprintf("core: least-loaded index chose %d, the scan %d (key %d)", root.idx, want, k))
		}
	}
	return event.Instance(root.idx), true
}

// leastLoaded is argmin for key k: from the index when it applies, else
// by the scan.
func leastLoaded(c *View, k argKey) event.Instance {
	if i, ok := c.argIndexed(k); ok {
		return i
	}
	return argmin(c, argRole[k], func(in *Instance) int64 { return argValue(k, in) })
}

// argChecks counts the index's answers checked against the scan (tests).
var argChecks int
