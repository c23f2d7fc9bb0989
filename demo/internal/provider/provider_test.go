package provider_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// callBound is the deadline of a call in these tests: the service's bound on
// one call to the desk (DISPATCH_CALL_TIMEOUT's default), which a healthy
// desk meets however busy the machine, and which the stalls of these tests
// (a delay or a held answer of a minute) outlast.
const callBound = 5 * time.Second

var sub = reviewdesk.Submission{RequestID: "8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11", Topic: "billing", Note: "call me"}

// withState is r as a lookup answers it: with its state.
func withState(r reviewdesk.Receipt, state string) reviewdesk.Receipt {
	r.State = state
	return r
}

func TestSubmitOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	first, err := d.Client.Submit(ctx, "demo-request:1", sub)
	if err != nil || !strings.HasPrefix(first.Reference, "RD-") {
		t.Fatalf("first submit: %+v, %v", first, err)
	}
	again, err := d.Client.Submit(ctx, "demo-request:1", sub)
	if err != nil || again != first {
		t.Fatalf("repeat: %+v, %v; want %+v", again, err, first)
	}
	other := sub
	other.Topic = "shipping"
	var refused *reviewdesk.RefusedError
	if _, err := d.Client.Submit(ctx, "demo-request:1", other); !errors.As(err, &refused) || refused.Status != 422 || refused.Code != "key_payload_mismatch" {
		t.Fatalf("another payload under the key: %v, want a 422 refusal", err)
	}
	if got, err := d.Client.Status(ctx, "demo-request:1"); err != nil || got != withState(first, "accepted") {
		t.Fatalf("status: %+v, %v", got, err)
	}
	if _, err := d.Client.Status(ctx, "demo-request:never"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("status of an unknown key: %v, want ErrNotFound", err)
	}
	if n := d.Submissions(t); n != 1 {
		t.Fatalf("%d submissions, want 1", n)
	}
}

func TestConcurrentSubmissionsOfOneKey(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	const n = 50
	refs := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := d.Client.Submit(context.Background(), "demo-request:storm", sub)
			refs[i], errs[i] = r.Reference, err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || refs[i] != refs[0] {
			t.Fatalf("submission %d: %q, %v; want %q", i, refs[i], errs[i], refs[0])
		}
	}
	if rows := d.Submissions(t); rows != 1 {
		t.Fatalf("%d submissions for one key, want 1", rows)
	}
}

// TestFaults: each knob, and how the client classifies what it sees.
func TestFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	unclear := func(err error) bool { var u *reviewdesk.UnclearError; return errors.As(err, &u) }
	for _, tt := range []struct {
		name   string
		faults provider.Faults
		call   func(d *desktest.Desk) error
		want   func(error) bool
		stored int
	}{
		{"delay past the caller's deadline", provider.Faults{Delay: "1m"}, func(d *desktest.Desk) error {
			ctx, cancel := context.WithTimeout(ctx, callBound)
			defer cancel()
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 0},
		{"fail the next call", provider.Faults{FailNext: 1}, func(d *desktest.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 0},
		{"accept and hold the answer past the caller's deadline", provider.Faults{HoldAnswer: "1m"}, func(d *desktest.Desk) error {
			ctx, cancel := context.WithTimeout(ctx, callBound)
			defer cancel()
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 1},
		{"accept and drop the answer", provider.Faults{DropResponses: 1}, func(d *desktest.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 1},
		{"refuse", provider.Faults{Refuse: true}, func(d *desktest.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, func(err error) bool { var r *reviewdesk.RefusedError; return errors.As(err, &r) && r.Status == 422 }, 0},
		{"down", provider.Faults{Down: true}, func(d *desktest.Desk) error {
			_, err := d.Client.Status(ctx, "k")
			return err
		}, unclear, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := desktest.StartDesk(t, nil)
			if err := d.Server.SetFaults(tt.faults); err != nil {
				t.Fatal(err)
			}
			if err := tt.call(d); !tt.want(err) {
				t.Fatalf("error %v is not what the client should see", err)
			}
			if n := d.Submissions(t); n != tt.stored {
				t.Fatalf("%d submissions stored, want %d", n, tt.stored)
			}
			if err := d.Server.SetFaults(provider.Faults{}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Client.Submit(ctx, "k", sub); err != nil {
				t.Fatalf("submit once the fault is cleared: %v", err)
			}
			if n := d.Submissions(t); n != 1 {
				t.Fatalf("%d submissions after the retry, want 1", n)
			}
		})
	}
}

func TestFaultKnobsOverHTTP(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	if resp, err := http.Get(d.URL + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	put := func(url, body string) int {
		req, _ := http.NewRequest(http.MethodPut, url+"/v1/faults", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(d.URL, `{"failNext":1}`); code != http.StatusOK {
		t.Fatalf("PUT /v1/faults: %d", code)
	}
	if _, err := d.Client.Status(context.Background(), "k"); err == nil {
		t.Fatal("failNext did not fail the next call")
	}
	for _, bad := range []string{`{"delay":"soon"}`, `{"holdAnswer":"2m"}`, `{"failNext":-1}`, `{"nope":true}`} {
		if code := put(d.URL, bad); code != http.StatusBadRequest {
			t.Fatalf("PUT %s: %d, want 400", bad, code)
		}
	}
	desk, err := provider.NewServer(d.DB, slog.New(slog.NewTextHandler(io.Discard, nil)), provider.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	off := httptest.NewServer(desk.Handler())
	defer off.Close()
	if code := put(off.URL, `{"down":true}`); code != http.StatusForbidden {
		t.Fatalf("faults on a desk without them: %d, want 403", code)
	}
}

// TestSubmissionsSurviveARestart: a new desk on the same database knows what
// the old one accepted.
func TestSubmissionsSurviveARestart(t *testing.T) {
	testenv.Long(t, "restarts the desk")
	t.Parallel()
	first := desktest.StartDesk(t, nil)
	r, err := first.Client.Submit(context.Background(), "demo-request:kept", sub)
	if err != nil {
		t.Fatal(err)
	}
	first.Stop()
	second := desktest.StartDesk(t, first.DB)
	if got, err := second.Client.Status(context.Background(), "demo-request:kept"); err != nil || got != withState(r, "accepted") {
		t.Fatalf("after a restart: %+v, %v; want %+v", got, err, r)
	}
}

// TestALostAnswerIsNotResentBehindTheCaller: Go's HTTP transport resends a
// request that carries an Idempotency-Key when a reused connection breaks.
// The client must not let it: the caller would never learn that an answer
// was lost, and a resend it did not decide would not be counted or asked
// about first.
func TestALostAnswerIsNotResentBehindTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.Submit(ctx, "warm", sub); err != nil { // the connection is now idle, to be reused
		t.Fatal(err)
	}
	d.Faults(t, provider.Faults{DropResponses: 1})
	var unclear *reviewdesk.UnclearError
	if _, err := d.Client.Submit(ctx, "k", sub); !errors.As(err, &unclear) {
		t.Fatalf("submit whose answer was dropped: %v, want an unclear outcome", err)
	}
}

func cancels(t *testing.T, d *desktest.Desk) int {
	return testenv.Count(t, d.DB, `SELECT count(*) FROM cancels`)
}

// TestCancelOnce: a cancel is accepted once under its own key, looked up by
// it, and refused for another submission or a second key; one that comes
// before its submission is kept.
func TestCancelOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.Submit(ctx, "demo-request:1", sub); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.CancelStatus(ctx, "demo-request:1:cancel"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("status of a cancel never sent: %v, want ErrNotFound", err)
	}
	first, err := d.Client.Cancel(ctx, "demo-request:1:cancel", "demo-request:1")
	if err != nil || !strings.HasPrefix(first.Reference, "RC-") || first.Key != "demo-request:1:cancel" {
		t.Fatalf("first cancel: %+v, %v", first, err)
	}
	if again, err := d.Client.Cancel(ctx, "demo-request:1:cancel", "demo-request:1"); err != nil || again != first {
		t.Fatalf("repeat: %+v, %v; want %+v", again, err, first)
	}
	if got, err := d.Client.CancelStatus(ctx, "demo-request:1:cancel"); err != nil || got != withState(first, "accepted") {
		t.Fatalf("cancel status: %+v, %v; want %+v", got, err, first)
	}
	var refused *reviewdesk.RefusedError
	if _, err := d.Client.Cancel(ctx, "demo-request:1:cancel", "demo-request:2"); !errors.As(err, &refused) || refused.Code != "key_payload_mismatch" {
		t.Fatalf("the cancel's key for another submission: %v, want key_payload_mismatch", err)
	}
	if _, err := d.Client.Cancel(ctx, "another-key", "demo-request:1"); !errors.As(err, &refused) || refused.Code != "already_cancelled" {
		t.Fatalf("a second key for the same submission: %v, want already_cancelled", err)
	}
	if _, err := d.Client.Cancel(ctx, "demo-request:2:cancel", "demo-request:2"); err != nil {
		t.Fatalf("a cancel before its submission: %v, want it kept", err)
	}
	if n := cancels(t, d); n != 2 {
		t.Fatalf("%d cancels, want 2", n)
	}
	resp, err := http.Get(d.URL + "/v1/submissions/demo-request:1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"state":"cancelled"`) || !strings.Contains(string(b), first.Reference) {
		t.Fatalf("the submission after its cancel: %s, want cancelled with %s", b, first.Reference)
	}
}

// TestCancelFaults: the knobs of the submissions act on cancels too.
func TestCancelFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	unclear := func(err error) bool { var u *reviewdesk.UnclearError; return errors.As(err, &u) }
	for _, tt := range []struct {
		name   string
		faults provider.Faults
		want   func(error) bool
		stored int
	}{
		{"fail the next call", provider.Faults{FailNext: 1}, unclear, 0},
		{"accept and drop the answer", provider.Faults{DropResponses: 1}, unclear, 1},
		{"refuse", provider.Faults{Refuse: true}, func(err error) bool {
			var r *reviewdesk.RefusedError
			return errors.As(err, &r) && r.Code == "cancel_refused"
		}, 0},
		{"down", provider.Faults{Down: true}, unclear, 0},
		{"delay past the caller's deadline", provider.Faults{Delay: "1m"}, unclear, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := desktest.StartDesk(t, nil)
			d.Faults(t, tt.faults)
			cctx, cancel := context.WithTimeout(ctx, callBound)
			defer cancel()
			if _, err := d.Client.Cancel(cctx, "c", "demo-request:1"); !tt.want(err) {
				t.Fatalf("error %v is not what the client should see", err)
			}
			if n := cancels(t, d); n != tt.stored {
				t.Fatalf("%d cancels stored, want %d", n, tt.stored)
			}
			d.Faults(t, provider.Faults{})
			if _, err := d.Client.CancelStatus(ctx, "c"); (err == nil) != (tt.stored == 1) {
				t.Fatalf("cancel status once the fault is cleared: %v", err)
			}
		})
	}
}

// The resources of an expedite: slots, their releases, charges and their
// refunds.

var slot = deskclient.Slot{RequestID: "8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11", Account: "alice"}

// chargeOf is a charge of amount for the slot under slotKey, for slot's
// account.
func chargeOf(slotKey string, amount int) deskclient.Charge {
	return deskclient.Charge{RequestID: slot.RequestID, Account: slot.Account, Amount: amount, SlotKey: slotKey}
}

func isUnclear(err error) bool { _, ok := errors.AsType[*reviewdesk.UnclearError](err); return ok }

// refusedWith reports whether err is a definite refusal with code.
func refusedWith(code string) func(error) bool {
	return func(err error) bool {
		r, ok := errors.AsType[*reviewdesk.RefusedError](err)
		return ok && r.Status == http.StatusUnprocessableEntity && r.Code == code
	}
}

// call sends a request to url and returns its status, headers and body.
func call(t *testing.T, method, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// slotState reads the state of the slot under key and what released it,
// in SQL.
func slotState(t *testing.T, d *desktest.Desk, key string) (state, releasedBy string) {
	t.Helper()
	var row struct {
		State      string `db:"state"`
		ReleasedBy string `db:"released_by"`
	}
	if err := d.DB.Get(&row, `SELECT state, coalesce(released_by, '') AS released_by FROM slots WHERE key = $1`, key); err != nil {
		t.Fatalf("slot %s: %v", key, err)
	}
	return row.State, row.ReleasedBy
}

// credit reads an account's credit in SQL; -1 when the desk never charged it.
func credit(t *testing.T, d *desktest.Desk, account string) int {
	t.Helper()
	return testenv.Count(t, d.DB, `SELECT coalesce((SELECT credit FROM accounts WHERE account = $1), -1)`, account)
}

// TestDeskSlotReserveOnce: a slot is held once under its key, its repeat
// answers the same slot, and its key with another payload is refused.
func TestDeskSlotReserveOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	status, header, body := call(t, http.MethodPost, d.URL+"/v1/slots", "expedite:1:slot", `{"requestId":"r1","account":"alice"}`)
	if status != http.StatusCreated || header.Get("Idempotent-Replayed") != "" || !strings.Contains(body, `"state":"held"`) {
		t.Fatalf("first reserve: %d %v %s", status, header, body)
	}
	status, header, again := call(t, http.MethodPost, d.URL+"/v1/slots", "expedite:1:slot", `{"requestId":"r1","account":"alice"}`)
	if status != http.StatusOK || header.Get("Idempotent-Replayed") != "true" || again != body {
		t.Fatalf("repeat: %d %v %s; want 200, replayed, %s", status, header, again, body)
	}
	for _, bad := range []string{`{"requestId":"r1"}`, `{"requestId":"","account":"alice"}`, `{"requestId":"r1","account":"alice","x":1}`, `[`} {
		if status, _, body := call(t, http.MethodPost, d.URL+"/v1/slots", "expedite:1:slot", bad); status != http.StatusBadRequest {
			t.Errorf("reserve with %s: %d %s, want 400", bad, status, body)
		}
	}
	for _, key := range []string{"", strings.Repeat("k", 256)} {
		if status, _, _ := call(t, http.MethodPost, d.URL+"/v1/slots", key, `{"requestId":"r1","account":"alice"}`); status != http.StatusBadRequest {
			t.Errorf("reserve under a key of %d characters: %d, want 400", len(key), status)
		}
	}

	first, err := d.Client.ReserveSlot(ctx, "expedite:2:slot", slot)
	if err != nil || !strings.HasPrefix(first.Reference, "RS-") || first.State != "held" || first.Key != "expedite:2:slot" {
		t.Fatalf("reserve: %+v, %v", first, err)
	}
	if again, err := d.Client.ReserveSlot(ctx, "expedite:2:slot", slot); err != nil || again != first {
		t.Fatalf("repeat: %+v, %v; want %+v", again, err, first)
	}
	other := slot
	other.Account = "bob"
	if _, err := d.Client.ReserveSlot(ctx, "expedite:2:slot", other); !refusedWith("key_payload_mismatch")(err) {
		t.Fatalf("another payload under the key: %v, want key_payload_mismatch", err)
	}
	if got, err := d.Client.SlotStatus(ctx, "expedite:2:slot"); err != nil || got != first {
		t.Fatalf("slot status: %+v, %v; want %+v", got, err, first)
	}
	if _, err := d.Client.SlotStatus(ctx, "expedite:never:slot"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("status of an unknown slot: %v, want ErrNotFound", err)
	}
	if status, _, body := call(t, http.MethodGet, d.URL+"/v1/slots/expedite:never:slot", "", ""); status != http.StatusNotFound ||
		!strings.Contains(body, `"state":"unknown"`) {
		t.Fatalf("GET an unknown slot: %d %s", status, body)
	}
	held := testenv.Count(t, d.DB, `SELECT count(*) FROM slots WHERE state = 'held' AND hold_until = accepted_at + interval '2 minutes'`)
	if n := testenv.Count(t, d.DB, `SELECT count(*) FROM slots`); n != 2 || held != 2 {
		t.Fatalf("%d slots, %d of them held for 2m; want 2 and 2", n, held)
	}
}

// TestDeskChargeDebitsOnce: 20 identical charges at once debit the account
// once and mark the slot charged; 20 charges of one slot under 20 keys
// take it once.
func TestDeskChargeDebitsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	for _, key := range []string{"expedite:1:slot", "expedite:2:slot"} {
		if _, err := d.Client.ReserveSlot(ctx, key, slot); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	together := func(fn func(i int) (reviewdesk.Receipt, error)) ([]reviewdesk.Receipt, []error) {
		receipts, errs := make([]reviewdesk.Receipt, n), make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				receipts[i], errs[i] = fn(i)
			})
		}
		close(start)
		wg.Wait()
		return receipts, errs
	}

	receipts, errs := together(func(int) (reviewdesk.Receipt, error) {
		return d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 300))
	})
	for i := range n {
		if errs[i] != nil || receipts[i] != receipts[0] || receipts[i].State != "charged" {
			t.Fatalf("charge %d: %+v, %v; want %+v", i, receipts[i], errs[i], receipts[0])
		}
	}
	if rows := testenv.Count(t, d.DB, `SELECT count(*) FROM charges WHERE slot_key = 'expedite:1:slot'`); rows != 1 {
		t.Fatalf("%d charges for one key, want 1", rows)
	}
	if c := credit(t, d, "alice"); c != 700 {
		t.Fatalf("credit %d after one charge of 300, want 700", c)
	}
	if state, _ := slotState(t, d, "expedite:1:slot"); state != "charged" {
		t.Fatalf("the slot is %s, want charged", state)
	}

	_, errs = together(func(i int) (reviewdesk.Receipt, error) {
		return d.Client.Charge(ctx, fmt.Sprintf("expedite:2:charge:%d", i), chargeOf("expedite:2:slot", 100))
	})
	accepted := 0
	for i := range n {
		switch {
		case errs[i] == nil:
			accepted++
		case !refusedWith("slot_not_held")(errs[i]):
			t.Fatalf("charge %d of a taken slot: %v, want slot_not_held", i, errs[i])
		}
	}
	if rows := testenv.Count(t, d.DB, `SELECT count(*) FROM charges WHERE slot_key = 'expedite:2:slot'`); accepted != 1 || rows != 1 {
		t.Fatalf("%d charges of one slot accepted, %d stored; want 1 and 1", accepted, rows)
	}
	if c := credit(t, d, "alice"); c != 600 {
		t.Fatalf("credit %d after charges of 300 and 100, want 600", c)
	}
}

// TestDeskChargeRefused: a charge that cannot be taken is refused
// definitely, and stores nothing: no charge, no debit, the slot as it was.
func TestDeskChargeRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		opts  provider.Options
		setup func(t *testing.T, d *desktest.Desk) // the slot expedite:1:slot is reserved
		ch    deskclient.Charge
		code  string
		slot  string // the slot's state afterwards
	}{
		{"no such slot", provider.DefaultOptions(), nil, chargeOf("expedite:none:slot", 100), "slot_not_held", "held"},
		{"a slot held for another account", provider.DefaultOptions(), nil,
			deskclient.Charge{RequestID: slot.RequestID, Account: "bob", Amount: 100, SlotKey: "expedite:1:slot"}, "slot_not_held", "held"},
		{"a released slot", provider.DefaultOptions(), func(t *testing.T, d *desktest.Desk) {
			if _, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot"); err != nil {
				t.Fatal(err)
			}
		}, chargeOf("expedite:1:slot", 100), "slot_not_held", "released"},
		{"a hold that ended, before the sweep", provider.Options{SlotHold: 200 * time.Millisecond, Credit: 1000}, func(t *testing.T, d *desktest.Desk) {
			time.Sleep(300 * time.Millisecond)
		}, chargeOf("expedite:1:slot", 100), "slot_not_held", "held"},
		{"insufficient credit", provider.Options{SlotHold: time.Minute, Credit: 50}, nil, chargeOf("expedite:1:slot", 51), "insufficient_credit", "held"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := desktest.StartDeskWith(t, nil, tt.opts)
			if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, d)
			}
			for range 2 { // a refusal stays one
				if _, err := d.Client.Charge(ctx, "expedite:1:charge", tt.ch); !refusedWith(tt.code)(err) {
					t.Fatalf("charge: %v, want a refusal %s", err, tt.code)
				}
			}
			if n := testenv.Count(t, d.DB, `SELECT count(*) FROM charges`); n != 0 {
				t.Fatalf("%d charges stored, want 0", n)
			}
			if n := testenv.Count(t, d.DB, `SELECT count(*) FROM accounts`); n != 0 {
				t.Fatalf("%d accounts opened by a refused charge, want 0", n)
			}
			if state, _ := slotState(t, d, "expedite:1:slot"); state != tt.slot {
				t.Fatalf("the slot is %s, want %s", state, tt.slot)
			}
			if _, err := d.Client.ChargeStatus(ctx, "expedite:1:charge"); !errors.Is(err, reviewdesk.ErrNotFound) {
				t.Fatalf("status of a refused charge: %v, want ErrNotFound", err)
			}
		})
	}
	t.Run("bodies", func(t *testing.T) {
		t.Parallel()
		d := desktest.StartDesk(t, nil)
		for _, bad := range []string{`{"requestId":"r","account":"a","amount":0,"slotKey":"s"}`, `{"requestId":"r","account":"a","amount":1001,"slotKey":"s"}`,
			`{"requestId":"r","account":"a","amount":1.5,"slotKey":"s"}`, `{"requestId":"r","account":"a","amount":1}`, `{"requestId":"r","account":"a","amount":1,"slotKey":"s","x":0}`} {
			if status, _, body := call(t, http.MethodPost, d.URL+"/v1/charges", "c", bad); status != http.StatusBadRequest {
				t.Errorf("charge %s: %d %s, want 400", bad, status, body)
			}
		}
	})
}

// TestDeskRelease: a release is accepted once under its own key and
// releases its slot; another key for the slot and the key for another slot
// are refused.
func TestDeskRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ReleaseStatus(ctx, "expedite:1:slot:release"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("status of a release never sent: %v, want ErrNotFound", err)
	}
	status, header, body := call(t, http.MethodPost, d.URL+"/v1/slots/expedite:1:slot/release", "expedite:1:slot:release", `{}`)
	if status != http.StatusCreated || header.Get("Idempotent-Replayed") != "" || !strings.Contains(body, `"slotKey":"expedite:1:slot"`) {
		t.Fatalf("first release: %d %v %s", status, header, body)
	}
	if status, header, again := call(t, http.MethodPost, d.URL+"/v1/slots/expedite:1:slot/release", "expedite:1:slot:release", `{}`); status != http.StatusOK ||
		header.Get("Idempotent-Replayed") != "true" || again != body {
		t.Fatalf("repeat: %d %v %s; want 200, replayed, %s", status, header, again, body)
	}
	first, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot")
	if err != nil || !strings.HasPrefix(first.Reference, "RL-") || first.State != "accepted" {
		t.Fatalf("release: %+v, %v", first, err)
	}
	if got, err := d.Client.ReleaseStatus(ctx, "expedite:1:slot:release"); err != nil || got != first {
		t.Fatalf("release status: %+v, %v; want %+v", got, err, first)
	}
	if _, err := d.Client.ReleaseSlot(ctx, "another-key", "expedite:1:slot"); !refusedWith("already_released")(err) {
		t.Fatalf("a second key for the slot: %v, want already_released", err)
	}
	if _, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:2:slot"); !refusedWith("key_payload_mismatch")(err) {
		t.Fatalf("the release's key for another slot: %v, want key_payload_mismatch", err)
	}
	if state, by := slotState(t, d, "expedite:1:slot"); state != "released" || by != "release" {
		t.Fatalf("the slot is %s by %q, want released by release", state, by)
	}
	if got, err := d.Client.SlotStatus(ctx, "expedite:1:slot"); err != nil || got.State != "released" {
		t.Fatalf("slot status: %+v, %v; want released", got, err)
	}
	if status, _, body := call(t, http.MethodGet, d.URL+"/v1/slots/expedite:1:slot", "", ""); !strings.Contains(body, `"releasedBy":"release"`) {
		t.Fatalf("GET the slot: %d %s, want releasedBy release", status, body)
	}
	if n := testenv.Count(t, d.DB, `SELECT count(*) FROM releases`); n != 1 {
		t.Fatalf("%d releases, want 1", n)
	}
}

// TestDeskReleaseBeforeSlot: a release that comes before its slot is kept,
// and the slot, when it comes, is released from the start: no charge can
// take it.
func TestDeskReleaseBeforeSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot"); err != nil {
		t.Fatalf("a release before its slot: %v, want it kept", err)
	}
	got, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot)
	if err != nil || got.State != "released" {
		t.Fatalf("the slot after its release: %+v, %v; want released", got, err)
	}
	if state, by := slotState(t, d, "expedite:1:slot"); state != "released" || by != "release" {
		t.Fatalf("the slot is %s by %q, want released by release", state, by)
	}
	if _, err := d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 100)); !refusedWith("slot_not_held")(err) {
		t.Fatalf("a charge of a slot released from the start: %v, want slot_not_held", err)
	}
}

// TestDeskReleaseOfAChargedSlot is refused, storing nothing; the charge
// stays.
func TestDeskReleaseOfAChargedSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot"); !refusedWith("slot_charged")(err) {
		t.Fatalf("release of a charged slot: %v, want slot_charged", err)
	}
	if n := testenv.Count(t, d.DB, `SELECT count(*) FROM releases`); n != 0 {
		t.Fatalf("%d releases stored, want 0", n)
	}
	if state, _ := slotState(t, d, "expedite:1:slot"); state != "charged" {
		t.Fatalf("the slot is %s, want charged", state)
	}
}

// TestDeskReleaseRacesCharge: a release and a charge of one slot at once;
// exactly one of them takes it.
func TestDeskReleaseRacesCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	const n = 10
	for i := range n {
		if _, err := d.Client.ReserveSlot(ctx, fmt.Sprintf("expedite:%d:slot", i), slot); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	released, charged := make([]error, n), make([]error, n)
	for i := range n {
		slotKey := fmt.Sprintf("expedite:%d:slot", i)
		wg.Go(func() {
			<-start
			_, released[i] = d.Client.ReleaseSlot(ctx, slotKey+":release", slotKey)
		})
		wg.Go(func() {
			<-start
			_, charged[i] = d.Client.Charge(ctx, fmt.Sprintf("expedite:%d:charge", i), chargeOf(slotKey, 10))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		state, _ := slotState(t, d, fmt.Sprintf("expedite:%d:slot", i))
		switch {
		case released[i] == nil && refusedWith("slot_not_held")(charged[i]) && state == "released":
		case charged[i] == nil && refusedWith("slot_charged")(released[i]) && state == "charged":
		default:
			t.Errorf("slot %d: release %v, charge %v, state %s; want one of them to win", i, released[i], charged[i], state)
		}
	}
	charges := testenv.Count(t, d.DB, `SELECT count(*) FROM charges`)
	if c := credit(t, d, "alice"); charges > 0 && c != 1000-10*charges {
		t.Fatalf("%d charges of 10 and credit %d", charges, c)
	}
	if releases := testenv.Count(t, d.DB, `SELECT count(*) FROM releases`); releases+charges != n {
		t.Fatalf("%d releases and %d charges of %d slots", releases, charges, n)
	}
}

// TestDeskOneCompensationKeyForManyTargets: one release key sent for ten
// slots at once, or one refund key for ten charges, is accepted for one of
// them; the others are told the key was used for another.
func TestDeskOneCompensationKeyForManyTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	const n = 10
	for i := range n {
		slotKey := fmt.Sprintf("expedite:%d:slot", i)
		if _, err := d.Client.ReserveSlot(ctx, slotKey, slot); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := d.Client.Charge(ctx, fmt.Sprintf("expedite:%d:charge", i), chargeOf(slotKey, 10)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tt := range []struct {
		name string
		send func(i int) error
		rows string
	}{
		{"release", func(i int) error {
			_, err := d.Client.ReleaseSlot(ctx, "one-release-key", fmt.Sprintf("expedite:%d:slot", 2*i+1))
			return err
		}, `SELECT count(*) FROM releases`},
		{"refund", func(i int) error {
			_, err := d.Client.Refund(ctx, "one-refund-key", fmt.Sprintf("expedite:%d:charge", 2*i))
			return err
		}, `SELECT count(*) FROM refunds`},
	} {
		errs := make([]error, n/2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n / 2 {
			wg.Go(func() {
				<-start
				errs[i] = tt.send(i)
			})
		}
		close(start)
		wg.Wait()
		accepted := 0
		for i, err := range errs {
			switch {
			case err == nil:
				accepted++
			case !refusedWith("key_payload_mismatch")(err):
				t.Fatalf("%s %d under a key taken meanwhile: %v, want key_payload_mismatch", tt.name, i, err)
			}
		}
		if rows := testenv.Count(t, d.DB, tt.rows); accepted != 1 || rows != 1 {
			t.Fatalf("%ss under one key: %d accepted, %d stored; want 1 and 1", tt.name, accepted, rows)
		}
	}
	if released := testenv.Count(t, d.DB, `SELECT count(*) FROM slots WHERE state = 'released'`); released != 1 {
		t.Fatalf("%d slots released, want 1", released)
	}
	if c := credit(t, d, "alice"); c != 1000-5*10+10 {
		t.Fatalf("credit %d after five charges of 10 and one refund, want %d", c, 1000-5*10+10)
	}
}

// TestDeskRefundOnce: a refund gives the amount back once, under its own
// key, however often and however many at once send it.
func TestDeskRefundOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	charge, err := d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 300))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.RefundStatus(ctx, "expedite:1:charge:refund"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("status of a refund never sent: %v, want ErrNotFound", err)
	}
	const n = 20
	receipts, errs := make([]reviewdesk.Receipt, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			receipts[i], errs[i] = d.Client.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge")
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || receipts[i] != receipts[0] || !strings.HasPrefix(receipts[i].Reference, "RF-") {
			t.Fatalf("refund %d: %+v, %v; want %+v", i, receipts[i], errs[i], receipts[0])
		}
	}
	if c := credit(t, d, "alice"); c != 1000 {
		t.Fatalf("credit %d after a charge of 300 and its refund, want 1000", c)
	}
	if got, err := d.Client.RefundStatus(ctx, "expedite:1:charge:refund"); err != nil || got != receipts[0] {
		t.Fatalf("refund status: %+v, %v; want %+v", got, err, receipts[0])
	}
	if got, err := d.Client.ChargeStatus(ctx, "expedite:1:charge"); err != nil || got != withState(charge, "refunded") {
		t.Fatalf("charge status: %+v, %v; want %+v refunded", got, err, charge)
	}
	if _, err := d.Client.Refund(ctx, "another-key", "expedite:1:charge"); !refusedWith("already_refunded")(err) {
		t.Fatalf("a second key for the charge: %v, want already_refunded", err)
	}
	if _, err := d.Client.Refund(ctx, "expedite:1:charge:refund", "expedite:2:charge"); !refusedWith("key_payload_mismatch")(err) {
		t.Fatalf("the refund's key for another charge: %v, want key_payload_mismatch", err)
	}
	if n := testenv.Count(t, d.DB, `SELECT count(*) FROM refunds`); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
	if c := credit(t, d, "alice"); c != 1000 {
		t.Fatalf("credit %d after the refusals, want 1000", c)
	}
	if state, _ := slotState(t, d, "expedite:1:slot"); state != "charged" {
		t.Fatalf("the slot after its charge's refund is %s, want charged", state)
	}
}

// TestDeskRefundBeforeCharge: a refund that comes before its charge is
// kept, and the charge, when it comes, is refunded from the start: its slot
// is taken, its account's credit is left as it was.
func TestDeskRefundBeforeCharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if _, err := d.Client.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge"); err != nil {
		t.Fatalf("a refund before its charge: %v, want it kept", err)
	}
	if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	got, err := d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 300))
	if err != nil || got.State != "refunded" {
		t.Fatalf("the charge after its refund: %+v, %v; want refunded", got, err)
	}
	if c := credit(t, d, "alice"); c != 1000 {
		t.Fatalf("credit %d, want 1000", c)
	}
	if state, _ := slotState(t, d, "expedite:1:slot"); state != "charged" {
		t.Fatalf("the slot is %s, want charged", state)
	}
	if again, err := d.Client.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge"); err != nil || again.State != "accepted" {
		t.Fatalf("the refund again: %+v, %v", again, err)
	}
	if c := credit(t, d, "alice"); c != 1000 {
		t.Fatalf("credit %d after the refund's repeat, want 1000", c)
	}
}

// TestDeskHoldExpiry: the sweep releases every slot held past its hold,
// each exactly once however many sweeps run at once, and leaves charged,
// released and still held slots alone.
func TestDeskHoldExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The hold is long enough for the set-up below to charge and release
	// two of the slots inside it on a loaded machine.
	const hold = 2 * time.Second
	d := desktest.StartDeskWith(t, nil, provider.Options{SlotHold: hold, Credit: 1000})
	reserved := time.Now()
	for i := range 6 {
		if _, err := d.Client.ReserveSlot(ctx, fmt.Sprintf("expedite:%d:slot", i), slot); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Client.Charge(ctx, "expedite:0:charge", chargeOf("expedite:0:slot", 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ReleaseSlot(ctx, "expedite:1:slot:release", "expedite:1:slot"); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Server.ReleaseExpiredHolds(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep before the holds end: %d, %v; want 0", n, err)
	}
	time.Sleep(time.Until(reserved.Add(hold + 100*time.Millisecond)))
	// A slot reserved now is held past the sweep.
	if _, err := d.Client.ReserveSlot(ctx, "expedite:late:slot", slot); err != nil {
		t.Fatal(err)
	}
	const sweeps = 8
	counts, errs := make([]int, sweeps), make([]error, sweeps)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sweeps {
		wg.Go(func() {
			<-start
			counts[i], errs[i] = d.Server.ReleaseExpiredHolds(ctx)
		})
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range sweeps {
		if errs[i] != nil {
			t.Fatalf("sweep %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	if total != 4 {
		t.Fatalf("%d sweeps released %v, %d slots in all; want 4", sweeps, counts, total)
	}
	if n, err := d.Server.ReleaseExpiredHolds(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep after: %d, %v; want 0", n, err)
	}
	for key, want := range map[string][2]string{
		"expedite:0:slot":    {"charged", ""},
		"expedite:1:slot":    {"released", "release"},
		"expedite:2:slot":    {"released", "hold_expired"},
		"expedite:5:slot":    {"released", "hold_expired"},
		"expedite:late:slot": {"held", ""},
	} {
		if state, by := slotState(t, d, key); state != want[0] || by != want[1] {
			t.Errorf("slot %s: %s by %q, want %s by %q", key, state, by, want[0], want[1])
		}
	}
	if status, _, body := call(t, http.MethodGet, d.URL+"/v1/slots/expedite:2:slot", "", ""); status != http.StatusOK ||
		!strings.Contains(body, `"state":"released"`) || !strings.Contains(body, `"releasedBy":"hold_expired"`) {
		t.Fatalf("GET an expired slot: %d %s", status, body)
	}
	if _, err := d.Client.ReleaseSlot(ctx, "expedite:2:slot:release", "expedite:2:slot"); err != nil {
		t.Fatalf("the release of an expired slot: %v, want it accepted", err)
	}
	if _, by := slotState(t, d, "expedite:2:slot"); by != "hold_expired" {
		t.Fatalf("the expired slot after its release: released by %q, want hold_expired", by)
	}
}

// TestDeskSweepHolds: the background sweep releases an expired hold, and
// stops when its context ends.
func TestDeskSweepHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDeskWith(t, nil, provider.Options{SlotHold: 100 * time.Millisecond, Credit: 1000})
	sweepCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Server.SweepHolds(sweepCtx); close(done) }()
	if _, err := d.Client.ReserveSlot(ctx, "expedite:1:slot", slot); err != nil {
		t.Fatal(err)
	}
	if !testenv.Eventually(5*time.Second, func() bool {
		r, err := d.Client.SlotStatus(ctx, "expedite:1:slot")
		return err == nil && r.State == "released"
	}) {
		t.Fatal("the sweep did not release the expired hold within 5s")
	}
	if _, by := slotState(t, d, "expedite:1:slot"); by != "hold_expired" {
		t.Fatalf("released by %q, want hold_expired", by)
	}
	stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("SweepHolds did not stop with its context")
	}
}

// resource is one of the desk's resources as the fault tests call it.
type resource struct {
	name   string
	call   func(context.Context, *desktest.Desk) error // a new call
	status func(context.Context, *desktest.Desk) error // its lookup
	rows   string                                      // counts what the call stores
}

// resources are the desk's resources, each with a call needing no other.
// The charge's slot is reserved before the faults are set.
var resources = []resource{
	{"submissions",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error { _, err := d.Client.Status(ctx, "k"); return err },
		`SELECT count(*) FROM submissions`},
	{"cancels",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.Cancel(ctx, "k:cancel", "k-cancelled")
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.CancelStatus(ctx, "k:cancel")
			return err
		},
		`SELECT count(*) FROM cancels`},
	{"slots",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.ReserveSlot(ctx, "s", slot)
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error { _, err := d.Client.SlotStatus(ctx, "s"); return err },
		`SELECT count(*) FROM slots WHERE key = 's'`},
	{"releases",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.ReleaseSlot(ctx, "r", "r-slot")
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.ReleaseStatus(ctx, "r")
			return err
		},
		`SELECT count(*) FROM releases`},
	{"charges",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.Charge(ctx, "c", chargeOf("c-slot", 100))
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.ChargeStatus(ctx, "c")
			return err
		},
		`SELECT count(*) FROM charges`},
	{"refunds",
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.Refund(ctx, "f", "f-charge")
			return err
		},
		func(ctx context.Context, d *desktest.Desk) error {
			_, err := d.Client.RefundStatus(ctx, "f")
			return err
		},
		`SELECT count(*) FROM refunds`},
}

// TestDeskFaultsOnlyOneResource: each knob aimed at one resource (only)
// acts on it as on submissions, and leaves the others healthy, their
// counts of failNext and dropResponses untouched.
func TestDeskFaultsOnlyOneResource(t *testing.T) {
	t.Parallel()
	for _, knob := range []struct {
		name   string
		faults provider.Faults
		want   func(res string) func(error) bool
		stored int
		status bool // the target's lookup fails too
		// later: the delayed call goes on at the desk after its sender
		// left, so it may be stored by the time the fault is cleared.
		later bool
	}{
		{"delay", provider.Faults{Delay: "1m"}, func(string) func(error) bool { return isUnclear }, 0, true, true},
		{"failNext", provider.Faults{FailNext: 1}, func(string) func(error) bool { return isUnclear }, 0, false, false},
		{"holdAnswer", provider.Faults{HoldAnswer: "1m"}, func(string) func(error) bool { return isUnclear }, 1, false, false},
		{"dropResponses", provider.Faults{DropResponses: 1}, func(string) func(error) bool { return isUnclear }, 1, false, false},
		{"refuse", provider.Faults{Refuse: true}, func(res string) func(error) bool {
			return refusedWith(map[string]string{"submissions": "submission_refused", "cancels": "cancel_refused", "slots": "slot_refused",
				"releases": "release_refused", "charges": "charge_refused", "refunds": "refund_refused"}[res])
		}, 0, false, false},
		{"down", provider.Faults{Down: true}, func(string) func(error) bool { return isUnclear }, 0, true, false},
	} {
		for _, target := range resources {
			t.Run(knob.name+"/"+target.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				d := desktest.StartDesk(t, nil)
				if _, err := d.Client.ReserveSlot(ctx, "c-slot", slot); err != nil {
					t.Fatal(err)
				}
				f := knob.faults
				f.Only = []string{target.name}
				d.Faults(t, f)
				// A deadline the delay and the held answer pass, which a
				// healthy call meets.
				bounded := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, callBound) }
				for _, other := range resources {
					if other.name == target.name {
						continue
					}
					cctx, cancel := bounded()
					err, serr := other.call(cctx, d), other.status(cctx, d)
					cancel()
					if err != nil || serr != nil {
						t.Fatalf("%s while %s is aimed at %s: %v, its status %v; want healthy", other.name, knob.name, target.name, err, serr)
					}
					if n := testenv.Count(t, d.DB, other.rows); n != 1 {
						t.Fatalf("%d %s stored, want 1", n, other.name)
					}
				}
				cctx, cancel := bounded()
				err := target.call(cctx, d)
				cancel()
				if !knob.want(target.name)(err) {
					t.Fatalf("%s under %s: %v, not what the client should see", target.name, knob.name, err)
				}
				if n := testenv.Count(t, d.DB, target.rows); n != knob.stored {
					t.Fatalf("%d %s stored, want %d", n, target.name, knob.stored)
				}
				if knob.status {
					cctx, cancel := bounded()
					err := target.status(cctx, d)
					cancel()
					if !isUnclear(err) {
						t.Fatalf("%s's status under %s: %v, want unclear", target.name, knob.name, err)
					}
				}
				d.Faults(t, provider.Faults{})
				if err := target.status(ctx, d); !knob.later && (err == nil) != (knob.stored == 1) {
					t.Fatalf("%s's status once the fault is cleared: %v, want found %v", target.name, err, knob.stored == 1)
				}
				if err := target.call(ctx, d); err != nil {
					t.Fatalf("%s once the fault is cleared: %v", target.name, err)
				}
				if n := testenv.Count(t, d.DB, target.rows); n != 1 {
					t.Fatalf("%d %s after the retry, want 1", n, target.name)
				}
			})
		}
	}
}

// TestDeskFaultsOnlyOverHTTP: only takes the desk's resource names and is
// echoed; another name is refused.
func TestDeskFaultsOnlyOverHTTP(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	status, _, body := call(t, http.MethodPut, d.URL+"/v1/faults", "", `{"down":true,"only":["charges","refunds"]}`)
	if status != http.StatusOK || !strings.Contains(body, `"only":["charges","refunds"]`) {
		t.Fatalf("PUT only: %d %s", status, body)
	}
	if _, err := d.Client.ChargeStatus(context.Background(), "c"); !isUnclear(err) {
		t.Fatalf("a charge's status while charges are down: %v, want unclear", err)
	}
	if _, err := d.Client.SlotStatus(context.Background(), "s"); !errors.Is(err, reviewdesk.ErrNotFound) {
		t.Fatalf("a slot's status while charges are down: %v, want ErrNotFound", err)
	}
	if _, err := d.Client.Stats(context.Background()); err != nil {
		t.Fatalf("stats while charges are down: %v", err)
	}
	for _, bad := range []string{`{"only":["slot"]}`, `{"only":"slots"}`} {
		if status, _, body := call(t, http.MethodPut, d.URL+"/v1/faults", "", bad); status != http.StatusBadRequest {
			t.Fatalf("PUT %s: %d %s, want 400", bad, status, body)
		}
	}
	if got := (provider.Faults{Down: true, Only: []string{"slots", "charges"}}).String(); !strings.Contains(got, "only=slots,charges") {
		t.Fatalf("Faults.String: %s", got)
	}
	if got := (provider.Faults{}).String(); !strings.Contains(got, "only=all") {
		t.Fatalf("Faults.String of no faults: %s", got)
	}
}

// TestDeskStats: the counts of each resource and each account's credit.
func TestDeskStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := desktest.StartDesk(t, nil)
	if st, err := d.Client.Stats(ctx); err != nil || st.Submissions != 0 || st.Slots != (deskclient.SlotCounts{}) || len(st.Credit) != 0 {
		t.Fatalf("stats of a new desk: %+v, %v", st, err)
	}
	must := func(_ reviewdesk.Receipt, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.Client.Submit(ctx, "k", sub))
	must(d.Client.Cancel(ctx, "k:cancel", "k"))
	for i := range 3 {
		must(d.Client.ReserveSlot(ctx, fmt.Sprintf("expedite:%d:slot", i), slot))
	}
	must(d.Client.ReserveSlot(ctx, "expedite:bob:slot", deskclient.Slot{RequestID: "r", Account: "bob"}))
	must(d.Client.Charge(ctx, "expedite:0:charge", chargeOf("expedite:0:slot", 250)))
	must(d.Client.Charge(ctx, "expedite:1:charge", chargeOf("expedite:1:slot", 100)))
	must(d.Client.Charge(ctx, "expedite:bob:charge", deskclient.Charge{RequestID: "r", Account: "bob", Amount: 1000, SlotKey: "expedite:bob:slot"}))
	must(d.Client.Refund(ctx, "expedite:1:charge:refund", "expedite:1:charge"))
	must(d.Client.ReleaseSlot(ctx, "expedite:2:slot:release", "expedite:2:slot"))
	must(d.Client.ReleaseSlot(ctx, "expedite:later:slot:release", "expedite:later:slot"))
	got, err := d.Client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := deskclient.Stats{Submissions: 1, Cancels: 1, Slots: deskclient.SlotCounts{Held: 0, Charged: 3, Released: 1},
		Releases: 2, Charges: 3, Refunds: 1, Credit: map[string]int{"alice": 750, "bob": 0}}
	if got.Submissions != want.Submissions || got.Cancels != want.Cancels || got.Slots != want.Slots || got.Releases != want.Releases ||
		got.Charges != want.Charges || got.Refunds != want.Refunds || !maps.Equal(got.Credit, want.Credit) {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	d.Faults(t, provider.Faults{Down: true})
	if _, err := d.Client.Stats(ctx); err != nil {
		t.Fatalf("stats while the desk is down: %v", err)
	}
}

// TestDeskOptions: NewServer refuses a hold or a credit out of range.
func TestDeskOptions(t *testing.T) {
	t.Parallel()
	db := desktest.StartDesk(t, nil).DB
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bad := range []provider.Options{{}, {SlotHold: -time.Second, Credit: 10}, {SlotHold: 25 * time.Hour},
		{SlotHold: time.Minute, Credit: -1}, {SlotHold: time.Minute, Credit: provider.MaxCredit + 1}} {
		if _, err := provider.NewServer(db, logger, bad); err == nil {
			t.Errorf("NewServer with %+v: no error", bad)
		}
	}
	if _, err := provider.NewServer(db, logger, provider.Options{SlotHold: time.Millisecond}); err != nil {
		t.Errorf("NewServer with a 1ms hold and no credit: %v", err)
	}
}

// TestDeskFaultsPerAccount: faults aimed at an account apply to the calls
// made for it only, are set and cleared apart from the desk's and from
// other accounts', and while it holds some the desk's own do not apply to
// its calls.
func TestDeskFaultsPerAccount(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	ana := deskclient.WithAccount(context.Background(), "ana")
	ben := deskclient.WithAccount(context.Background(), "ben")
	plain := context.Background()
	submit := func(ctx context.Context, key string) error {
		_, err := d.Client.Submit(ctx, key, sub)
		return err
	}
	d.Faults(t, provider.Faults{Account: "ana", Down: true})
	if err := submit(ana, "ana-1"); !isUnclear(err) {
		t.Fatalf("ana's submission while her desk is down: %v, want unclear", err)
	}
	if _, err := d.Client.Status(ana, "ana-1"); !isUnclear(err) {
		t.Fatalf("ana's status lookup while her desk is down: %v, want unclear", err)
	}
	for name, ctx := range map[string]context.Context{"ben": ben, "no account": plain} {
		if err := submit(ctx, "other-"+name); err != nil {
			t.Fatalf("%s's submission while only ana's desk is down: %v", name, err)
		}
	}
	// The desk's own faults: for every account without faults of its own.
	d.Faults(t, provider.Faults{Refuse: true})
	if err := submit(ben, "ben-2"); !refusedWith("submission_refused")(err) {
		t.Fatalf("ben's submission while the desk refuses: %v, want a refusal", err)
	}
	if err := submit(ana, "ana-2"); !isUnclear(err) {
		t.Fatalf("ana's submission while her own desk is down: %v, want unclear, her own faults", err)
	}
	// Another account's faults leave ana's alone; clearing hers brings the
	// desk's back for her.
	d.Faults(t, provider.Faults{Account: "ben", FailNext: 1})
	if err := submit(ana, "ana-3"); !isUnclear(err) {
		t.Fatalf("ana's submission after ben set his: %v, want unclear", err)
	}
	d.Faults(t, provider.Faults{Account: "ana"})
	if err := submit(ana, "ana-4"); !refusedWith("submission_refused")(err) {
		t.Fatalf("ana's submission once hers are cleared: %v, want the desk's refusal", err)
	}
	if err := submit(ben, "ben-3"); !isUnclear(err) {
		t.Fatalf("ben's submission under his failNext: %v, want unclear (503)", err)
	}
	d.Faults(t, provider.Faults{})
	if err := submit(ben, "ben-4"); err != nil {
		t.Fatalf("ben's next submission, his failNext spent: %v", err)
	}
	if err := submit(ana, "ana-1"); err != nil {
		t.Fatalf("ana's retry once every fault is cleared: %v", err)
	}

	// Over HTTP: an account's faults are echoed, and read back by account.
	status, _, body := call(t, http.MethodPut, d.URL+"/v1/faults", "", `{"down":true,"account":"cy"}`)
	if status != http.StatusOK || !strings.Contains(body, `"account":"cy"`) {
		t.Fatalf("PUT an account's faults: %d %s", status, body)
	}
	if status, _, body := call(t, http.MethodGet, d.URL+"/v1/faults?account=cy", "", ""); status != http.StatusOK || !strings.Contains(body, `"down":true`) {
		t.Fatalf("GET cy's faults: %d %s", status, body)
	}
	if status, _, body := call(t, http.MethodGet, d.URL+"/v1/faults", "", ""); status != http.StatusOK || strings.Contains(body, `"down"`) {
		t.Fatalf("GET the desk's faults: %d %s, want none", status, body)
	}
	if status, _, body := call(t, http.MethodPut, d.URL+"/v1/faults", "", `{"down":true,"account":"`+strings.Repeat("a", 65)+`"}`); status != http.StatusBadRequest {
		t.Fatalf("PUT a 65-character account: %d %s, want 400", status, body)
	}
	if got := (provider.Faults{Down: true, Account: "cy"}).String(); !strings.Contains(got, "account=cy") {
		t.Fatalf("Faults.String: %s", got)
	}
}

// TestOversizeBody: the desk answers a body over its limit 413
// body_too_large, as sent or as declared (at once, before the body, as the
// API does).
func TestOversizeBody(t *testing.T) {
	t.Parallel()
	d := desktest.StartDesk(t, nil)
	big := `{"requestId":"` + sub.RequestID + `","topic":"billing","note":"` + strings.Repeat("x", 20<<10) + `"}`
	for _, route := range []string{"/v1/submissions", "/v1/faults"} {
		method := http.MethodPost
		if route == "/v1/faults" {
			method = http.MethodPut
		}
		req, _ := http.NewRequest(method, d.URL+route, strings.NewReader(big))
		req.Header.Set("Idempotency-Key", "k-big")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || p.Code != "body_too_large" ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %s of %d bytes: %d %q, want 413 body_too_large", method, route, len(big), resp.StatusCode, p.Code)
		}
	}

	// Declared over the limit, also under the 256 KiB Go's server would read
	// (and wait for) before it answers on a connection it keeps, and without
	// a key: 413 at once, closing the connection, before a body that never comes.
	u, _ := url.Parse(d.URL)
	for _, request := range []string{"POST /v1/submissions", "PUT /v1/faults", "POST /v1/slots"} {
		for _, key := range []string{"Idempotency-Key: k-declared\r\n", ""} {
			for _, declared := range []int{16<<10 + 1, 128 << 10, 256<<10 - 1, 1 << 20} {
				conn, err := net.Dial("tcp", u.Host)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
					request, u.Host, key, declared)
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Fatalf("%s, %q, declared %d bytes: no answer: %v", request, key, declared, err)
				}
				resp.Body.Close()
				conn.Close()
				if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
					t.Fatalf("%s, %q, declared %d bytes: %d (closing: %v), want 413 and the connection closed",
						request, key, declared, resp.StatusCode, resp.Close)
				}
			}
		}
	}
}
