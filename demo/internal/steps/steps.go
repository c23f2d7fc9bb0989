// Package steps runs an operation of several steps safe to retry, on the
// keys' Runner (idempotency.Runner.Do) over a store of its own (keyStore):
// its claim writes the run with the key, and its work runs the steps one
// by one, each ending in a recovery point committed with the key's lease
// renewed, so that a retry or the Completer continues where a runner
// stopped.
package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/idempotency"
)

// StepWise is the path of an operation of several steps (Steps): claim the
// key as TwoPhase does, then run the steps one by one, each ending in a
// recovery point committed with the key's lease renewed and fenced by the
// claim token. A retry past the lease, or the Completer, takes the key over
// and continues from the last recovery point; a definite refusal undoes the
// external steps before it and stores its answer.
const StepWise idempotency.Path = "step_wise"

// RunState is the state of a run of steps.
type RunState string

const (
	RunRunning      RunState = "running"      // steps are left; its owner runs them, or died
	RunCompensating RunState = "compensating" // a step was refused: the steps before it are being undone
	RunDone         RunState = "done"         // its answer is stored in its key
	// RunNeedsAttention is a run that could neither finish nor compensate
	// within its limit. It holds its key (a retry gets 409) until an
	// operator looks at it and resumes it (runs.Store.ResumeRun).
	RunNeedsAttention RunState = "needs_attention"
)

// NeedsAttentionLease is the lease of the key of a run that needs
// attention: far beyond any key's TTL, so the keys' Runner answers a retry
// 409 without Retry-After and does not wait for it, and the key never
// expires until an operator resumes the run.
const NeedsAttentionLease = 100 * 365 * 24 * time.Hour

// ErrNeedsAttention is the cause (Err) of the answer of a run that needs
// attention, where the transport may say how an operator resumes it.
var ErrNeedsAttention = errors.New("steps: the run needs attention")

// Run is the record of an operation of several steps, beside its key: what
// it was asked, where it stands, and what the other systems answered.
type Run struct {
	Scope idempotency.Scope
	// Input is the operation's input as the request decoded it, so that
	// any runner (a retry, the Completer) can continue without the client.
	Input json.RawMessage
	// Point is the last recovery point reached: the name of the last step
	// done, "" before the first.
	Point string
	State RunState
	// Refs are the other systems' references, by step name; a compensation
	// done adds "undo:<step>".
	Refs map[string]string
	// Refusal is, while compensating, the refused step's answer: stored
	// once the steps before it are undone.
	Refusal *idempotency.Response
	// Attempts counts the turns taken: the first runner and each one that
	// took the run over.
	Attempts  int
	LastError string
	// StartedAt is when the run started, or an operator resumed it: its
	// limit counts from here.
	StartedAt time.Time
}

// Step is one step of an operation: a local write, or a call to another
// system.
type Step struct {
	// Name is the recovery point the step reaches, e.g. "slot_reserved".
	Name string
	// Local, for a local step, returns the business write that commits with
	// the recovery point (nil for none). An *Refusal error refuses the
	// operation; any other error is transient.
	Local func(ctx context.Context, run *Run, now time.Time) (idempotency.Effect, error)
	// External, for a call to another system.
	External *External
}

// External is a step that calls another system under a key derived from
// the business id, never from the client's idempotency key: any runner of
// the same intent sends the same key.
type External struct {
	Key func(run *Run) string
	// Call sends the step under key and returns the other system's
	// reference. An *Refusal error is definite; any other leaves the
	// outcome unclear.
	Call func(ctx context.Context, key string, run *Run) (ref string, err error)
	// Status asks what the other system holds under key: its reference, or
	// ErrNotSent when it never accepted the key. A runner that takes a run
	// over asks before it sends.
	Status func(ctx context.Context, key string) (ref string, err error)
	// Undo, if set, compensates the step once a later one is refused.
	Undo *External
}

// ErrNotSent is what External.Status returns when the other system holds
// nothing under the key: sending is safe.
var ErrNotSent = errors.New("idempotency: the other system holds nothing under this key")

// Refusal is a step's definite refusal: the run undoes the external steps
// before it and stores idempotency.Response, which is replayed like any answer.
type Refusal struct {
	Response idempotency.Response
	Reason   string // for logs and the run's last error
}

func (e *Refusal) Error() string { return "refused: " + e.Reason }

// Steps is an operation of several steps.
type Steps struct {
	Operation string
	Steps     []Step
	// Finish decides the answer once every step is done, and the business
	// write that commits with it and the key's completion.
	Finish func(ctx context.Context, run *Run, now time.Time) (idempotency.Answer, error)
	// Refused returns the business write that commits at now with a
	// refusal's answer once the steps before it are undone (nil for none).
	Refused func(run *Run, now time.Time) idempotency.Effect
	// MaxAttempts and Limit bound a run: past either it needs attention.
	MaxAttempts int
	Limit       time.Duration
}

// HasStep reports whether op has a step of that name.
func (op *Steps) HasStep(name string) bool {
	for _, s := range op.Steps {
		if s.Name == name {
			return true
		}
	}
	return false
}

// Check reports what op lacks or declares wrongly, by its name.
func (op *Steps) Check() error {
	if op.Operation == "" || len(op.Steps) == 0 || op.Finish == nil || op.MaxAttempts < 1 || op.Limit <= 0 {
		return fmt.Errorf("idempotency: steps %q need an operation, steps, Finish, MaxAttempts and Limit", op.Operation)
	}
	if op.Steps[0].Local == nil {
		// A run before its first recovery point has sent nothing, so a
		// runner that lost touch with the database there may drop its key
		// and run (RunStore.ReleaseRun).
		return fmt.Errorf("idempotency: steps %s: the first step must be local", op.Operation)
	}
	seen := map[string]bool{"": true}
	for _, s := range op.Steps {
		ext := s.External
		switch {
		case seen[s.Name]:
			return fmt.Errorf("idempotency: steps %s: step %q is unnamed or named twice", op.Operation, s.Name)
		case (s.Local == nil) == (ext == nil):
			return fmt.Errorf("idempotency: steps %s: step %s must be local or external, not both or neither", op.Operation, s.Name)
		case ext != nil && (ext.Key == nil || ext.Call == nil || ext.Status == nil):
			return fmt.Errorf("idempotency: steps %s: step %s needs Key, Call and Status", op.Operation, s.Name)
		case ext != nil && ext.Undo != nil && (ext.Undo.Key == nil || ext.Undo.Call == nil || ext.Undo.Status == nil):
			return fmt.Errorf("idempotency: steps %s: the undo of %s needs Key, Call and Status", op.Operation, s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// RunStore keeps the runs, beside the keys of an idempotency.Store. Every
// write is fenced by the claim: a runner that lost its lease writes nothing
// (idempotency.ErrLeaseLost).
type RunStore interface {
	// ClaimRun is idempotency.Store.Claim for an operation of several
	// steps: in the same statement it writes the key's run at its start
	// (with input) where the claim took a free scope, starts a new one where
	// it took over a key whose run was done, and keeps the run as it stands
	// where it took over an unfinished one. So a claim never exists without
	// the run that any runner, the Completer included, needs to continue it.
	ClaimRun(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration, input json.RawMessage) (idempotency.KeyWrite, error)
	// ReleaseRun is idempotency.Store.Release for a run: while c holds its
	// key, it deletes the key of a run still at its start (it has done
	// nothing), and ends the lease of any other running or compensating run
	// now, so that the next runner continues it at once. A run that needs
	// attention is left alone.
	ReleaseRun(ctx context.Context, c idempotency.Claim) error
	// FinishRun is idempotency.Store.FinishClaimAtomically for a run: it
	// completes the key with a's answer, commits a's effect and marks the
	// run done, in one transaction, only while c holds the key.
	// Errors: idempotency.ErrLeaseLost, idempotency.ErrEffectNotApplied.
	FinishRun(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error
	// Lookup is idempotency.Store.Lookup: the key's record.
	Lookup(ctx context.Context, s idempotency.Scope) (*idempotency.Record, time.Time, error)
	// LoadRun returns the run of s, nil if there is none, and the store's
	// time.
	LoadRun(ctx context.Context, s idempotency.Scope) (*Run, time.Time, error)
	// SaveRun writes run (inserting it the first time) and effect, if any,
	// in one transaction, and sets the key's lease to end after lease,
	// only while c holds the key. Errors: idempotency.ErrLeaseLost, idempotency.ErrEffectNotApplied.
	SaveRun(ctx context.Context, c idempotency.Claim, run *Run, effect idempotency.Effect, lease time.Duration) error
	// TakeAbandonedRuns takes over up to n unfinished runs of the named
	// operations whose lease passed (FOR UPDATE SKIP LOCKED), each with a
	// new claim token and a lease.
	TakeAbandonedRuns(ctx context.Context, operations []string, n int, lease time.Duration) ([]TakenRun, error)
}

// keyStore is the idempotency.Store of the step-wise keys: the keys'
// Runner claims, finishes and releases a key with its run.
type keyStore struct{ RunStore }

// attempt carries a request's input (Runner.Do) to its claim, which writes
// it with the run, and the claim back to the work, whose writes it fences.
type attempt struct {
	input json.RawMessage
	claim idempotency.Claim // the last claim of the attempt: the one its work runs under
}

type attemptKey struct{}

func (k keyStore) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (idempotency.KeyWrite, error) {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	if a == nil {
		a = &attempt{}
	}
	a.claim = c
	return k.ClaimRun(ctx, c, fp, lease, ttl, a.input)
}

// FinishClaimAtomically finishes the run on a context of its own: the run's
// last recovery point renewed its lease, and each step had its own budget,
// so the Runner's budget for one work does not bound it.
func (k keyStore) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	return k.FinishRun(context.WithoutCancel(ctx), c, a)
}

func (k keyStore) Release(ctx context.Context, c idempotency.Claim) error {
	return k.ReleaseRun(ctx, c)
}

// CompleteAtomically is the one-phase path, which a step-wise key never
// takes (Runner.Do sets its path).
func (keyStore) CompleteAtomically(context.Context, idempotency.Claim, string, time.Duration, idempotency.Answer) (idempotency.KeyWrite, error) {
	return idempotency.KeyWrite{}, errors.New("steps: a step-wise key is never completed in one phase")
}

// TakenRun is a run the Completer took over, with its claim and the
// store's time.
type TakenRun struct {
	Claim idempotency.Claim
	Run   *Run
	Now   time.Time
}

// Runner runs operations of several steps on a keys' Runner of its own,
// over keyStore, and keeps their runs in a RunStore.
type Runner struct {
	keys  *idempotency.Runner
	store RunStore
	cfg   idempotency.Config
}

// NewRunner returns a Runner of operations of several steps, their keys and
// runs kept in store, on a keys' Runner configured by cfg (without its
// Store: the keys are store's). Its outcomes are told to cfg.Observe, on the
// path StepWise.
func NewRunner(cfg idempotency.Config, store RunStore) (*Runner, error) {
	if cfg.Store != nil {
		return nil, errors.New("steps: the keys of a Runner are its RunStore's: leave Config.Store unset")
	}
	cfg.Store = keyStore{store}
	keys, err := idempotency.NewRunner(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Runner{keys: keys, store: store, cfg: cfg}, nil
}

// reruns bounds how often a turn decides a local step afresh after its
// write found the row it read changed.
const reruns = 3

// parkBackoff is how long a run that failed transiently in its first turn
// keeps its key before a retry or the Completer may take it over and go on;
// it doubles with each turn, up to maxParkBackoff (jittered), so that a run
// rides out an outage of minutes before its turns run out.
const (
	parkBackoff    = time.Second
	maxParkBackoff = 30 * time.Second
)

// Do runs op for the request on the keys' Runner, path StepWise: the claim
// writes the run (ClaimRun, with input), or keeps the one it took over, and
// the work drives the run from its recovery point; the Runner finishes the
// key with the run's answer (FinishRun), keeps it when the work says the
// run waits (operation_in_progress), and releases it (ReleaseRun) on any
// other failure. stopAfter, a workshop knob, ends the run after the named
// step as if its runner died there, or at once when the run is already past
// it (drive).
//
// Errors: as idempotency.Runner.Do; operation_in_progress while another
// runner owns the key, after this one lost its lease, when a step failed
// transiently (the run waits at its recovery point for the next runner),
// when the run needs attention (ErrNeedsAttention), or when it stopped
// (ErrStopped).
func (r *Runner) Do(ctx context.Context, req idempotency.Request, op *Steps, input json.RawMessage, stopAfter string) (idempotency.Result, error) {
	req.Path = StepWise
	at := &attempt{input: input}
	ctx = context.WithValue(ctx, attemptKey{}, at)
	return r.keys.Do(ctx, req, func(ctx context.Context, _ time.Time) (idempotency.Answer, error) {
		// The claim wrote the run, or kept the one it took over (ClaimRun).
		c := at.claim
		run, now, err := r.store.LoadRun(ctx, c.Scope)
		if err != nil {
			return idempotency.Answer{}, fmt.Errorf("load run: %w", err)
		}
		if run == nil {
			run = &Run{Scope: c.Scope, Input: input, State: RunRunning, Refs: map[string]string{}, StartedAt: now}
		}
		run.Attempts++
		a, err := r.drive(ctx, op, c, run, now, stopAfter)
		if err == nil && run.Attempts > 1 {
			r.observe(c.Scope, OutcomeResumed)
		}
		return a, err
	})
}

// OutcomeResumed counts a run continued from its recovery point by a
// runner that took its key over (a retry or the Completer).
const OutcomeResumed idempotency.Outcome = "resumed"

// drive runs what is left of run under claim c, on a context detached from
// the client's (each step bounded by the work budget, half the lease), and
// returns the answer to finish the key with; now is the store's time of the
// claim. A run taken over (Attempts > 1) asks the other system about its
// next external step before it sends it. stopAfter, a workshop knob, ends
// the turn after the named step as if the runner died there (ErrStopped),
// or at once when the run is already past it.
//
// Errors: operation_in_progress when the lease was lost or a step failed
// transiently (the run waits at its recovery point), when the run now needs
// attention, or when it stopped (ErrStopped): the run keeps its key. Any
// other error (a save the database may or may not have committed) lets the
// key go (ReleaseRun).
func (r *Runner) drive(ctx context.Context, op *Steps, c idempotency.Claim, run *Run, now time.Time, stopAfter string) (idempotency.Answer, error) {
	ctx = context.WithoutCancel(ctx)
	i := nextStep(op, run.Point)
	if i > 0 && stopAfter != "" && slices.ContainsFunc(op.Steps[:i], func(s Step) bool { return s.Name == stopAfter }) {
		// The run is already past the stop: this is the stopped request
		// again, sent unchanged by a client on its own (a browser does,
		// when a reused connection closes without an answer). Its runner
		// dies where the run stands, and, having run nothing, takes no
		// turn.
		run.Attempts--
		return idempotency.Answer{}, r.stop(ctx, c, run, run.Point)
	}
	switch {
	case i < 0:
		return idempotency.Answer{}, r.needsAttention(ctx, c, run, fmt.Sprintf("recovery point %q is not a step of %s", run.Point, op.Operation))
	case run.Attempts > op.MaxAttempts || now.Sub(run.StartedAt) > op.Limit:
		return idempotency.Answer{}, r.needsAttention(ctx, c, run, fmt.Sprintf("no answer after %d turns (%s)", run.Attempts-1, run.LastError))
	case run.Attempts > 1:
		// The turn is counted before any call, so a runner that dies in
		// every turn still reaches the limit.
		if err := r.save(ctx, c, run, nil, r.cfg.Lease); err != nil {
			return idempotency.Answer{}, err
		}
	}
	resumed := run.Attempts > 1
	decided := 0 // times a local step was decided afresh in this turn
	for ; run.State == RunRunning && i < len(op.Steps); i++ {
		step := op.Steps[i]
		var effect idempotency.Effect
		var err error
		if step.Local != nil {
			effect, err = inBudget(ctx, r.budget(), func(ctx context.Context) (idempotency.Effect, error) {
				return step.Local(ctx, run, r.cfg.Clock())
			})
		} else {
			var ref string
			ref, err = r.call(ctx, step.External, run, resumed)
			if err == nil {
				run.Refs[step.Name] = ref
			}
		}
		resumed = false
		if refusal, ok := errors.AsType[*Refusal](err); ok {
			run.State, run.Refusal, run.LastError = RunCompensating, &refusal.Response, step.Name+": "+refusal.Reason
			if err := r.save(ctx, c, run, nil, r.cfg.Lease); err != nil {
				return idempotency.Answer{}, err
			}
			break
		} else if err != nil {
			return idempotency.Answer{}, r.park(ctx, c, run, step.Name, err)
		}
		prev := run.Point
		run.Point = step.Name
		if err := r.save(ctx, c, run, effect, r.cfg.Lease); errors.Is(err, idempotency.ErrEffectNotApplied) {
			// What the step read changed before it committed (a cancel
			// won): decide the step afresh now, so that a refusal is
			// answered at once; past reruns, the next turn does.
			run.Point = prev
			if step.Local != nil && decided+1 < reruns {
				decided++
				i--
				continue
			}
			return idempotency.Answer{}, r.park(ctx, c, run, step.Name, err)
		} else if err != nil {
			return idempotency.Answer{}, err
		}
		if stopAfter == step.Name {
			return idempotency.Answer{}, r.stop(ctx, c, run, step.Name)
		}
	}
	if run.State == RunCompensating {
		return r.compensate(ctx, op, c, run)
	}
	a, err := inBudget(ctx, r.budget(), func(ctx context.Context) (idempotency.Answer, error) {
		return op.Finish(ctx, run, r.cfg.Clock())
	})
	if err != nil {
		return idempotency.Answer{}, r.park(ctx, c, run, "finish", err)
	}
	return a, nil
}

// compensate undoes, latest first, every external step of run that was done
// and has an Undo, then returns the refusal's answer. An undo that is itself
// refused cannot be done by retrying: the run needs attention.
func (r *Runner) compensate(ctx context.Context, op *Steps, c idempotency.Claim, run *Run) (idempotency.Answer, error) {
	for i := len(op.Steps) - 1; i >= 0; i-- {
		step := op.Steps[i]
		name := "undo:" + step.Name
		if step.External == nil || step.External.Undo == nil || run.Refs[step.Name] == "" || run.Refs[name] != "" {
			continue
		}
		// An undo is always asked about first: it is rare, and a runner
		// cannot tell whether an earlier turn sent it.
		ref, err := r.call(ctx, step.External.Undo, run, true)
		if refusal, ok := errors.AsType[*Refusal](err); ok {
			return idempotency.Answer{}, r.needsAttention(ctx, c, run, name+": "+refusal.Reason)
		} else if err != nil {
			return idempotency.Answer{}, r.park(ctx, c, run, name, err)
		}
		run.Refs[name] = ref
		if err := r.save(ctx, c, run, nil, r.cfg.Lease); err != nil {
			return idempotency.Answer{}, err
		}
	}
	a := idempotency.Answer{Response: *run.Refusal}
	if op.Refused != nil {
		a.Effect = op.Refused(run, r.cfg.Clock())
	}
	return a, nil
}

// call runs one external step or undo: when ask, it first asks the other
// system what it holds under the step's key, and sends only if nothing.
func (r *Runner) call(ctx context.Context, ext *External, run *Run, ask bool) (ref string, err error) {
	key := ext.Key(run)
	return inBudget(ctx, r.budget(), func(ctx context.Context) (string, error) {
		if ask {
			if ref, err := ext.Status(ctx, key); !errors.Is(err, ErrNotSent) {
				return ref, err
			}
		}
		return ext.Call(ctx, key, run)
	})
}

// budget is how long one step may run: half the lease, as the keys' Runner
// gives one work, so that a step ends well before its lease does.
func (r *Runner) budget() time.Duration { return r.cfg.Lease / 2 }

// inBudget runs f on a context bounded by budget.
func inBudget[T any](ctx context.Context, budget time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	return f(ctx)
}

// save writes run and effect with the key's lease renewed to lease, fenced
// by c. A save that fails otherwise than by a lost lease or a changed row
// (the database unreachable) may or may not have committed, and the key's
// last lease runs on: its error lets the key go (ReleaseRun), so that the
// next runner continues the run as soon as the database answers.
func (r *Runner) save(ctx context.Context, c idempotency.Claim, run *Run, effect idempotency.Effect, lease time.Duration) error {
	err := r.store.SaveRun(ctx, c, run, effect, lease)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idempotency.ErrLeaseLost):
		r.observe(c.Scope, idempotency.OutcomeLeaseLost)
		return idempotency.InProgressError(time.Second)
	}
	return fmt.Errorf("save run at %s: %w", run.Point, err)
}

// park leaves run at its recovery point after a transient failure at step:
// the key stays in progress, its lease ending after parkBackoff, when the
// next retry or the Completer continues it. The run is not undone.
func (r *Runner) park(ctx context.Context, c idempotency.Claim, run *Run, step string, cause error) error {
	r.observe(c.Scope, OutcomeParked)
	run.LastError = step + ": " + cause.Error()
	backoff := min(parkBackoff<<min(max(run.Attempts-1, 0), 5), maxParkBackoff)
	backoff = backoff/2 + rand.N(backoff)
	if err := r.save(ctx, c, run, nil, backoff); err != nil {
		return errors.Join(err, cause) // the save's error first: it decides what becomes of the key
	}
	return idempotency.InProgressError(backoff)
}

// OutcomeParked counts a run left at its recovery point after a transient
// failure, for the next runner.
const OutcomeParked idempotency.Outcome = "parked"

// OutcomeNeedsAttention counts a run that reached its limit.
const OutcomeNeedsAttention idempotency.Outcome = "needs_attention"

// needsAttention leaves run at its limit: its key is held for
// NeedsAttentionLease, so that a retry gets 409 without Retry-After, until
// an operator resumes it (runs.Store.ResumeRun).
func (r *Runner) needsAttention(ctx context.Context, c idempotency.Claim, run *Run, why string) error {
	r.observe(c.Scope, OutcomeNeedsAttention)
	run.State, run.LastError = RunNeedsAttention, why
	if err := r.save(ctx, c, run, nil, NeedsAttentionLease); err != nil {
		return err
	}
	return &apperr.Error{Code: apperr.OperationInProgress, Err: ErrNeedsAttention,
		Message: "this run needs attention: no retry moves it until an operator resumes it, and no one can say when that will be; the outcome route shows why"}
}

// nextStep is the index of the step after recovery point p, -1 for a point
// that is not one of op's.
func nextStep(op *Steps, p string) int {
	if p == "" {
		return 0
	}
	for i, s := range op.Steps {
		if s.Name == p {
			return i + 1
		}
	}
	return -1
}

// stop ends the turn of run after the step named, as if its runner died
// there: the run keeps its key at its recovery point with its lease ended,
// so that the next runner takes it over at once. It returns an
// operation_in_progress whose cause is ErrStopped, or why the run could not
// be saved.
func (r *Runner) stop(ctx context.Context, c idempotency.Claim, run *Run, name string) error {
	run.LastError = name + ": the runner stopped here (workshop)"
	if err := r.save(ctx, c, run, nil, 0); err != nil {
		return err
	}
	return &apperr.Error{Code: apperr.OperationInProgress, Err: ErrStopped, RetryAfter: time.Second,
		Message: "the run stopped after " + name + " (workshop): the next retry continues it"}
}

// ErrStopped is the cause of Do's error when the workshop knob stopped the
// run after a step: the request ends as if its runner died (no answer), and
// its lease has passed, so the next retry continues the run.
var ErrStopped = errors.New("steps: the run stopped after a step (workshop)")

// CompleteAbandoned takes over up to n runs of ops whose runner died or
// gave up (their lease passed), and drives each forward from its recovery
// point, as a retry would: a client that gave up then finds the settled
// answer on the outcome route. Run it in every replica (the Completer): the
// runs are taken with SKIP LOCKED, each by one. It returns how many it took.
func (r *Runner) CompleteAbandoned(ctx context.Context, ops []*Steps, n int) (int, error) {
	byName := make(map[string]*Steps, len(ops))
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		byName[op.Operation] = op
		names = append(names, op.Operation)
	}
	taken, err := r.store.TakeAbandonedRuns(ctx, names, n, r.cfg.Lease)
	if err != nil {
		return 0, fmt.Errorf("take abandoned runs: %w", err)
	}
	var wg sync.WaitGroup
	for _, t := range taken {
		wg.Go(func() {
			r.observe(t.Claim.Scope, idempotency.OutcomeLeaseTakenOver)
			t.Run.Attempts++
			if r.complete(ctx, byName[t.Claim.Scope.Operation], t) == nil {
				r.observe(t.Claim.Scope, OutcomeResumed)
			}
		})
	}
	wg.Wait()
	return len(taken), nil
}

// complete drives the run t took over and finishes its key with the
// answer, as the keys' Runner does for a request: a run that waits keeps
// its key, and one that failed otherwise lets it go (ReleaseRun) at once.
func (r *Runner) complete(ctx context.Context, op *Steps, t TakenRun) error {
	ctx = context.WithoutCancel(ctx)
	a, err := r.drive(ctx, op, t.Claim, t.Run, t.Now, "")
	if err == nil {
		err = r.store.FinishRun(ctx, t.Claim, a)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idempotency.ErrLeaseLost):
		r.observe(t.Claim.Scope, idempotency.OutcomeLeaseLost)
	case apperr.Code(err) != apperr.OperationInProgress:
		rctx, cancel := context.WithTimeout(ctx, r.budget())
		defer cancel()
		if rerr := r.store.ReleaseRun(rctx, t.Claim); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release run: %w", rerr))
		}
	}
	return err
}

func (r *Runner) observe(s idempotency.Scope, o idempotency.Outcome) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(s.Operation, StepWise, o)
	}
}
