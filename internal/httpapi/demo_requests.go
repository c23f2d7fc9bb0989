package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// operations are the routes of the API's operations: the demo requests'
// create and cancel, then the service's own (Deps.Routes). A new operation is
// its constructor below and one line here; NewServer refuses an incomplete one.
func (s *Server) operations() ([]Route, error) {
	var routes []Route
	var errs []error
	add := func(r Route, err error) { routes, errs = append(routes, r), append(errs, err) }
	add(Idempotent(s, createDemoRequest(s.Demo, s.Writes)))
	add(Idempotent(s, cancelDemoRequest(s.Demo, s.Writes)))
	if s.Routes != nil {
		more, err := s.Routes(s)
		routes, errs = append(routes, more...), append(errs, err)
	}
	return routes, errors.Join(errs...)
}

// createDemoRequest is POST /v1/demo-requests: file a demo request. Its work
// is one database write decided in Go (the id, the refusal rule, the answer),
// so it takes the one-phase path.
func createDemoRequest(svc *demo.Service, writes Writes) Operation[demo.CreateInput, demo.Request] {
	return Operation[demo.CreateInput, demo.Request]{
		Method: http.MethodPost, Pattern: "/v1/demo-requests",
		Name: "demo-requests.create",
		Path: idempotency.OnePhase,
		Decode: func(w http.ResponseWriter, r *http.Request) (demo.CreateInput, error) {
			var in demo.CreateInput
			if err := DecodeJSON(w, r, &in); err != nil {
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

// OneRequest is what an operation on one request names: the request, from
// the path. A key reused for another request is a different intent (422).
type OneRequest struct{ ID string }

// DecodeOneRequest reads the request named by the path's {id}.
func DecodeOneRequest(_ http.ResponseWriter, r *http.Request) (OneRequest, error) {
	return OneRequest{ID: chi.URLParam(r, "id")}, nil
}

// Significant is the request's id.
func (in OneRequest) Significant() map[string]any { return map[string]any{"requestId": in.ID} }

// cancelDemoRequest is POST /v1/demo-requests/{id}/cancel, idempotent on a
// state change: the first cancel with a key answers 200 and its retries
// replay it; a new key on a cancelled request gets 422
// request_not_cancellable, stored and replayed like any answer.
func cancelDemoRequest(svc *demo.Service, writes Writes) Operation[OneRequest, demo.Request] {
	return Operation[OneRequest, demo.Request]{
		Method: http.MethodPost, Pattern: "/v1/demo-requests/{id}/cancel",
		Name:        "demo-requests.cancel",
		Path:        idempotency.OnePhase,
		Decode:      DecodeOneRequest,
		Significant: OneRequest.Significant,
		Decide: func(ctx context.Context, actor string, in OneRequest, now time.Time) (demo.Request, error) {
			return svc.Cancel(ctx, actor, in.ID, now)
		},
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
	for k, v := range header {
		h[k] = v
	}
	return idempotency.Response{Status: status, Header: h, Body: body, ResultID: dr.ID}, nil
}

func requestURL(id string) string { return "/v1/demo-requests/" + url.PathEscape(id) }

// handleGetDemoRequest is GET /v1/demo-requests/{id}: the caller's own
// request only; another actor's id is 404 like an unknown one.
func handleGetDemoRequest(logger *slog.Logger, svc *demo.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dr, err := svc.Get(r.Context(), ActorOf(r), chi.URLParam(r, "id"))
		if err != nil {
			WriteError(logger, w, r, err)
			return
		}
		WriteJSON(w, http.StatusOK, dr)
	})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
