package expedite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/steps"
	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/problem"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/workshop"
)

// HeaderStopAfter, a workshop knob, the name of a step of the expedite
// (such as "slot_reserved"), ends the run after that step as if its runner
// died there: the connection closes without an answer, and the run waits at
// its recovery point, its lease passed, for the next retry or the completer
// to resume it. A request that carries it for a run already past that step
// (the stopped request sent again unchanged, as a browser does on a reused
// connection) runs nothing and stops there too: only a retry without it
// resumes the run.
const HeaderStopAfter = "Workshop-Stop-After"

// ExpediteOperation names the expedite's keys.
const ExpediteOperation = "demo-requests.expedite"

// ExpediteDesk is what an expedite needs of the review desk
// (deskclient.Client): a keyed call and a status lookup for each step and
// for the slot's release.
type ExpediteDesk interface {
	ReserveSlot(ctx context.Context, key string, s deskclient.Slot) (reviewdesk.Receipt, error)
	SlotStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
	ReleaseSlot(ctx context.Context, key, slotKey string) (reviewdesk.Receipt, error)
	ReleaseStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
	Charge(ctx context.Context, key string, ch deskclient.Charge) (reviewdesk.Receipt, error)
	ChargeStatus(ctx context.Context, key string) (reviewdesk.Receipt, error)
}

// ExpediteWrites makes the business changes of an expedite: each commits
// with a recovery point or with the run's answer.
type ExpediteWrites interface {
	ExpediteStore
	OrderExpedite(actor string, e Expedite) idempotency.Effect
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

// Steps is POST /v1/demo-requests/{id}/expedite, an operation of several
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
// fencing and undoing are the Runner's (steps.Steps); this is only
// the list. The completer runs the same list (cmd/demo-api).
func Steps(svc *demo.Service, writes ExpediteWrites, desk ExpediteDesk) *steps.Steps {
	input := func(run *steps.Run) expediteInput {
		var in expediteInput
		json.Unmarshal(run.Input, &in) // written by decode below
		return in
	}
	slotKey := func(run *steps.Run) string { return "expedite:" + input(run).RequestID + ":slot" }
	return &steps.Steps{
		Operation:   ExpediteOperation,
		MaxAttempts: 8,
		Limit:       10 * time.Minute,
		Steps: []steps.Step{
			{Name: pointOrdered, Local: func(ctx context.Context, run *steps.Run, now time.Time) (idempotency.Effect, error) {
				e, recorded, err := Order(ctx, svc, writes, run.Scope.Actor, input(run).RequestID, run.Scope.Key, now)
				switch {
				case err != nil:
					return nil, refusalOf(err)
				case recorded:
					return nil, nil
				}
				return writes.OrderExpedite(run.Scope.Actor, e), nil
			}},
			{Name: pointSlotReserved, External: &steps.External{
				Key: slotKey,
				Call: func(ctx context.Context, key string, run *steps.Run) (string, error) {
					return deskRef(desk.ReserveSlot(deskclient.WithAccount(ctx, run.Scope.Actor), key, deskclient.Slot{RequestID: input(run).RequestID, Account: run.Scope.Actor}))
				},
				Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.SlotStatus(ctx, key)) },
				Undo: &steps.External{
					Key: func(run *steps.Run) string { return slotKey(run) + ":release" },
					Call: func(ctx context.Context, key string, run *steps.Run) (string, error) {
						return deskRef(desk.ReleaseSlot(deskclient.WithAccount(ctx, run.Scope.Actor), key, slotKey(run)))
					},
					Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.ReleaseStatus(ctx, key)) },
				},
			}},
			{Name: pointCharged, External: &steps.External{
				Key: func(run *steps.Run) string { return "expedite:" + input(run).RequestID + ":charge" },
				Call: func(ctx context.Context, key string, run *steps.Run) (string, error) {
					return deskRef(desk.Charge(deskclient.WithAccount(ctx, run.Scope.Actor), key, deskclient.Charge{RequestID: input(run).RequestID,
						Account: run.Scope.Actor, Amount: ExpediteAmount, SlotKey: slotKey(run)}))
				},
				Status: func(ctx context.Context, key string) (string, error) { return deskRef(desk.ChargeStatus(ctx, key)) },
			}},
		},
		Finish: func(ctx context.Context, run *steps.Run, now time.Time) (idempotency.Answer, error) {
			e, err := writes.Expedite(ctx, run.Scope.Actor, input(run).RequestID)
			if err != nil {
				return idempotency.Answer{}, err
			}
			e.State, e.SlotReference, e.ChargeReference = ExpediteConfirmed, run.Refs[pointSlotReserved], run.Refs[pointCharged]
			e.UpdatedAt = now.UTC().Truncate(time.Microsecond)
			body, err := json.Marshal(e)
			if err != nil {
				return idempotency.Answer{}, fmt.Errorf("encode expedite: %w", err)
			}
			return idempotency.Answer{
				Response: idempotency.Response{Status: http.StatusCreated, Body: body, ResultID: e.RequestID,
					Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/demo-requests/" + url.PathEscape(e.RequestID) + "/expedite"}},
				Effect: writes.ConfirmExpedite(e.RequestID, e.SlotReference, e.ChargeReference, e.UpdatedAt),
			}, nil
		},
		Refused: func(run *steps.Run, now time.Time) idempotency.Effect {
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
		if resp := problem.Render(e); resp.Status < 500 {
			return &steps.Refusal{Response: resp, Reason: e.Code}
		}
	}
	return err
}

// deskRef reads a desk call's outcome as a step's: its reference; a
// definite refusal as the expedite's refusal; never accepted as
// steps.ErrNotSent; anything else unclear (transient).
func deskRef(rc reviewdesk.Receipt, err error) (string, error) {
	var refused *reviewdesk.RefusedError
	switch {
	case err == nil:
		return rc.Reference, nil
	case errors.Is(err, reviewdesk.ErrNotFound):
		return "", steps.ErrNotSent
	case errors.As(err, &refused):
		return "", refusalOf(apperr.Errorf(Refused, "the review desk refused: %s (%s)", refused.Detail, refused.Code))
	}
	return "", err
}

// expediteInput's significant field is the request: a key reused for
// another request is a different intent (422).
func (in expediteInput) significant() map[string]any {
	return map[string]any{"requestId": in.RequestID}
}

// Routes are the expedite's routes, POST /v1/demo-requests/{id}/expedite
// and its GET, made with the server s of d: the POST reads its attempt as
// every idempotent route does (httpapi.ReadIntent), runs it on a steps
// Runner of its own, configured as d's keys' Runner is, and answers as
// every route does (httpapi.Respond).
func Routes(s *httpapi.Server, d httpapi.Deps, svc *demo.Service, writes ExpediteWrites, desk ExpediteDesk, runs steps.RunStore) ([]httpapi.Route, error) {
	op := Steps(svc, writes, desk)
	if err := op.Check(); err != nil {
		return nil, err
	}
	cfg := idempotency.Config{TTL: d.TTL, Lease: d.Lease}
	if d.Metrics != nil {
		cfg.Observe = d.Metrics.Outcome
	}
	runner, err := steps.NewRunner(cfg, runs)
	if err != nil {
		return nil, err
	}
	waits := idempotency.NewWaits(nil) // Prefer: wait, as s's operations have it
	var newKeys *idempotency.NewKeys   // the bound on new keys, as s's operations have it
	if d.NewKeysPerSecond != 0 {
		if newKeys, err = idempotency.BoundNewKeys(d.NewKeysPerSecond, d.NewKeysBurst, runs, cfg.Observe); err != nil {
			return nil, err
		}
	}
	route := httpapi.Operation[expediteInput, struct{}]{
		Method: http.MethodPost, Pattern: "/v1/demo-requests/{id}/expedite",
		Name: op.Operation,
		Path: steps.StepWise,
		Decode: func(_ http.ResponseWriter, r *http.Request) (expediteInput, error) {
			return expediteInput{RequestID: chi.URLParam(r, "id")}, nil
		},
		Significant: expediteInput.significant,
	}
	post := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		it, err := httpapi.ReadIntent(s, w, r, route)
		stopAfter := r.Header.Get(HeaderStopAfter)
		switch {
		case err != nil:
		case stopAfter != "" && !d.Workshop:
			err = apperr.Errorf(apperr.WorkshopDisabled, "start the server with WORKSHOP=true to use the Workshop-* headers")
		case stopAfter != "" && !op.HasStep(stopAfter):
			err = apperr.Errorf(apperr.InvalidHeader, "%s must name a step of %s", HeaderStopAfter, op.Operation)
		}
		if err != nil {
			problem.Write(s.Logger, w, r, err)
			return
		}
		input, err := json.Marshal(it.In)
		if err != nil {
			problem.Write(s.Logger, w, r, fmt.Errorf("encode input: %w", err))
			return
		}
		// The desk's calls of the run, its status lookups too, are made
		// for the caller's account. The workshop's knobs (their layer's,
		// workshop.Of) change the request and hold the first step.
		ctx := reviewdesk.WithAccount(r.Context(), it.Request.Scope.Actor)
		knobs := workshop.Of(ctx)
		it.Request = knobs.Apply(it.Request)
		res, err := newKeys.Admit(ctx, it.Request, func(ctx context.Context) (idempotency.Result, error) {
			return waits.Do(ctx, it.Request, func(ctx context.Context, req idempotency.Request) (idempotency.Result, error) {
				return runner.Do(ctx, req, held(op, knobs.Hold), input, stopAfter)
			})
		})
		if errors.Is(err, steps.ErrStopped) || (err == nil && knobs.DropAnswer) {
			workshop.Drop(s.Logger, w, r) // the runner "died" after the step, or the knobs drop the answer
			return
		}
		httpapi.Respond(s, w, r, it, res, operatorsPart(it.Request.Scope, err))
	})
	outcome := func(ctx context.Context, sc idempotency.Scope) (any, error) {
		run, _, err := runs.LoadRun(ctx, sc)
		if run == nil || err != nil {
			return nil, err
		}
		return runOutcome{RecoveryPoint: run.Point, State: string(run.State), References: run.Refs,
			Attempts: run.Attempts, LastError: run.LastError}, nil
	}
	get := httpapi.Route{Method: http.MethodGet, Pattern: "/v1/demo-requests/{id}/expedite", Handler: handleGetExpedite(s.Logger, svc, writes)}
	return []httpapi.Route{
		{Method: route.Method, Pattern: route.Pattern, Operation: op.Operation, Handler: post, Outcome: outcome},
		get,
	}, nil
}

// runOutcome is what the outcome route shows of an expedite's run.
type runOutcome struct {
	RecoveryPoint string            `json:"recoveryPoint"`
	State         string            `json:"state"`
	References    map[string]string `json:"references"`
	Attempts      int               `json:"attempts"`
	LastError     string            `json:"lastError,omitempty"`
}

// held returns op with hold (the workshop knobs' delay and failure, the
// tests' seam) run inside its first step, before it decides; op itself
// when there is none. The completer runs op itself, without them.
func held(op *steps.Steps, hold func(context.Context) error) *steps.Steps {
	if hold == nil {
		return op
	}
	o := *op
	o.Steps = append([]steps.Step(nil), op.Steps...)
	first := o.Steps[0].Local
	o.Steps[0].Local = func(ctx context.Context, run *steps.Run, now time.Time) (idempotency.Effect, error) {
		if err := hold(ctx); err != nil {
			return nil, err
		}
		return first(ctx, run, now)
	}
	return &o
}

// operatorsPart says, in the answer to a request whose run needs attention
// (409, no Retry-After: its key is held with no time to promise), what an
// operator runs to resume it once its cause is dealt with (docs/steps.md);
// any other err passes unchanged.
func operatorsPart(sc idempotency.Scope, err error) error {
	if e, ok := errors.AsType[*apperr.Error](err); !ok || e.Code != apperr.OperationInProgress || e.RetryAfter != 0 {
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
func handleGetExpedite(logger *slog.Logger, svc *demo.Service, expedites ExpediteStore) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		if _, err := svc.Get(r.Context(), httpapi.ActorOf(r), id); err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		e, err := expedites.Expedite(r.Context(), httpapi.ActorOf(r), id)
		if err != nil {
			problem.Write(logger, w, r, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, e)
	})
}
