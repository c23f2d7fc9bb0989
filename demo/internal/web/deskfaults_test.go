package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/postgres"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestDeskFaults: PUT /workshop/desk-faults hands a JSON object to the
// desk, aimed at the caller's own account (another account is refused),
// refuses anything else with a problem, and is not routed without the
// workshop.
func TestDeskFaults(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	set := func(_ context.Context, f json.RawMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(f))
		if strings.Contains(string(f), "refused") {
			return apperr.Errorf(apperr.WorkshopDisabled, "the review desk refuses its fault knobs")
		}
		if strings.Contains(string(f), "zz") { // as serve words the desk's refusal
			return apperr.Errorf(apperr.InvalidField, "the review desk refused these faults: delay must be a duration")
		}
		return nil
	}
	withDeskFaults := func(d *httpapi.Deps, _ *postgres.Store) {
		if !d.Workshop {
			return // routed only with the workshop, as the demo's serve does
		}
		d.Routes = func(srv *httpapi.Server) ([]httpapi.Route, error) {
			return []httpapi.Route{{Method: http.MethodPut, Pattern: "/workshop/desk-faults", Handler: web.DeskFaults(srv.Logger, set)}}, nil
		}
	}
	put := func(e *testenv.Env, body string) testenv.Reply {
		return e.Must(testenv.Req{Method: http.MethodPut, Path: "/workshop/desk-faults", Token: testenv.TokenAlice, Body: body})
	}
	e := testenv.New(t, testenv.WithWorkshop(), withDeskFaults)
	cases := []struct {
		body   string
		status int
		code   string
	}{
		{`{"down":true}`, 200, ""},
		{`{}`, 200, ""},
		{`[1]`, 400, apperr.MalformedJSON},
		{`{"down":`, 400, apperr.MalformedJSON},
		{`{"refused":true}`, 400, apperr.WorkshopDisabled},
		{`{"delay":"zz"}`, 400, apperr.InvalidField},
		{`{"delay":"` + strings.Repeat("9", 5000) + `"}`, 413, apperr.BodyTooLarge},
		{`{"down":true,"account":"bob"}`, 400, apperr.InvalidField},
		{`{"down":true,"account":7}`, 400, apperr.InvalidField},
		{`{"failNext":2,"account":"alice"}`, 200, ""},
	}
	for _, c := range cases {
		r := put(e, c.body)
		if r.Status != c.status || (c.code != "" && r.Problem(t) != c.code) {
			t.Errorf("PUT %.30s: %d %s, want %d %s", c.body, r.Status, r.Body, c.status, c.code)
		}
	}
	if r := e.Must(testenv.Req{Method: http.MethodPut, Path: "/workshop/desk-faults", Body: `{}`}); r.Status != 401 {
		t.Errorf("without a token: %d, want 401", r.Status)
	}
	if r := put(e, `{"down":true}`); r.Status != 200 || !strings.Contains(string(r.Body), `"account":"alice"`) {
		t.Errorf("the echo of alice's faults: %d %s, want them with her account", r.Status, r.Body)
	}
	if strings.Join(got, " ") != `{"account":"alice","down":true} {"account":"alice"} {"account":"alice","refused":true} {"account":"alice","delay":"zz"} {"account":"alice","failNext":2} {"account":"alice","down":true}` {
		t.Errorf("the desk was handed %q", got)
	}
	if r := put(testenv.New(t, withDeskFaults), `{}`); r.Status != 404 {
		t.Errorf("with the workshop off: %d, want 404", r.Status)
	}
}
