package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// Paging of /api/pools/{name}/leases.
const (
	leasesDefaultLimit = 100
	leasesMaxLimit     = 1000
)

// LeasesResponse is the JSON of GET
// /api/pools/{name}/leases[?after=TOKEN&limit=N]: the pool's live leases
// in fencing token order after TOKEN, at most N (default 100, at most
// 1,000). More says that leases follow the last one returned.
type LeasesResponse struct {
	Pool   string  `json:"pool"`
	More   bool    `json:"more"`
	Leases []Lease `json:"leases"`
}

// Lease is one live lease. ID is its fencing token, the bare id admin
// calls (and events) use; the holder's signed id is not shown.
type Lease struct {
	ID          string    `json:"id"`
	Weight      int64     `json:"weight"`
	Priority    int32     `json:"priority"`
	ClientID    string    `json:"client_id"`
	Description string    `json:"description,omitempty"`
	TTL         string    `json:"ttl"`
	AcquireTime time.Time `json:"acquire_time"`
	ExpireTime  time.Time `json:"expire_time"`
	Resources   []string  `json:"resources,omitempty"`
}

func (h *handler) poolLeases(w http.ResponseWriter, r *http.Request, eng *limiter.Engine) {
	q := r.URL.Query()
	limit, ok := queryLimit(w, q, leasesDefaultLimit, leasesMaxLimit)
	if !ok {
		return
	}
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeText(w, http.StatusBadRequest, "after must be a lease's fencing token (a decimal number)\n")
			return
		}
		after = n
	}
	name := r.PathValue("name")
	leases, next, err := eng.ListLeases(name, "", after, limit)
	if errors.Is(err, apierr.ErrPoolNotFound) {
		writeText(w, http.StatusNotFound, "pool "+strconv.Quote(name)+" not found\n")
		return
	}
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error()+"\n")
		return
	}
	resp := LeasesResponse{Pool: name, More: next != 0, Leases: make([]Lease, 0, len(leases))}
	for _, l := range leases {
		al := Lease{
			ID: strconv.FormatUint(l.FencingToken, 10), Weight: l.Weight, Priority: l.Priority,
			ClientID: l.ClientID, Description: l.Description, TTL: l.TTL.String(),
			AcquireTime: l.AcquireTime, ExpireTime: l.ExpireTime,
		}
		for _, res := range l.Resources {
			al.Resources = append(al.Resources, res.ID)
		}
		resp.Leases = append(resp.Leases, al)
	}
	writeJSON(w, resp)
}
