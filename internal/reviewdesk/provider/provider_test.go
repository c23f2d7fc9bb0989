package provider_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/reviewdesk/provider"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var sub = reviewdesk.Submission{RequestID: "8a0d8f0e-8d8e-4d0f-9f4c-5a3f4f0b2c11", Topic: "billing", Note: "call me"}

// withState is r as a lookup answers it: with its state.
func withState(r reviewdesk.Receipt, state string) reviewdesk.Receipt {
	r.State = state
	return r
}

func TestSubmitOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testkit.StartDesk(t, nil)
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
	d := testkit.StartDesk(t, nil)
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
		call   func(d *testkit.Desk) error
		want   func(error) bool
		stored int
	}{
		{"delay past the caller's deadline", provider.Faults{Delay: "500ms"}, func(d *testkit.Desk) error {
			ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 0},
		{"fail the next call", provider.Faults{FailNext: 1}, func(d *testkit.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 0},
		{"accept and hold the answer past the caller's deadline", provider.Faults{HoldAnswer: "1m"}, func(d *testkit.Desk) error {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 1},
		{"accept and drop the answer", provider.Faults{DropResponses: 1}, func(d *testkit.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, unclear, 1},
		{"refuse", provider.Faults{Refuse: true}, func(d *testkit.Desk) error {
			_, err := d.Client.Submit(ctx, "k", sub)
			return err
		}, func(err error) bool { var r *reviewdesk.RefusedError; return errors.As(err, &r) && r.Status == 422 }, 0},
		{"down", provider.Faults{Down: true}, func(d *testkit.Desk) error {
			_, err := d.Client.Status(ctx, "k")
			return err
		}, unclear, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := testkit.StartDesk(t, nil)
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
	d := testkit.StartDesk(t, nil)
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
	t.Parallel()
	first := testkit.StartDesk(t, nil)
	r, err := first.Client.Submit(context.Background(), "demo-request:kept", sub)
	if err != nil {
		t.Fatal(err)
	}
	first.Stop()
	second := testkit.StartDesk(t, first.DB)
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
	d := testkit.StartDesk(t, nil)
	if _, err := d.Client.Submit(ctx, "warm", sub); err != nil { // the connection is now idle, to be reused
		t.Fatal(err)
	}
	d.Faults(t, provider.Faults{DropResponses: 1})
	var unclear *reviewdesk.UnclearError
	if _, err := d.Client.Submit(ctx, "k", sub); !errors.As(err, &unclear) {
		t.Fatalf("submit whose answer was dropped: %v, want an unclear outcome", err)
	}
}

func cancels(t *testing.T, d *testkit.Desk) int {
	return testkit.Count(t, d.DB, `SELECT count(*) FROM cancels`)
}

// TestCancelOnce: a cancel is accepted once under its own key, looked up by
// it, and refused for another submission or a second key; one that comes
// before its submission is kept.
func TestCancelOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testkit.StartDesk(t, nil)
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
		{"delay past the caller's deadline", provider.Faults{Delay: "500ms"}, unclear, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := testkit.StartDesk(t, nil)
			d.Faults(t, tt.faults)
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
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
