package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// waitersDefaultLimit is how many waiters /api/pools/{name}/waiters lists
// unless asked; limiter.MaxListWaiters is the most it lists.
const waitersDefaultLimit = 50

// WaitersResponse is the JSON of GET /api/pools/{name}/waiters[?limit=N]:
// the first N acquires waiting in the pool's queue, in the order they
// will be granted (default 50, at most 100), and how many wait in all.
type WaitersResponse struct {
	Pool    string   `json:"pool"`
	Total   int64    `json:"total"`
	Waiters []Waiter `json:"waiters"`
}

// Waiter is one waiting acquire.
type Waiter struct {
	Position int64   `json:"position"` // 1 is granted next
	ClientID string  `json:"client_id"`
	Weight   int64   `json:"weight"`
	Priority int32   `json:"priority"`
	WaitedMS float64 `json:"waited_ms"`
}

func (h *handler) poolWaiters(w http.ResponseWriter, r *http.Request, eng *limiter.Engine) {
	limit, ok := queryLimit(w, r.URL.Query(), waitersDefaultLimit, limiter.MaxListWaiters)
	if !ok {
		return
	}
	name := r.PathValue("name")
	queued, total, err := eng.ListWaiters(name, limit)
	if errors.Is(err, apierr.ErrPoolNotFound) {
		writeText(w, http.StatusNotFound, "pool "+strconv.Quote(name)+" not found\n")
		return
	}
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error()+"\n")
		return
	}
	resp := WaitersResponse{Pool: name, Total: total, Waiters: make([]Waiter, len(queued))}
	for i, q := range queued {
		resp.Waiters[i] = Waiter{Position: q.Position, ClientID: q.ClientID, Weight: q.Weight, Priority: q.Priority,
			WaitedMS: float64(q.Waited.Microseconds()) / 1000}
	}
	writeJSON(w, resp)
}
