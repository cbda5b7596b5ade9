package sim

// evHeap is a binary min-heap of events ordered by (at, seq), so events at
// the same time run in the order they were scheduled. The root is at index
// 1 (index 0 is unused), so two siblings, 2i and 2i+1, share a cache line:
// on a large fleet the heap holds thousands of events, far more than the
// first-level cache, and a pop reads a pair of siblings per level.
type evHeap []ev

// before reports whether e comes before f.
func (e *ev) before(f *ev) bool {
	if e.at != f.at {
		return e.at < f.at
	}
	return e.seq < f.seq
}

// len is the number of events held.
func (h evHeap) len() int { return max(len(h)-1, 0) }

// first is the heap's first event (the heap must not be empty).
func (h evHeap) first() *ev { return &h[1] }

func (h *evHeap) push(e ev) {
	if len(*h) == 0 {
		*h = append(*h, ev{}) // the unused slot 0
	}
	*h = append(*h, e)
	a := *h
	i := len(a) - 1
	for i > 1 {
		p := i / 2
		if !e.before(&a[p]) {
			break
		}
		a[i] = a[p]
		i = p
	}
	a[i] = e
}

func (h *evHeap) pop() ev {
	a := *h
	top := a[1]
	n := len(a) - 1 // the last event's index, and the new length
	last := a[n]
	a = a[:n]
	*h = a
	// Sift the last event down from the root: move the lesser child up
	// into the hole until the last event fits there.
	i := 1
	for {
		l := 2 * i
		if l >= n {
			break
		}
		if r := l + 1; r < n && a[r].before(&a[l]) {
			l = r
		}
		if !a[l].before(&last) {
			break
		}
		a[i] = a[l]
		i = l
	}
	if n > 1 {
		a[i] = last
	}
	return top
}

// finishEntry is a running decode stream and the engine iteration count at
// which it produces its last token.
type finishEntry struct {
	at    int64
	req   int32
	admit uint32 // the engine's admission count when it joined
}

// finishHeap orders an engine's running streams by finishing iteration,
// then by request, so ties finish in a fixed order.
type finishHeap struct{ items []finishEntry }

func (h *finishHeap) Len() int { return len(h.items) }

func (h *finishHeap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.req < b.req
}

func (h *finishHeap) min() finishEntry { return h.items[0] }

func (h *finishHeap) push(f finishEntry) {
	h.items = append(h.items, f)
	h.up(len(h.items) - 1)
}

// up moves item i toward the root while it is less than its parent and
// returns where it stops.
func (h *finishHeap) up(i int) int {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
	return i
}

func (h *finishHeap) pop() finishEntry { return h.removeAt(0) }

// removeAt removes and returns item k.
func (h *finishHeap) removeAt(k int) finishEntry {
	a := h.items
	top := a[k]
	n := len(a) - 1
	a[k] = a[n]
	h.items = a[:n]
	if k == n {
		return top
	}
	i := h.up(k)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}
