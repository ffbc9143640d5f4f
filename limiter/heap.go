package limiter

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
