package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tollgate/tollgate/internal/poolconv"
	tollgatev1 "github.com/tollgate/tollgate/proto/tollgate/v1"
)

// printer writes command results as text for people, or as JSON
// (jsonMessage).
type printer struct {
	w    io.Writer
	json bool
}

// outputFlag is the value of a command's -o flag: text (the default) or
// json. Any other value is refused when the flag is parsed, which makes it
// a usage error.
type outputFlag struct{ json bool }

// String returns "text" or "json".
func (o *outputFlag) String() string {
	if o.json {
		return "json"
	}
	return "text"
}

// Set parses text or json.
func (o *outputFlag) Set(s string) error {
	switch s {
	case "text":
		o.json = false
	case "json":
		o.json = true
	default:
		return fmt.Errorf("-o %q is not an output format; use text or json", s)
	}
	return nil
}

// Type names the flag's kind in help text.
func (o *outputFlag) Type() string { return "format" }

// printer returns a printer to w in this format.
func (o *outputFlag) printer(w io.Writer) *printer { return &printer{w: w, json: o.json} }

// message prints m as one line of JSON (jsonMessage).
func (p *printer) message(m proto.Message) error {
	b, err := jsonMessage(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// pool prints a pool (and its status, if not nil); with -o json it prints
// resp, the whole response message.
func (p *printer) pool(resp proto.Message, pool *tollgatev1.Pool, st *tollgatev1.PoolStatus) error {
	if p.json {
		return p.message(resp)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("name", pool.GetName())
	if pool.GetDescription() != "" {
		row("description", pool.GetDescription())
	}
	row("concurrency_limit", orNone(pool.GetConcurrencyLimit() != 0, strconv.FormatInt(pool.GetConcurrencyLimit(), 10)))
	row("rate", orNone(pool.GetRate() != 0, strconv.FormatFloat(pool.GetRate(), 'g', -1, 64)+"/s"))
	if pool.GetRate() != 0 {
		row("burst", pool.GetBurst())
	}
	row("default_lease_ttl", duration(pool.GetDefaultLeaseTtl()))
	row("max_lease_ttl", duration(pool.GetMaxLeaseTtl()))
	row("max_waiters", pool.GetMaxWaiters())
	row("revocation_policy", poolconv.EnumText(pool.GetRevocationPolicy()))
	resourceConfigRows(row, pool)
	adaptiveConfigRows(row, pool)
	markRows(row, pool)
	otherPoolRows(row, pool)
	row("create_time", timestamp(pool.GetCreateTime()))
	row("update_time", timestamp(pool.GetUpdateTime()))
	if st != nil {
		held := strconv.FormatInt(st.GetHeld(), 10)
		if pool.GetConcurrencyLimit() != 0 {
			held += " of " + strconv.FormatInt(pool.GetConcurrencyLimit(), 10)
		}
		row("held", held)
		if st.GetSuspended() {
			row("suspended", "yes: no leases are granted (tollgate pool resume "+pool.GetName()+")")
		}
		resourceStatusRows(row, pool, st)
		row("leases", st.GetLeases())
		row("waiting", fmt.Sprintf("%d (weight %d)", st.GetWaiting(), st.GetWaitingWeight()))
		row("granted", st.GetGranted())
		row("released", st.GetReleased())
		row("expired", st.GetExpired())
		row("revoked", st.GetRevoked())
		row("rejected", st.GetRejected())
		row("wait_timeouts", st.GetWaitTimeouts())
		row("canceled", st.GetCanceled())
		if pool.GetRate() != 0 {
			row("tokens_granted", st.GetTokensGranted())
			row("tokens_available", strconv.FormatFloat(st.GetTokensAvailable(), 'f', 2, 64))
		}
		if pool.GetConcurrencyLimit() != 0 {
			row("utilisation", pctText(st.GetUtilisation()))
		}
		row("last_fencing_token", st.GetLastFencingToken())
		if st.GetRecoveringUntil() != nil || st.GetReadopted() != 0 { // after a restart: docs/recovery.md
			row("recovering_until", orNone(st.GetRecoveringUntil() != nil, timestamp(st.GetRecoveringUntil())))
			row("readopted", st.GetReadopted())
		}
		adaptiveStatusRows(row, pool, st)
	}
	return tw.Flush()
}

// pools prints a table of pools, or with -o json, resp.
func (p *printer) pools(resp *tollgatev1.ListPoolsResponse) error {
	if p.json {
		return p.message(resp)
	}
	if len(resp.GetPools()) == 0 {
		if _, err := fmt.Fprintln(p.w, "no pools"); err != nil {
			return err
		}
		return p.unreachable(resp.GetUnreachable())
	}
	owners := map[string]bool{} // a cluster whose pools are on several servers: which leads each
	for _, st := range resp.GetStatuses() {
		owners[st.GetOwner()] = true
	}
	ownerCol := len(owners) > 1
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	if ownerCol {
		fmt.Fprint(tw, "NAME\tOWNER\t")
	} else {
		fmt.Fprint(tw, "NAME\t")
	}
	fmt.Fprintln(tw, "CONCURRENCY\tHELD\tLEASES\tWAITING\tRATE\tBURST\tTOKENS\tDESCRIPTION")
	for i, pool := range resp.GetPools() {
		var st *tollgatev1.PoolStatus
		if i < len(resp.GetStatuses()) {
			st = resp.GetStatuses()[i]
		}
		if ownerCol {
			fmt.Fprintf(tw, "%s\t%s\t", pool.GetName(), st.GetOwner())
		} else {
			fmt.Fprintf(tw, "%s\t", pool.GetName())
		}
		rate, burst, tokens := "-", "-", "-"
		if pool.GetRate() != 0 {
			rate = strconv.FormatFloat(pool.GetRate(), 'g', -1, 64) + "/s"
			burst = strconv.FormatInt(pool.GetBurst(), 10)
			tokens = strconv.FormatFloat(st.GetTokensAvailable(), 'f', 1, 64)
		}
		conc := "-"
		if pool.GetConcurrencyLimit() != 0 {
			conc = strconv.FormatInt(pool.GetConcurrencyLimit(), 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", conc, st.GetHeld(), st.GetLeases(), st.GetWaiting(), rate, burst, tokens, pool.GetDescription())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return p.unreachable(resp.GetUnreachable())
}

func orNone(set bool, v string) string {
	if !set {
		return "none"
	}
	return v
}

func duration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return d.AsDuration().String()
}

func timestamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format(time.RFC3339)
}

// formattedPoolFields are the Pool fields pool prints in rows of their
// own. Any other field that is set is printed by otherPoolRows as it is,
// so that a new field shows without code here.
var formattedPoolFields = map[protoreflect.Name]bool{
	"name": true, "description": true, "concurrency_limit": true, "rate": true, "burst": true, "default_lease_ttl": true,
	"max_lease_ttl": true, "max_waiters": true, "revocation_policy": true, "resource_kind": true, "selection_policy": true,
	"safe_rate": true, "adaptive": true, "overload_mark": true, "near_full_mark": true, "low_utilisation_mark": true,
	"low_utilisation_period": true, "create_time": true, "update_time": true,
}

// otherPoolRows prints the fields of pool that are set and not in
// formattedPoolFields, in their declared order.
func otherPoolRows(row func(string, any), pool *tollgatev1.Pool) {
	m := pool.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); !formattedPoolFields[fd.Name()] && m.Has(fd) {
			row(string(fd.Name()), poolconv.FormatText(fd, m.Get(fd)))
		}
	}
}
