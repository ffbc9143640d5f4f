package limiter

// A pool's waiters are also kept in two treaps ordered as the queue grants
// them (waiter.before), each node counting the nodes under it: one of
// every waiter, to tell a waiter's position in O(log n), and one per
// client id, to find a client's first waiters in grant order without
// looking at anyone else's. So QueuePositions costs what it reports, not
// the queue's length. The links live in the waiter (no allocation); a
// node's treap priority is a hash of its arrival number.

// rankLinks are a waiter's links in one treap.
type rankLinks struct {
	left, right *waiter
	size        int32
}

// rankTree names one of the two treaps by the links it uses.
type rankTree func(*waiter) *rankLinks

func inQueue(w *waiter) *rankLinks       { return &w.rank }
func inClientQueue(w *waiter) *rankLinks { return &w.mine }

// treapPriority spreads arrival numbers (splitmix64), so that the treaps
// stay balanced whatever order waiters arrive and leave in.
func treapPriority(w *waiter) uint64 {
	z := w.seq + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (t rankTree) size(w *waiter) int32 {
	if w == nil {
		return 0
	}
	return t(w).size
}

func (t rankTree) fix(w *waiter) {
	l := t(w)
	l.size = 1 + t.size(l.left) + t.size(l.right)
}

// split cuts the treap under root into the waiters before w and the rest.
func (t rankTree) split(root, w *waiter) (before, rest *waiter) {
	if root == nil {
		return nil, nil
	}
	l := t(root)
	if root.before(w) {
		l.right, rest = t.split(l.right, w)
		t.fix(root)
		return root, rest
	}
	before, l.left = t.split(l.left, w)
	t.fix(root)
	return before, root
}

// merge joins two treaps, every waiter of a before every waiter of b.
func (t rankTree) merge(a, b *waiter) *waiter {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case treapPriority(a) > treapPriority(b):
		t(a).right = t.merge(t(a).right, b)
		t.fix(a)
		return a
	default:
		t(b).left = t.merge(a, t(b).left)
		t.fix(b)
		return b
	}
}

// insert adds w to the treap under root and returns the new root.
func (t rankTree) insert(root, w *waiter) *waiter {
	if root == nil || treapPriority(w) > treapPriority(root) {
		l := t(w)
		l.left, l.right = t.split(root, w)
		t.fix(w)
		return w
	}
	l := t(root)
	if w.before(root) {
		l.left = t.insert(l.left, w)
	} else {
		l.right = t.insert(l.right, w)
	}
	t.fix(root)
	return root
}

// remove takes w, which must be in it, out of the treap under root and
// returns the new root.
func (t rankTree) remove(root, w *waiter) *waiter {
	if root == w {
		l := t(w)
		m := t.merge(l.left, l.right)
		*l = rankLinks{}
		return m
	}
	l := t(root)
	if w.before(root) {
		l.left = t.remove(l.left, w)
	} else {
		l.right = t.remove(l.right, w)
	}
	t.fix(root)
	return root
}

// rank returns how many waiters of the treap under root come before w,
// which must be in it.
func (t rankTree) rank(root, w *waiter) int64 {
	var n int64
	for root != nil && root != w {
		if w.before(root) {
			root = t(root).left
		} else {
			n += int64(t.size(t(root).left)) + 1
			root = t(root).right
		}
	}
	if root == w {
		n += int64(t.size(t(w).left))
	}
	return n
}

// first calls f on the waiters of the treap under root in grant order
// until f returns false; it returns false once f has.
func (t rankTree) first(root *waiter, f func(*waiter) bool) bool {
	if root == nil {
		return true
	}
	return t.first(t(root).left, f) && f(root) && t.first(t(root).right, f)
}

// waitQueue is a pool's queue of acquires that wait: a heap in the order
// the queue grants them (waiter.before), the rank treaps that tell
// positions, and the weight they ask for; and the number of takes waiting
// for their tokens, which wait on the bucket, not here, but count toward
// the pool's max_waiters.
type waitQueue struct {
	heap     indexedHeap[*waiter]
	ranked   *waiter            // every waiter, in a rank treap (rankTree)
	byClient map[string]*waiter // client id -> its waiters' rank treap
	weight   int64              // the weight the waiters ask for
	seq      uint64             // the next waiter's arrival number
	takes    int64              // takes waiting for their tokens
}

// len is the number of acquires waiting.
func (q *waitQueue) len() int { return len(q.heap) }

// waiting is what counts toward max_waiters: acquires and takes.
func (q *waitQueue) waiting() int64 { return int64(len(q.heap)) + q.takes }

// add enters w, which has just arrived, in the queue.
func (q *waitQueue) add(w *waiter) {
	w.seq = q.seq
	q.seq++
	q.heap.push(w)
	q.weight += w.g.weight
	q.ranked = rankTree(inQueue).insert(q.ranked, w)
	if c := w.g.clientID; c != "" {
		if q.byClient == nil {
			q.byClient = make(map[string]*waiter)
		}
		q.byClient[c] = rankTree(inClientQueue).insert(q.byClient[c], w)
	}
}

// remove takes w, which leaves the queue (granted or failed), out of it.
func (q *waitQueue) remove(w *waiter) {
	q.heap.remove(w)
	q.weight -= w.g.weight
	q.ranked = rankTree(inQueue).remove(q.ranked, w)
	if c := w.g.clientID; c != "" {
		if r := rankTree(inClientQueue).remove(q.byClient[c], w); r != nil {
			q.byClient[c] = r
		} else {
			delete(q.byClient, c)
		}
	}
}
