package limiter

import "container/heap"

// heapItem is an element of an indexedHeap: it orders itself against
// another element and remembers its position, so that it can be removed or
// re-ordered in O(log n) without a search.
type heapItem[T any] interface {
	// before reports whether the element belongs nearer the top than o.
	before(o T) bool
	// setIndex records the element's position; -1 when it leaves the heap.
	setIndex(i int)
	// heapIndex returns the position last recorded by setIndex.
	heapIndex() int
}

// indexedHeap is a binary heap whose top is the element that is before all
// others. The zero value is an empty heap.
type indexedHeap[T heapItem[T]] []T

// top returns the first element and true, or the zero T and false.
func (h indexedHeap[T]) top() (T, bool) {
	if len(h) == 0 {
		var zero T
		return zero, false
	}
	return h[0], true
}

// push adds x.
func (h *indexedHeap[T]) push(x T) {
	x.setIndex(len(*h))
	*h = append(*h, x)
	h.up(len(*h) - 1)
}

// remove takes x, which must be in h, out of it.
func (h *indexedHeap[T]) remove(x T) {
	i := x.heapIndex()
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	(*h)[last] = zero
	*h = (*h)[:last]
	if i != last {
		h.fix(i)
	}
	x.setIndex(-1)
}

// fix restores order after the element at i changed its key.
func (h indexedHeap[T]) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h indexedHeap[T]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}

func (h indexedHeap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h indexedHeap[T]) down(i int) bool {
	start := i
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h[r].before(h[l]) {
			m = r
		}
		if !h[m].before(h[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}

// first returns the first k elements in order, without changing h: a
// walk from the top that keeps the candidates (the children of the
// elements taken so far) in a heap of their indices, so it costs
// O(k log k) whatever h's length.
func (h indexedHeap[T]) first(k int) []T {
	k = min(k, len(h))
	if k <= 0 {
		return nil
	}
	out := make([]T, 0, k)
	cand := &heapWalk[T]{h: h, idx: []int{0}}
	for len(out) < k {
		i := heap.Pop(cand).(int)
		out = append(out, h[i])
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				heap.Push(cand, c)
			}
		}
	}
	return out
}

// heapWalk is first's heap of candidate indices into h.
type heapWalk[T heapItem[T]] struct {
	h   indexedHeap[T]
	idx []int
}

func (w *heapWalk[T]) Len() int           { return len(w.idx) }
func (w *heapWalk[T]) Less(a, b int) bool { return w.h[w.idx[a]].before(w.h[w.idx[b]]) }
func (w *heapWalk[T]) Swap(a, b int)      { w.idx[a], w.idx[b] = w.idx[b], w.idx[a] }
func (w *heapWalk[T]) Push(x any)         { w.idx = append(w.idx, x.(int)) }
func (w *heapWalk[T]) Pop() any {
	x := w.idx[len(w.idx)-1]
	w.idx = w.idx[:len(w.idx)-1]
	return x
}
