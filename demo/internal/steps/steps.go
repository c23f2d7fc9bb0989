// Package steps runs an operation of several steps safe to retry: it claims
// the key as the two-phase path does (idempotency.Runner.Claim), then runs
// the steps one by one, each ending in a recovery point committed with the
// key's lease renewed, so that a retry or the Completer continues where a
// runner stopped.
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
	// operator looks at it and resumes it (idempotency.Store.ResumeRun).
	RunNeedsAttention RunState = "needs_attention"
)

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
	Finish func(ctx context.Context, run *Run, now time.Time) (idempotency.Decided, error)
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

// RunStore keeps the runs, beside the keys of a idempotency.Store. Every write is fenced
// by the claim: a runner that lost its lease writes nothing (idempotency.ErrLeaseLost).
type RunStore interface {
	// ClaimRun is idempotency.Claim for an operation of several steps: in the same
	// statement it writes the key's run at its start (with input) where the
	// claim took a free scope, starts a new one where it took over a key
	// whose run was done, and keeps the run as it stands where it took over
	// an unfinished one. So a claim never exists without the run that any
	// runner, the Completer included, needs to continue it.
	ClaimRun(ctx context.Context, s idempotency.Scope, fp, token string, lease, ttl time.Duration, input json.RawMessage) (idempotency.ClaimResult, error)
	// ReleaseRun lets go of c while c holds its key: it deletes the key of
	// a run still at its start (it has done nothing), and ends the lease of
	// any other running or compensating run now, so that the next runner
	// continues it at once. A run that needs attention is left alone.
	ReleaseRun(ctx context.Context, c idempotency.Claim) error
	// LoadRun returns the run of s, nil if there is none.
	LoadRun(ctx context.Context, s idempotency.Scope) (*Run, error)
	// SaveRun writes run (inserting it the first time) and effect, if any,
	// in one transaction, and sets the key's lease to end after lease,
	// only while c holds the key. Errors: idempotency.ErrLeaseLost, idempotency.ErrEffectNotApplied.
	SaveRun(ctx context.Context, c idempotency.Claim, run *Run, effect idempotency.Effect, lease time.Duration) error
	// FinishRun completes the key with d's answer, commits d's effect and
	// marks the run done, in one transaction, only while c holds the key.
	// Errors: idempotency.ErrLeaseLost, idempotency.ErrEffectNotApplied.
	FinishRun(ctx context.Context, c idempotency.Claim, d idempotency.Decided) error
	// TakeAbandonedRuns takes over up to n unfinished runs of the named
	// operations whose lease passed (FOR UPDATE SKIP LOCKED), each with a
	// new claim token and a lease.
	TakeAbandonedRuns(ctx context.Context, operations []string, n int, lease time.Duration) ([]TakenRun, error)
}

// TakenRun is a run the Completer took over, with its claim and the
// store's time.
type TakenRun struct {
	Claim idempotency.Claim
	Run   *Run
	Now   time.Time
}

// Runner runs operations of several steps with the keys' Runner, whose
// claim, waiting, bound on new keys and release they share, and keeps their
// runs in a RunStore.
type Runner struct {
	keys  *idempotency.Runner
	store RunStore
}

// NewRunner returns a Runner of the steps of keys' operations, their runs
// kept in store.
func NewRunner(keys *idempotency.Runner, store RunStore) *Runner {
	return &Runner{keys: keys, store: store}
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

// Do runs op for the request: it claims the key and drives the run, or
// continues it from its recovery point when the key is taken over. input
// is the operation's input, stored with the run. stopAfter, a workshop
// knob, ends the run after the named step as if its runner died there, or
// at once when the run is already past it (drive).
//
// Errors: as idempotency.Runner.Do; operation_in_progress while another
// runner owns the key, after this one lost its lease, or when a step failed
// transiently (the run waits at its recovery point for the next runner).
func (r *Runner) Do(ctx context.Context, req idempotency.Request, op *Steps, input json.RawMessage, stopAfter string) (idempotency.Result, error) {
	req.Path = StepWise
	own, res, err := r.keys.Claim(ctx, req, func(ctx context.Context, c idempotency.Claim, lease, ttl time.Duration) (idempotency.ClaimResult, error) {
		cr, err := r.store.ClaimRun(ctx, req.Scope, req.Fingerprint, c.Token, lease, ttl, input)
		if err != nil {
			// The claim may have committed with its reply lost: let go of
			// it by its token, so that the key is not blocked for a lease
			// (a run that was taken over keeps its key, its lease ended).
			r.releaseRun(ctx, c)
		}
		return cr, err
	})
	if own == nil {
		return res, err
	}
	defer own.Done()
	res.Outcome = own.Outcome
	// The claim wrote the run, or kept the one it took over (ClaimRun).
	run, err := r.store.LoadRun(ctx, req.Scope)
	if err != nil {
		r.releaseRun(ctx, own.Claim)
		res.Outcome = idempotency.OutcomeFailed
		r.keys.Observe(req.Scope, StepWise, res.Outcome)
		return res, fmt.Errorf("load run: %w", err)
	}
	if run == nil {
		run = &Run{Scope: req.Scope, Input: input, State: RunRunning, Refs: map[string]string{}, StartedAt: own.Now}
	}
	run.Attempts++
	resp, err := r.drive(ctx, op, own.Claim, run, own.Now, stopAfter)
	if err != nil {
		return res, err
	}
	if res.Outcome == idempotency.OutcomeLeaseTakenOver {
		r.keys.Observe(req.Scope, StepWise, OutcomeResumed)
	}
	res.Response = resp
	return res, nil
}

// OutcomeResumed counts a run continued from its recovery point by a
// runner that took its key over (a retry or the Completer).
const OutcomeResumed idempotency.Outcome = "resumed"

// drive runs what is left of run under claim c, on a context detached from
// the client's (each step bounded by WorkBudget), and returns the answer it
// stored; now is the store's time of the claim. A run taken over (Attempts
// > 1) asks the other system about its next external step before it sends
// it. stopAfter, a workshop knob, ends the turn after the named step as if
// the runner died there (ErrStopped), or at once when the run is already
// past it.
//
// Errors: operation_in_progress when the lease was lost or a step failed
// transiently (the run waits at its recovery point), or when the run now
// needs attention; ErrStopped.
func (r *Runner) drive(ctx context.Context, op *Steps, c idempotency.Claim, run *Run, now time.Time, stopAfter string) (idempotency.Response, error) {
	ctx = context.WithoutCancel(ctx)
	i := nextStep(op, run.Point)
	if i > 0 && stopAfter != "" && slices.ContainsFunc(op.Steps[:i], func(s Step) bool { return s.Name == stopAfter }) {
		// The run is already past the stop: this is the stopped request
		// again, sent unchanged by a client on its own (a browser does,
		// when a reused connection closes without an answer). Its runner
		// dies where the run stands, and, having run nothing, takes no
		// turn.
		run.Attempts--
		return idempotency.Response{}, r.stop(ctx, c, run, run.Point)
	}
	switch {
	case i < 0:
		return idempotency.Response{}, r.needsAttention(ctx, c, run, fmt.Sprintf("recovery point %q is not a step of %s", run.Point, op.Operation))
	case run.Attempts > op.MaxAttempts || now.Sub(run.StartedAt) > op.Limit:
		return idempotency.Response{}, r.needsAttention(ctx, c, run, fmt.Sprintf("no answer after %d turns (%s)", run.Attempts-1, run.LastError))
	case run.Attempts > 1:
		// The turn is counted before any call, so a runner that dies in
		// every turn still reaches the limit.
		if err := r.save(ctx, c, run, nil, r.keys.Lease()); err != nil {
			return idempotency.Response{}, err
		}
	}
	resumed := run.Attempts > 1
	decided := 0 // times a local step was decided afresh in this turn
	for ; run.State == RunRunning && i < len(op.Steps); i++ {
		step := op.Steps[i]
		var effect idempotency.Effect
		var err error
		if step.Local != nil {
			effect, err = inBudget(ctx, r.keys.WorkBudget(), func(ctx context.Context) (idempotency.Effect, error) {
				return step.Local(ctx, run, r.keys.Clock())
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
			if err := r.save(ctx, c, run, nil, r.keys.Lease()); err != nil {
				return idempotency.Response{}, err
			}
			break
		} else if err != nil {
			return idempotency.Response{}, r.park(ctx, c, run, step.Name, err)
		}
		prev := run.Point
		run.Point = step.Name
		if err := r.save(ctx, c, run, effect, r.keys.Lease()); errors.Is(err, idempotency.ErrEffectNotApplied) {
			// What the step read changed before it committed (a cancel
			// won): decide the step afresh now, so that a refusal is
			// answered at once; past reruns, the next turn does.
			run.Point = prev
			if step.Local != nil && decided+1 < reruns {
				decided++
				i--
				continue
			}
			return idempotency.Response{}, r.park(ctx, c, run, step.Name, err)
		} else if err != nil {
			return idempotency.Response{}, err
		}
		if stopAfter == step.Name {
			return idempotency.Response{}, r.stop(ctx, c, run, step.Name)
		}
	}
	if run.State == RunCompensating {
		return r.compensate(ctx, op, c, run)
	}
	d, err := inBudget(ctx, r.keys.WorkBudget(), func(ctx context.Context) (idempotency.Decided, error) {
		return op.Finish(ctx, run, r.keys.Clock())
	})
	if err != nil {
		return idempotency.Response{}, r.park(ctx, c, run, "finish", err)
	}
	return r.finish(ctx, c, run, d)
}

// compensate undoes, latest first, every external step of run that was done
// and has an Undo, then stores the refusal's answer. An undo that is itself
// refused cannot be done by retrying: the run needs attention.
func (r *Runner) compensate(ctx context.Context, op *Steps, c idempotency.Claim, run *Run) (idempotency.Response, error) {
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
			return idempotency.Response{}, r.needsAttention(ctx, c, run, name+": "+refusal.Reason)
		} else if err != nil {
			return idempotency.Response{}, r.park(ctx, c, run, name, err)
		}
		run.Refs[name] = ref
		if err := r.save(ctx, c, run, nil, r.keys.Lease()); err != nil {
			return idempotency.Response{}, err
		}
	}
	d := idempotency.Decided{Response: *run.Refusal}
	if op.Refused != nil {
		d.Effect = op.Refused(run, r.keys.Clock())
	}
	return r.finish(ctx, c, run, d)
}

// call runs one external step or undo: when ask, it first asks the other
// system what it holds under the step's key, and sends only if nothing.
func (r *Runner) call(ctx context.Context, ext *External, run *Run, ask bool) (ref string, err error) {
	key := ext.Key(run)
	return inBudget(ctx, r.keys.WorkBudget(), func(ctx context.Context) (string, error) {
		if ask {
			if ref, err := ext.Status(ctx, key); !errors.Is(err, ErrNotSent) {
				return ref, err
			}
		}
		return ext.Call(ctx, key, run)
	})
}

// inBudget runs f on a context bounded by budget, so that a step ends well
// before its lease does.
func inBudget[T any](ctx context.Context, budget time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	return f(ctx)
}

// save writes run and effect with the key's lease renewed to lease, fenced
// by c. A save that fails otherwise than by a lost lease or a changed row
// (the database unreachable) may or may not have committed, and the key's
// last lease runs on: the runner lets go of the key (releaseRun), so that
// the next runner continues the run as soon as the database answers.
func (r *Runner) save(ctx context.Context, c idempotency.Claim, run *Run, effect idempotency.Effect, lease time.Duration) error {
	err := r.store.SaveRun(ctx, c, run, effect, lease)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idempotency.ErrLeaseLost):
		r.keys.Observe(c.Scope, StepWise, idempotency.OutcomeLeaseLost)
		return idempotency.InProgressError(time.Second)
	case !errors.Is(err, idempotency.ErrEffectNotApplied):
		r.releaseRun(ctx, c)
	}
	return fmt.Errorf("save run at %s: %w", run.Point, err)
}

// releaseRun lets go of c (RunStore.ReleaseRun), retried in the background
// until the store hears it, as the two-phase path releases its claim
// (letGo): its runner stops, and the key is free, or its run is the next
// runner's, as soon as the database answers again, not at the end of the
// longest lease a save of this runner may have set.
func (r *Runner) releaseRun(ctx context.Context, c idempotency.Claim) {
	r.keys.LetGo(ctx, c, r.keys.Clock().Add(r.longestRunLease()), r.store.ReleaseRun)
}

// longestRunLease is the longest lease a runner sets on its key, but for
// a run that needs attention: the Runner's lease, or a parked run's
// longest jittered backoff.
func (r *Runner) longestRunLease() time.Duration {
	return max(r.keys.Lease(), maxParkBackoff*3/2)
}

func (r *Runner) finish(ctx context.Context, c idempotency.Claim, run *Run, d idempotency.Decided) (idempotency.Response, error) {
	err := r.store.FinishRun(ctx, c, d)
	switch {
	case errors.Is(err, idempotency.ErrLeaseLost):
		r.keys.Observe(c.Scope, StepWise, idempotency.OutcomeLeaseLost)
		return idempotency.Response{}, idempotency.InProgressError(time.Second)
	case err != nil:
		return idempotency.Response{}, r.park(ctx, c, run, "finish", err)
	}
	run.State = RunDone
	r.keys.Answered(c.Scope, &d.Response)
	return d.Response, nil
}

// park leaves run at its recovery point after a transient failure at step:
// the key stays in progress, its lease ending after parkBackoff, when the
// next retry or the Completer continues it. The run is not undone.
func (r *Runner) park(ctx context.Context, c idempotency.Claim, run *Run, step string, cause error) error {
	r.keys.Observe(c.Scope, StepWise, OutcomeParked)
	run.LastError = step + ": " + cause.Error()
	backoff := min(parkBackoff<<min(max(run.Attempts-1, 0), 5), maxParkBackoff)
	backoff = backoff/2 + rand.N(backoff)
	if err := r.save(ctx, c, run, nil, backoff); err != nil {
		return errors.Join(cause, err)
	}
	return idempotency.InProgressError(backoff)
}

// OutcomeParked counts a run left at its recovery point after a transient
// failure, for the next runner.
const OutcomeParked idempotency.Outcome = "parked"

// OutcomeNeedsAttention counts a run that reached its limit.
const OutcomeNeedsAttention idempotency.Outcome = "needs_attention"

// needsAttention leaves run at its limit: its key needs attention
// (idempotency.NeedsAttentionLease), so that a retry gets 409 without Retry-After,
// until an operator resumes it (ResumeRun).
func (r *Runner) needsAttention(ctx context.Context, c idempotency.Claim, run *Run, why string) error {
	r.keys.Observe(c.Scope, StepWise, OutcomeNeedsAttention)
	run.State, run.LastError = RunNeedsAttention, why
	if err := r.save(ctx, c, run, nil, idempotency.NeedsAttentionLease); err != nil {
		return err
	}
	return idempotency.NeedsAttentionError()
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
// there: the run waits at its recovery point with its lease ended, so that
// the next runner takes it over at once. It returns ErrStopped, or why the
// run could not be saved.
func (r *Runner) stop(ctx context.Context, c idempotency.Claim, run *Run, name string) error {
	run.LastError = name + ": the runner stopped here (workshop)"
	if err := r.save(ctx, c, run, nil, 0); err != nil {
		return err
	}
	return ErrStopped
}

// ErrStopped is Do's error when the workshop knob stopped the run
// after a step: the request ends as if its runner died (no answer), and
// its lease has passed, so the next retry continues the run.
var ErrStopped = errors.New("idempotency: the run stopped after a step (workshop)")

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
	taken, err := r.store.TakeAbandonedRuns(ctx, names, n, r.keys.Lease())
	if err != nil {
		return 0, fmt.Errorf("take abandoned runs: %w", err)
	}
	var wg sync.WaitGroup
	for _, t := range taken {
		wg.Go(func() {
			r.keys.Observe(t.Claim.Scope, StepWise, idempotency.OutcomeLeaseTakenOver)
			t.Run.Attempts++
			if _, err := r.drive(ctx, byName[t.Claim.Scope.Operation], t.Claim, t.Run, t.Now, ""); err == nil {
				r.keys.Observe(t.Claim.Scope, StepWise, OutcomeResumed)
			}
		})
	}
	wg.Wait()
	return len(taken), nil
}
