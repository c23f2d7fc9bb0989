package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/reviewdesk"
)

var charge = deskclient.Charge{RequestID: slot.RequestID, Account: "alice", Amount: 400, SlotKey: "expedite:1:slot"}

// TestDeskClientExpedite: the steps of an expedite and their lookups, each
// answered with its receipt and state, over loopback to a real desk.
func TestDeskClientExpedite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := desktest.StartDesk(t, nil).Client
	for _, lookup := range []struct {
		name string
		fn   func(context.Context, string) (reviewdesk.Receipt, error)
	}{{"SlotStatus", c.SlotStatus}, {"ReleaseStatus", c.ReleaseStatus}, {"ChargeStatus", c.ChargeStatus}, {"RefundStatus", c.RefundStatus}} {
		if _, err := lookup.fn(ctx, "expedite:1:never"); !errors.Is(err, reviewdesk.ErrNotFound) {
			t.Errorf("%s of a key never sent: %v, want ErrNotFound", lookup.name, err)
		}
	}
	steps := []struct {
		name, prefix, state string
		send                func() (reviewdesk.Receipt, error)
		lookup              func() (reviewdesk.Receipt, error)
		after               string // the lookup's state once every step ran
	}{
		{"ReserveSlot", "RS-", "held",
			func() (reviewdesk.Receipt, error) { return c.ReserveSlot(ctx, "expedite:1:slot", slot) },
			func() (reviewdesk.Receipt, error) { return c.SlotStatus(ctx, "expedite:1:slot") }, "charged"},
		{"Charge", "CH-", "charged",
			func() (reviewdesk.Receipt, error) { return c.Charge(ctx, "expedite:1:charge", charge) },
			func() (reviewdesk.Receipt, error) { return c.ChargeStatus(ctx, "expedite:1:charge") }, "refunded"},
		{"Refund", "RF-", "accepted",
			func() (reviewdesk.Receipt, error) {
				return c.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge")
			},
			func() (reviewdesk.Receipt, error) { return c.RefundStatus(ctx, "expedite:1:charge:refund") }, "accepted"},
		{"ReleaseSlot", "RL-", "accepted", // of another slot: this one was charged
			func() (reviewdesk.Receipt, error) {
				return c.ReleaseSlot(ctx, "expedite:2:slot:release", "expedite:2:slot")
			},
			func() (reviewdesk.Receipt, error) { return c.ReleaseStatus(ctx, "expedite:2:slot:release") }, "accepted"},
	}
	receipts := make([]reviewdesk.Receipt, len(steps))
	for i, st := range steps {
		r, err := st.send()
		if err != nil || !strings.HasPrefix(r.Reference, st.prefix) || r.State != st.state || r.AcceptedAt.IsZero() || r.Key == "" {
			t.Fatalf("%s: %+v, %v; want a %s… receipt, %s", st.name, r, err, st.prefix, st.state)
		}
		if got, err := st.lookup(); err != nil || got != r {
			t.Fatalf("%s's lookup: %+v, %v; want %+v", st.name, got, err, r)
		}
		receipts[i] = r
	}
	for i, st := range steps {
		got, err := st.lookup()
		want := receipts[i]
		want.State = st.after
		if err != nil || got != want {
			t.Errorf("%s's lookup at the end: %+v, %v; want %+v", st.name, got, err, want)
		}
		if again, err := st.send(); err != nil || again != want {
			t.Errorf("%s again: %+v, %v; want %+v, the current state", st.name, again, err, want)
		}
	}
	_, err := c.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot")
	if r, ok := errors.AsType[*reviewdesk.RefusedError](err); !ok || r.Status != 422 || r.Code != "slot_charged" || r.Detail == "" {
		t.Fatalf("release of a charged slot: %v, want a RefusedError slot_charged with its detail", err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Slots != (deskclient.SlotCounts{Charged: 1}) || st.Charges != 1 || st.Refunds != 1 || st.Releases != 1 ||
		st.Credit["alice"] != 1000 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
}

// TestDeskClientUnclear: every new call and lookup tells an unclear
// outcome apart, with its own op, and a keyed call whose answer was lost
// is not resent behind the caller.
func TestDeskClientUnclear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	c := d.Client
	d.Faults(t, provider.Faults{Down: true})
	for _, call := range []struct {
		op string
		fn func() (reviewdesk.Receipt, error)
	}{
		{"reserve_slot", func() (reviewdesk.Receipt, error) { return c.ReserveSlot(ctx, "s", slot) }},
		{"slot_status", func() (reviewdesk.Receipt, error) { return c.SlotStatus(ctx, "s") }},
		{"release_slot", func() (reviewdesk.Receipt, error) { return c.ReleaseSlot(ctx, "s:release", "s") }},
		{"release_status", func() (reviewdesk.Receipt, error) { return c.ReleaseStatus(ctx, "s:release") }},
		{"charge", func() (reviewdesk.Receipt, error) { return c.Charge(ctx, "c", charge) }},
		{"charge_status", func() (reviewdesk.Receipt, error) { return c.ChargeStatus(ctx, "c") }},
		{"refund", func() (reviewdesk.Receipt, error) { return c.Refund(ctx, "c:refund", "c") }},
		{"refund_status", func() (reviewdesk.Receipt, error) { return c.RefundStatus(ctx, "c:refund") }},
	} {
		_, err := call.fn()
		if u, ok := errors.AsType[*reviewdesk.UnclearError](err); !ok || u.Op != call.op {
			t.Errorf("%s while the desk is down: %v, want an UnclearError of op %s", call.op, err, call.op)
		}
	}
	d.Faults(t, provider.Faults{})

	// The connection is now idle, to be reused; the charge's answer is
	// dropped on it.
	if _, err := c.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	d.Faults(t, provider.Faults{DropResponses: 1, Only: []string{"charges"}})
	if _, err := c.Charge(ctx, "expedite:1:charge", charge); !isUnclear(err) {
		t.Fatalf("a charge whose answer was dropped: %v, want an unclear outcome", err)
	}
	if r, err := c.ChargeStatus(ctx, "expedite:1:charge"); err != nil || r.State != "charged" {
		t.Fatalf("the charge's status after the lost answer: %+v, %v; want charged", r, err)
	}

	// A 503 (failNext) is unclear too, and the lookup says nothing was done.
	d.Faults(t, provider.Faults{FailNext: 1, Only: []string{"refunds"}})
	if _, err := c.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge"); !isUnclear(err) {
		t.Fatalf("a refund answered 503: %v, want unclear", err)
	}
	if _, err := c.RefundStatus(ctx, "expedite:1:charge:refund"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("the refund's status after a 503: %v, want ErrNotFound", err)
	}

	// A deadline that a slow desk passes is unclear.
	d.Faults(t, provider.Faults{Delay: "1s", Only: []string{"slots"}})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.SlotStatus(cctx, "expedite:1:slot"); !isUnclear(err) {
		t.Fatalf("a slot's status past the deadline: %v, want unclear", err)
	}
}

// TestDeskClientStatsFailure: Stats reports a desk that does not answer.
func TestDeskClientStatsFailure(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	d.Stop()
	if _, err := d.Client.Stats(context.Background()); err == nil || !strings.Contains(err.Error(), "reviewdesk: stats") {
		t.Fatalf("stats of a stopped desk: %v, want an error", err)
	}
}

// TestDeskClientSetFaults: faults the desk takes pass; faults it refuses
// come back as a *RefusedError with its code and reason: a refusal, not a
// failure worth retrying.
func TestDeskClientSetFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := desktest.StartDesk(t, nil).Client
	if err := c.SetFaults(ctx, []byte(`{"delay":"1s"}`)); err != nil {
		t.Fatalf("faults the desk takes: %v", err)
	}
	err := c.SetFaults(ctx, []byte(`{"delay":"zz"}`))
	if refused, ok := errors.AsType[*reviewdesk.RefusedError](err); !ok || refused.Status != 400 || refused.Code != "invalid_body" ||
		!strings.Contains(refused.Detail, "delay") {
		t.Fatalf("faults the desk refuses: %v, want a *RefusedError with the desk's reason", err)
	}
}
