package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// handleCreateDemoRequest is POST /v1/demo-requests. Everything about the
// request is checked before the key is claimed, so a bad request stores
// nothing; the work after the claim runs once per intent.
func handleCreateDemoRequest(logger *slog.Logger, idem *idempotency.Runner, svc *demo.Service, ws workshop) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := idempotency.ParseKey(r.Header.Values("Idempotency-Key"))
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		scope := idempotency.Scope{Actor: actorOf(r), Operation: demo.OperationCreate, Key: key}
		noteKey(r, scope)
		in, err := decodeCreateInput(w, r)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		knobs, err := ws.knobs(r)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		fp, err := idempotency.Fingerprint(in.Significant())
		if err != nil {
			writeError(logger, w, r, err)
			return
		}

		res, err := idem.Do(r.Context(), scope, fp, func(ctx context.Context, c idempotency.Claim) (idempotency.Response, error) {
			if err := knobs.afterClaim(ctx); err != nil {
				return idempotency.Response{}, err
			}
			return svc.Create(ctx, c, in, created)
		})
		info(r).outcome = res.Outcome
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		if knobs.dropResponse {
			dropConnection(logger, w, r)
			return
		}
		writeResponse(w, res.Response, res.Replayed)
	})
}

// decodeCreateInput decodes and validates the body of a create.
func decodeCreateInput(w http.ResponseWriter, r *http.Request) (demo.CreateInput, error) {
	var in demo.CreateInput
	if err := decodeJSON(w, r, &in); err != nil {
		return in, err
	}
	return in, in.Validate()
}

// created renders the stored response of a created demo request.
func created(dr demo.Request) (idempotency.Response, error) {
	body, err := json.Marshal(dr)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("encode demo request: %w", err)
	}
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{
			"Content-Type": "application/json",
			"Location":     "/v1/demo-requests/" + url.PathEscape(dr.ID),
		},
		Body:     body,
		ResultID: dr.ID,
	}, nil
}

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
