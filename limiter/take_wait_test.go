package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/proto/tollgate/v1/apierr"
)

// takeOutcome is what a notified take learned.
type takeOutcome struct {
	res TakeResult
	err error
}

// A take that waits is a record and a timer: Notify learns the outcome
// when the engine clock brings the tokens, with no goroutine waiting, and
// at once when the outcome came before Notify.
func TestStartTakeNotify(t *testing.T) {
	te := newTestEngine(t)
	te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1})
	if res, w, err := te.StartTake("api", 1, 0); err != nil || w != nil || res.Tokens != 1 {
		t.Fatalf("first take = %+v, %v, %v; want 1 token at once", res, w, err)
	}
	res, w, err := te.StartTake("api", 1, 5*time.Second)
	if err != nil || w == nil || res.Tokens != 0 {
		t.Fatalf("second take = %+v, %v, %v; want a wait", res, w, err)
	}
	got := make(chan takeOutcome, 1)
	w.Notify(func(r TakeResult, err error) { got <- takeOutcome{r, err} })
	te.clk.Advance(999 * time.Millisecond)
	select {
	case o := <-got:
		t.Fatalf("notified %+v before the token was there", o)
	default:
	}
	te.clk.Advance(time.Millisecond)
	if o := <-got; o.err != nil || o.res.Tokens != 1 || o.res.Waited != time.Second {
		t.Fatalf("notified %+v", o)
	}
	w.Cancel(context.Canceled) // ended already: nothing changes
	if s := te.status(t, "api"); s.TokensGranted != 2 || s.Canceled != 0 {
		t.Fatalf("status = %+v", s)
	}

	// Notify after the outcome: called at once.
	_, w, _ = te.StartTake("api", 1, 5*time.Second)
	te.clk.Advance(time.Second)
	w.Notify(func(r TakeResult, err error) { got <- takeOutcome{r, err} })
	if o := <-got; o.err != nil || o.res.Tokens != 1 {
		t.Fatalf("notified %+v", o)
	}
}

// Cancel gives the reserved tokens back and tells the owner why: its
// cause decides CANCELED or WAIT_TIMEOUT, and nil is the engine stopping.
func TestTakeWaitCancel(t *testing.T) {
	for _, c := range []struct {
		cause error
		want  *apierr.Error
	}{
		{context.Canceled, apierr.ErrCanceled},
		{context.DeadlineExceeded, apierr.ErrWaitTimeout},
		{nil, apierr.ErrShuttingDown},
	} {
		te := newTestEngine(t)
		te.mustCreate(t, PoolConfig{Name: "api", Rate: 1, Burst: 1})
		if _, err := te.Take(context.Background(), "api", 1, 0); err != nil {
			t.Fatal(err)
		}
		_, w, err := te.StartTake("api", 1, 5*time.Second)
		if err != nil || w == nil {
			t.Fatalf("take = %v, %v; want a wait", w, err)
		}
		got := make(chan takeOutcome, 1)
		w.Notify(func(r TakeResult, err error) { got <- takeOutcome{r, err} })
		w.Cancel(c.cause)
		o := <-got
		wantReason(t, o.err, c.want)
		w.Cancel(c.cause) // twice: nothing more
		// The token the cancelled take had reserved is there a second later.
		te.clk.Advance(time.Second)
		if _, err := te.Take(context.Background(), "api", 1, 0); err != nil {
			t.Fatalf("%v: the cancelled take's token did not come back: %v", c.cause, err)
		}
		select {
		case o := <-got:
			t.Fatalf("notified again: %+v", o)
		default:
		}
	}
}
