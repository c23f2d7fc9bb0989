package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// createDemoRequest is POST /v1/demo-requests: file a demo request. Its work
// is one database write decided in Go (the id, the refusal rule, the answer),
// so it takes the one-phase path.
func createDemoRequest(svc *demo.Service, writes DemoWrites) operation[demo.CreateInput, demo.Request] {
	return operation[demo.CreateInput, demo.Request]{
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
		write: writes.InsertDemoRequest,
	}
}

// cancelInput is what a cancel names: the request, from the path. A key
// reused to cancel another request is a different intent (422).
type cancelInput struct{ id string }

// cancelDemoRequest is POST /v1/demo-requests/{id}/cancel: idempotent on a
// state change rather than a creation. The first cancel with a key answers
// 200 with the cancelled request, and its retries replay that answer; a
// cancel with a new key of a request that is already cancelled gets 422
// request_not_cancellable, stored and replayed like any answer.
func cancelDemoRequest(svc *demo.Service, writes DemoWrites) operation[cancelInput, demo.Request] {
	return operation[cancelInput, demo.Request]{
		name: "demo-requests.cancel",
		path: idempotency.OnePhase,
		decode: func(w http.ResponseWriter, r *http.Request) (cancelInput, error) {
			return cancelInput{id: chi.URLParam(r, "id")}, nil
		},
		significant: func(in cancelInput) map[string]any { return map[string]any{"requestId": in.id} },
		decide: func(ctx context.Context, actor string, in cancelInput, now time.Time) (demo.Request, error) {
			return svc.Cancel(ctx, actor, in.id, now)
		},
		render: func(dr demo.Request) (idempotency.Response, error) {
			return renderRequest(http.StatusOK, dr, nil)
		},
		write: writes.CancelDemoRequest,
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
