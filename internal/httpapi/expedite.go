package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/reviewdesk"
)

// ExpediteOperation names the expedite's keys.
const ExpediteOperation = "demo-requests.expedite"

// ExpediteDesk is what an expedite needs of the review desk
// (reviewdesk.Client): a keyed call and a status lookup for each step and
// for the slot's release.
type ExpediteDesk interface {
	ReserveSlot(ctx context.Context, key string, s reviewdesk.Slot) (reviewdesk.Receipt, error)
	SlotStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
	ReleaseSlot(ctx context.Context, key, slotKey string) (reviewdesk.Receipt, error)
	ReleaseStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
	Charge(ctx context.Context, key string, ch reviewdesk.Charge) (reviewdesk.Receipt, error)
	ChargeStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
}

// ExpediteWrites makes the business changes of an expedite: each commits
// with a recovery point or with the run's answer.
type ExpediteWrites interface {
	demo.ExpediteStore
	OrderExpedite(actor string, e demo.Expedite) idempotency.Effect
	ConfirmExpedite(id, slot, charge string, now time.Time) idempotency.Effect
	RefuseExpedite(id, code string, now time.Time) idempotency.Effect
}

// expediteInput is what an expedite names: the request, from the path.
type expediteInput struct {
	RequestID string `json:"requestId"`
}

// The expedite's recovery points, one per step.
const (
	pointOrdered      = "ordered"
	pointSlotReserved = "slot_reserved"
	pointCharged      = "charged"
)

// Expedite is POST /v1/demo-requests/{id}/expedite, an operation of several
// steps: it pays for an express review of a request at the review desk.
//
//  1. ordered: the order is recorded here (local);
//  2. slot_reserved: an express slot is reserved at the desk, under the
//     key expedite:<id>:slot;
//  3. charged: the actor's credit is charged at the desk, under
//     expedite:<id>:charge;
//  4. the finish: the order is confirmed with the answer, 201.
//
// The desk's keys come from the request id, so every runner of the intent
// sends the same ones. A refusal by the desk releases the slot (under
// expedite:<id>:slot:release) and stores 422 expedite_refused. Resuming,
// fencing and undoing are the Runner's (idempotency.Steps); this is only
// the list. The completer runs the same list (cmd/demo-api).
func Expedite(svc *demo.Service, writes ExpediteWrites, desk ExpediteDesk) *idempotency.Steps {
	input := func(run *idempotency.Run) expediteInput {
		var in expediteInput
		json.Unmarshal(run.Input, &in) // written by decode below
		return in
	}
	slotKey := func(run *idempotency.Run) string { return "expedite:" + input(run).RequestID + ":slot" }
	return &idempotency.Steps{
		Operation:   ExpediteOperation,
		MaxAttempts: 8,
		Limit:       10 * time.Minute,
		Steps: []idempotency.Step{
			{Name: pointOrdered, Local: func(ctx context.Context, run *idempotency.Run, now time.Time) (idempotency.Effect, error) {
				e, recorded, err := svc.OrderExpedite(ctx, writes, run.Scope.Actor, input(run).RequestID, run.Scope.Key, now)
				switch {
				case err != nil:
					return nil, refusalOf(err)
				case recorded:
					return nil, nil
				}
				return writes.OrderExpedite(run.Scope.Actor, e), nil
			}},
			{Name: pointSlotReserved, External: &idempotency.External{
				Key: slotKey,
				Call: func(ctx context.Context, key string, run *idempotency.Run) (string, error) {
					return deskRef(desk.ReserveSlot(reviewdesk.WithAccount(ctx, run.Scope.Actor), key, reviewdesk.Slot{RequestID: input(run).RequestID, Account: run.Scope.Actor}))
				},
				Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.SlotStatus(ctx, key)) },
				Undo: &idempotency.External{
					Key: func(run *idempotency.Run) string { return slotKey(run) + ":release" },
					Call: func(ctx context.Context, key string, run *idempotency.Run) (string, error) {
						return deskRef(desk.ReleaseSlot(reviewdesk.WithAccount(ctx, run.Scope.Actor), key, slotKey(run)))
					},
					Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.ReleaseStatus(ctx, key)) },
				},
			}},
			{Name: pointCharged, External: &idempotency.External{
				Key: func(run *idempotency.Run) string { return "expedite:" + input(run).RequestID + ":charge" },
				Call: func(ctx context.Context, key string, run *idempotency.Run) (string, error) {
					return deskRef(desk.Charge(reviewdesk.WithAccount(ctx, run.Scope.Actor), key, reviewdesk.Charge{RequestID: input(run).RequestID,
						Account: run.Scope.Actor, Amount: demo.ExpediteAmount, SlotKey: slotKey(run)}))
				},
				Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.ChargeStatus(ctx, key)) },
			}},
		},
		Finish: func(ctx context.Context, run *idempotency.Run, now time.Time) (idempotency.Decided, error) {
			e, err := writes.Expedite(ctx, run.Scope.Actor, input(run).RequestID)
			if err != nil {
				return idempotency.Decided{}, err
			}
			e.State, e.SlotReference, e.ChargeReference = demo.ExpediteConfirmed, run.Refs[pointSlotReserved], run.Refs[pointCharged]
			e.UpdatedAt = now.UTC().Truncate(time.Microsecond)
			body, err := json.Marshal(e)
			if err != nil {
				return idempotency.Decided{}, fmt.Errorf("encode expedite: %w", err)
			}
			return idempotency.Decided{
				Response: idempotency.Response{Status: http.StatusCreated, Body: body, ResultID: e.RequestID,
					Header: map[string]string{"Content-Type": "application/json", "Location": requestURL(e.RequestID) + "/expedite"}},
				Effect: writes.ConfirmExpedite(e.RequestID, e.SlotReference, e.ChargeReference, e.UpdatedAt),
			}, nil
		},
		Refused: func(run *idempotency.Run, now time.Time) idempotency.Effect {
			if run.Point == "" {
				return nil // refused before the order was recorded
			}
			var p struct{ Code string }
			json.Unmarshal(run.Refusal.Body, &p)
			return writes.RefuseExpedite(input(run).RequestID, p.Code, now.UTC().Truncate(time.Microsecond))
		},
	}
}

// refusalOf turns a business refusal (an *apperr.Error of a 4xx) into the
// step's definite refusal, with its rendered answer; any other error stays
// transient.
func refusalOf(err error) error {
	if e, ok := errors.AsType[*apperr.Error](err); ok {
		if resp := render(e); resp.Status < 500 {
			return &idempotency.Refusal{Response: resp, Reason: e.Code}
		}
	}
	return err
}

// deskRef reads a desk call's outcome as a step's: its reference; a
// definite refusal as the expedite's refusal; never accepted as
// idempotency.ErrNotSent; anything else unclear (transient).
func deskRef(rc reviewdesk.Receipt, err error) (string, error) {
	var refused *reviewdesk.RefusedError
	switch {
	case err == nil:
		return rc.Reference, nil
	case errors.Is(err, reviewdesk.ErrNotFound):
		return "", idempotency.ErrNotSent
	case errors.As(err, &refused):
		return "", refusalOf(apperr.Errorf(apperr.ExpediteRefused, "the review desk refused: %s (%s)", refused.Detail, refused.Code))
	}
	return "", err
}

// stepOperation is an operation of several steps: the transport decodes
// its input and names its intent, and the Runner runs the steps
// (idempotency.Steps).
type stepOperation[In any] struct {
	decode      func(w http.ResponseWriter, r *http.Request) (In, error)
	significant func(In) map[string]any
	steps       *idempotency.Steps
}

func expediteOperation(steps *idempotency.Steps) stepOperation[expediteInput] {
	return stepOperation[expediteInput]{
		decode: func(w http.ResponseWriter, r *http.Request) (expediteInput, error) {
			return expediteInput{RequestID: chi.URLParam(r, "id")}, nil
		},
		significant: func(in expediteInput) map[string]any { return map[string]any{"requestId": in.RequestID} },
		steps:       steps,
	}
}

// stepRoute is the route of op, or an error naming what op lacks.
func stepRoute[In any](s *server, method, pattern string, op stepOperation[In]) (route, error) {
	if op.decode == nil || op.significant == nil || op.steps == nil {
		return route{}, errors.New("httpapi: an operation of several steps needs decode, significant and steps")
	}
	if err := op.steps.Check(); err != nil {
		return route{}, err
	}
	return route{method: method, pattern: pattern, operation: op.steps.Operation, stepWise: true, handler: stepwise(s, op)}, nil
}

// stepwise is the handler of op.
func stepwise[In any](s *server, op stepOperation[In]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, err := readIntent(s, w, r, op.steps.Operation, idempotency.StepWise, op.decode, op.significant)
		if err == nil && it.knobs.stopAfter != "" && !op.steps.HasStep(it.knobs.stopAfter) {
			err = apperr.Errorf(apperr.InvalidHeader, "%s must name a step of %s", HeaderStopAfter, op.steps.Operation)
		}
		if err != nil {
			writeError(s.Logger, w, r, err)
			return
		}
		input, err := json.Marshal(it.in)
		if err != nil {
			writeError(s.Logger, w, r, fmt.Errorf("encode input: %w", err))
			return
		}
		// The desk's calls of the run, its status lookups too, are made
		// for the caller's account.
		ctx := reviewdesk.WithAccount(r.Context(), it.req.Scope.Actor)
		res, err := s.idem.DoSteps(ctx, it.req, it.knobs.wrap(op.steps), input)
		s.answer(w, r, it.req.Scope, it.attempt, it.knobs, res, operatorsPart(it.req.Scope, err))
	})
}

// operatorsPart says, in the answer to a request whose run needs attention
// (409, no Retry-After), what an operator runs to resume it once its cause
// is dealt with (docs/steps.md); any other err passes unchanged.
func operatorsPart(sc idempotency.Scope, err error) error {
	if !errors.Is(err, idempotency.ErrRunNeedsAttention) {
		return err
	}
	return &apperr.Error{Code: apperr.OperationInProgress, Err: err, Message: fmt.Sprintf(
		"the run of this idempotency key needs attention: it stopped at its limit, and no retry moves it until an operator, "+
			"once its cause is dealt with, resumes it with `demo-api resume-run --actor %s --operation %s --key %s` "+
			"(docs/steps.md, \"Needs attention\"); the outcome route shows its last error",
		shellWord(sc.Actor), shellWord(sc.Operation), shellWord(sc.Key))}
}

// shellWord is s as one word of a POSIX shell command line: as it is when
// it holds no character the shell reads, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@%+=,/-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// handleGetExpedite is GET /v1/demo-requests/{id}/expedite: the order of
// the caller's request as it stands (ordered while its steps run).
func handleGetExpedite(logger *slog.Logger, svc *demo.Service, expedites demo.ExpediteStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if _, err := svc.Get(r.Context(), actorOf(r), id); err != nil {
			writeError(logger, w, r, err)
			return
		}
		e, err := expedites.Expedite(r.Context(), actorOf(r), id)
		if err != nil {
			writeError(logger, w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, e)
	})
}
