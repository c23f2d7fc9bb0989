package workshop_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/workshop"
)

// TestKnobsAreALayer: the knobs reach an attempt only through their layer.
// Without knobs the request and its work are the route's own; with them
// the request takes the two-phase path with its TTL, the work is held (or
// fails) before it decides, and an answer (not an error) is dropped: the
// connection closes with no response. A bad knob is refused before the
// route runs.
func TestKnobsAreALayer(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	type attempt struct {
		req     idempotency.Request // as the run got it
		decided bool                // the work ran past the knobs' hold
	}
	attempts := make(chan attempt, 1) // one per request the route ran
	var runErr error                  // what the run answers; set between requests
	route := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a attempt
		defer func() { attempts <- a }()
		run := workshop.Around(func(ctx context.Context, req idempotency.Request, work idempotency.Work) (idempotency.Result, error) {
			a.req = req
			_, err := work(ctx, time.Now())
			return idempotency.Result{}, cmp.Or(err, runErr)
		})
		_, err := run(r.Context(), idempotency.Request{Path: idempotency.OnePhase}, func(context.Context, time.Time) (idempotency.Answer, error) {
			a.decided = true
			return idempotency.Answer{}, nil
		})
		if err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "{}")
	})
	srv := httptest.NewServer(accesslog.Requests(logger, nil)(workshop.Layer(logger, workshop.Knobs(10*time.Second))(route)))
	t.Cleanup(srv.Close)
	send := func(header map[string]string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	resp, err := send(nil)
	if a := <-attempts; err != nil || resp.StatusCode != http.StatusCreated || a.req.Path != idempotency.OnePhase || a.req.TTL != 0 || !a.decided {
		t.Fatalf("no knobs: %v, %v, %+v; want 201, the route's own request, its work run", resp, err, a)
	}
	_, err = send(map[string]string{workshop.HeaderTTL: "5s", workshop.HeaderDropResponse: "true"})
	if a := <-attempts; err == nil || a.req.Path != idempotency.TwoPhase || a.req.TTL != 5*time.Second || !a.decided {
		t.Fatalf("a dropped answer: %v, %+v; want no response, the two-phase path, a TTL of 5s, its work run", err, a)
	}
	runErr = errors.New("the store failed")
	resp, err = send(map[string]string{workshop.HeaderDropResponse: "true"})
	if <-attempts; err != nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("an error with the drop knob: %v, %v; want the error's 500, not dropped", resp, err)
	}
	runErr = nil
	resp, err = send(map[string]string{workshop.HeaderFail: "after-claim"})
	if a := <-attempts; err != nil || resp.StatusCode != http.StatusServiceUnavailable || a.decided {
		t.Fatalf("Workshop-Fail: %v, %v, %+v; want 503 before the work decides", resp, err, a)
	}
	resp, err = send(map[string]string{workshop.HeaderTTL: "1ms"})
	if err != nil || resp.StatusCode != http.StatusBadRequest || len(attempts) != 0 {
		t.Fatalf("a bad knob: %v, %v, %d attempts; want 400 before the route runs", resp, err, len(attempts))
	}
}
