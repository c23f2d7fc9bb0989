package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/body"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
)

// operations are the routes of the operations: the demo requests', then the
// service's own (Deps.Routes). A new one is a constructor and a line here.
func (s *api) operations() ([]Route, error) {
	var routes []Route
	var errs []error
	add := func(r Route, err error) { routes, errs = append(routes, r), append(errs, err) }
	add(Idempotent(s.ops, createDemoRequest(s.Demo, s.Writes)))
	add(Idempotent(s.ops, cancelDemoRequest(s.Demo, s.Writes)))
	if s.Routes != nil {
		more, err := s.Routes(s.ops)
		routes, errs = append(routes, more...), append(errs, err)
	}
	return routes, errors.Join(errs...)
}

// createDemoRequest is POST /v1/demo-requests: its work is one database
// write decided in Go (id, refusal, answer), so it takes the one-phase path:
// the key, the request and its outbox row commit in one statement.
func createDemoRequest(svc DemoRequests, writes Writes) Operation[demo.CreateInput, demo.Request] {
	return Operation[demo.CreateInput, demo.Request]{
		Method: http.MethodPost, Pattern: "/v1/demo-requests",
		Name: "demo-requests.create",
		Path: idempotency.OnePhase,
		Decode: func(w http.ResponseWriter, r *http.Request) (demo.CreateInput, error) {
			var in demo.CreateInput
			if err := body.DecodeJSON(w, r, &in); err != nil {
				return in, err
			}
			return in, in.Validate()
		},
		Significant: demo.CreateInput.Significant,
		Decide: func(_ context.Context, actor string, in demo.CreateInput, now time.Time) (demo.Request, error) {
			return svc.Create(actor, in, now)
		},
		Render: func(dr demo.Request) (idempotency.Response, error) {
			return renderRequest(http.StatusCreated, dr, map[string]string{"Location": requestURL(dr.ID)})
		},
		Effect: writes.CreateDemoRequest,
	}
}

// cancelDemoRequest is POST /v1/demo-requests/{id}/cancel; its input is the
// id, so a key reused for another request is another intent (422). A cancel
// is a state change, not a create, and the same Operation serves it: its
// effect applies only while the row is as the work read it, else nothing
// commits and the work decides again.
func cancelDemoRequest(svc DemoRequests, writes Writes) Operation[string, demo.Request] {
	return Operation[string, demo.Request]{
		Method: http.MethodPost, Pattern: "/v1/demo-requests/{id}/cancel",
		Name: "demo-requests.cancel",
		Path: idempotency.OnePhase,
		Decode: func(_ http.ResponseWriter, r *http.Request) (string, error) {
			return chi.URLParam(r, "id"), nil
		},
		Significant: func(id string) map[string]any { return map[string]any{"requestId": id} },
		Decide:      svc.Cancel,
		Render: func(dr demo.Request) (idempotency.Response, error) {
			return renderRequest(http.StatusOK, dr, nil)
		},
		Effect: writes.CancelDemoRequest,
	}
}

// renderRequest renders a demo request as the answer to store.
func renderRequest(status int, dr demo.Request, header map[string]string) (idempotency.Response, error) {
	body, err := json.Marshal(dr)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("encode demo request: %w", err)
	}
	h := map[string]string{"Content-Type": "application/json"}
	maps.Copy(h, header)
	return idempotency.Response{Status: status, Header: h, Body: body, ResultID: dr.ID}, nil
}

func requestURL(id string) string { return "/v1/demo-requests/" + url.PathEscape(id) }

// handleGetDemoRequest is GET /v1/demo-requests/{id}: another actor's id is 404, as an unknown one.
func handleGetDemoRequest(logger *slog.Logger, svc DemoRequests) http.Handler {
	return handleRead(logger, func(r *http.Request) (demo.Request, error) {
		return svc.Get(r.Context(), ActorOf(r), chi.URLParam(r, "id"))
	})
}

// handleRead answers what read finds as JSON, or its error as a problem.
// Reads need no key: running them twice changes nothing.
func handleRead[T any](logger *slog.Logger, read func(r *http.Request) (T, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := read(r)
		if err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		WriteJSON(w, http.StatusOK, v)
	})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
