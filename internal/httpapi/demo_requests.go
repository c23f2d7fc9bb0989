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

// operations are the idempotent operations of the API, each with its
// route: routes.go serves them, and the outcome route knows their names.
// A new operation is its constructor below and one line here. An
// operation that lacks a part, or names an effect the store does not
// have, is refused by NewServer.
func (s *server) operations() ([]route, error) {
	var routes []route
	var errs []error
	add := func(r route, err error) { routes, errs = append(routes, r), append(errs, err) }
	add(idempotentRoute(s, createDemoRequest(s.Demo)))
	add(idempotentRoute(s, cancelDemoRequest(s.Demo)))
	// demo-only{ the expedite, an operation of several steps
	if s.Desk != nil {
		add(stepRoute(s, http.MethodPost, "/v1/demo-requests/{id}/expedite", expediteOperation(Expedite(s.Demo, s.Expedites, s.Desk))))
	}
	// }demo-only
	return routes, errors.Join(errs...)
}

// createDemoRequest is POST /v1/demo-requests: file a demo request. Its work
// is one database write decided in Go (the id, the refusal rule, the answer),
// so it takes the one-phase path.
func createDemoRequest(svc *demo.Service) operation[demo.CreateInput, demo.Request] {
	return operation[demo.CreateInput, demo.Request]{
		method: http.MethodPost, pattern: "/v1/demo-requests",
		name: "demo-requests.create",
		path: idempotency.OnePhase,
		decode: func(w http.ResponseWriter, r *http.Request) (demo.CreateInput, error) {
			var in demo.CreateInput
			if err := decodeJSON(w, r, &in); err != nil {
				return in, err
			}
			return in, in.Validate()
		},
		significant: demo.CreateInput.Significant,
		decide: func(_ context.Context, actor string, in demo.CreateInput, now time.Time) (demo.Request, error) {
			return svc.Create(actor, in, now)
		},
		render: func(dr demo.Request) (idempotency.Response, error) {
			return renderRequest(http.StatusCreated, dr, map[string]string{"Location": requestURL(dr.ID)})
		},
		effect: "create_demo_request.sql",
		args:   func(r demo.Request) []any { return []any{r.ID, r.State, r.Topic, r.Note, r.CreatedAt} },
	}
}

// oneRequest is what an operation on one request names: the request, from
// the path. A key reused for another request is a different intent (422).
type oneRequest struct{ id string }

func decodeOneRequest(_ http.ResponseWriter, r *http.Request) (oneRequest, error) {
	return oneRequest{id: chi.URLParam(r, "id")}, nil
}

func (in oneRequest) significant() map[string]any { return map[string]any{"requestId": in.id} }

// cancelDemoRequest is POST /v1/demo-requests/{id}/cancel: idempotent on a
// state change rather than a creation. The first cancel with a key answers
// 200 with the cancelled request, and its retries replay that answer; a
// cancel with a new key of a request that is already cancelled gets 422
// request_not_cancellable, stored and replayed like any answer.
func cancelDemoRequest(svc *demo.Service) operation[oneRequest, demo.Request] {
	return operation[oneRequest, demo.Request]{
		method: http.MethodPost, pattern: "/v1/demo-requests/{id}/cancel",
		name:        "demo-requests.cancel",
		path:        idempotency.OnePhase,
		decode:      decodeOneRequest,
		significant: oneRequest.significant,
		decide: func(ctx context.Context, actor string, in oneRequest, now time.Time) (demo.Request, error) {
			return svc.Cancel(ctx, actor, in.id, now)
		},
		render: func(dr demo.Request) (idempotency.Response, error) {
			return renderRequest(http.StatusOK, dr, nil)
		},
		effect: "cancel_demo_request.sql",
		args:   func(r demo.Request) []any { return []any{r.State, r.CancelledAt, r.ID} },
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
		dr, err := svc.Get(r.Context(), actorOf(r), chi.URLParam(r, "id"))
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, dr)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
