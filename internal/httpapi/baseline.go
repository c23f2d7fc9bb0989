package httpapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/demo"
)

// BaselinePath is the route of the benchmark's baseline: POST a create body
// there and the demo request is inserted with no idempotency key, claim or
// stored response. It exists only when Deps.Baseline is set (make bench
// starts the server with BENCH_BASELINE=true); it is no part of the API.
const BaselinePath = "/v1/bench/demo-requests"

// BaselineStore inserts a demo request with one plain INSERT and returns it
// as stored (its CreatedAt set by the store).
type BaselineStore interface {
	InsertDemoRequest(ctx context.Context, r demo.Request) (demo.Request, error)
}

// handleBaselineCreate is POST /v1/bench/demo-requests: the same decoding,
// validation, business row and 201 response as POST /v1/demo-requests,
// without the idempotency layer (no key, no fingerprint, no claim, no
// finish), so the benchmark can tell what that layer costs.
func handleBaselineCreate(logger *slog.Logger, store BaselineStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := decodeCreateInput(w, r)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		dr, err := store.InsertDemoRequest(r.Context(), demo.Request{
			ID:    uuid.NewString(),
			Actor: actorOf(r),
			State: demo.StateAccepted,
			Topic: in.Topic,
			Note:  in.Note,
		})
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		resp, err := created(dr)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		writeResponse(w, resp, false)
	})
}
