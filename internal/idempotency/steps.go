package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/demo-api/demo-api/internal/apperr"
)

// StepWise is the path of an operation of several steps (Steps): claim the
// key as TwoPhase does, then run the steps one by one, each ending in a
// recovery point committed with the key's lease renewed and fenced by the
// claim token. A retry past the lease, or the Completer, takes the key over
// and continues from the last recovery point; a definite refusal undoes the
// external steps before it and stores its answer.
const StepWise Path = "step_wise"

// RunState is the state of a run of steps.
type RunState string

const (
	RunRunning      RunState = "running"      // steps are left; its owner runs them, or died
	RunCompensating RunState = "compensating" // a step was refused: the steps before it are being undone
	RunDone         RunState = "done"         // its answer is stored in its key
	// RunNeedsAttention is a run that could neither finish nor compensate
	// within its limit. It holds its key (a retry gets 409) until an
	// operator looks at it and resumes it (Store.ResumeRun).
	RunNeedsAttention RunState = "needs_attention"
)

// Run is the record of an operation of several steps, beside its key: what
// it was asked, where it stands, and what the other systems answered.
type Run struct {
	Scope Scope
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
	Refusal *Response
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
	Local func(ctx context.Context, run *Run, now time.Time) (Effect, error)
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
// before it and stores Response, which is replayed like any answer.
type Refusal struct {
	Response Response
	Reason   string // for logs and the run's last error
}

func (e *Refusal) Error() string { return "refused: " + e.Reason }

// Steps is an operation of several steps.
type Steps struct {
	Operation string
	Steps     []Step
	// Finish decides the answer once every step is done, and the business
	// write that commits with it and the key's completion.
	Finish func(ctx context.Context, run *Run, now time.Time) (Decided, error)
	// Refused returns the business write that commits at now with a
	// refusal's answer once the steps before it are undone (nil for none).
	Refused func(run *Run, now time.Time) Effect
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

// RunStore keeps the runs, beside the keys of a Store. Every write is fenced
// by the claim: a runner that lost its lease writes nothing (ErrLeaseLost).
type RunStore interface {
	Store
	// ClaimRun is Claim for an operation of several steps: in the same
	// statement it writes the key's run at its start (with input) where the
	// claim took a free scope, starts a new one where it took over a key
	// whose run was done, and keeps the run as it stands where it took over
	// an unfinished one. So a claim never exists without the run that any
	// runner, the Completer included, needs to continue it.
	ClaimRun(ctx context.Context, s Scope, fp, token string, lease, ttl time.Duration, input json.RawMessage) (ClaimResult, error)
	// ReleaseRun lets go of c while c holds its key: it deletes the key of
	// a run still at its start (it has done nothing), and ends the lease of
	// any other running or compensating run now, so that the next runner
	// continues it at once. A run that needs attention is left alone.
	ReleaseRun(ctx context.Context, c Claim) error
	// LoadRun returns the run of s, nil if there is none.
	LoadRun(ctx context.Context, s Scope) (*Run, error)
	// SaveRun writes run (inserting it the first time) and effect, if any,
	// in one transaction, and sets the key's lease to end after lease,
	// only while c holds the key. Errors: ErrLeaseLost, ErrEffectNotApplied.
	SaveRun(ctx context.Context, c Claim, run *Run, effect Effect, lease time.Duration) error
	// FinishRun completes the key with d's answer, commits d's effect and
	// marks the run done, in one transaction, only while c holds the key.
	// Errors: ErrLeaseLost, ErrEffectNotApplied.
	FinishRun(ctx context.Context, c Claim, d Decided) error
	// TakeAbandonedRuns takes over up to n unfinished runs of the named
	// operations whose lease passed (FOR UPDATE SKIP LOCKED), each with a
	// new claim token and a lease.
	TakeAbandonedRuns(ctx context.Context, operations []string, n int, lease time.Duration) ([]TakenRun, error)
}

// TakenRun is a run the Completer took over, with its claim and the
// store's time.
type TakenRun struct {
	Claim Claim
	Run   *Run
	Now   time.Time
}

// needsAttentionLease is the lease of a run that needs attention: it holds
// its key, and keeps it from expiring, until an operator resumes it.
const needsAttentionLease = 100 * 365 * 24 * time.Hour

// parkBackoff is how long a run that failed transiently in its first turn
// keeps its key before a retry or the Completer may take it over and go on;
// it doubles with each turn, up to maxParkBackoff (jittered), so that a run
// rides out an outage of minutes before its turns run out.
const (
	parkBackoff    = time.Second
	maxParkBackoff = 30 * time.Second
)

// DoSteps runs op for the request: it claims the key and drives the run,
// or continues it from its recovery point when the key is taken over.
// input is the operation's input, stored with the run.
//
// Errors: as Do; operation_in_progress while another runner owns the key,
// after this one lost its lease, or when a step failed transiently (the run
// waits at its recovery point for the next runner).
func (r *Runner) DoSteps(ctx context.Context, req Request, op *Steps, input json.RawMessage) (Result, error) {
	res := Result{Path: StepWise}
	rs, ok := r.cfg.Store.(RunStore)
	if !ok {
		return r.failed(res, req.Scope, errors.New("idempotency: the store keeps no runs"))
	}
	p, got, done, err := r.admit(ctx, req)
	if done {
		got.Path = StepWise
		return got, err
	}
	defer p.done()
	waitUntil := r.waitUntil(req)
	for tries := 0; ; tries++ {
		c := Claim{Scope: req.Scope, Token: uuid.NewString()}
		cr, err := rs.ClaimRun(ctx, req.Scope, req.Fingerprint, c.Token, r.cfg.Lease, r.ttl(req), input)
		if err != nil {
			// The claim may have committed with its reply lost: let go of
			// it by its token, so that the key is not blocked for a lease
			// (a run that was taken over keeps its key, its lease ended).
			r.releaseRun(ctx, rs, c)
			return r.failed(res, req.Scope, fmt.Errorf("claim key: %w", err))
		}
		if !cr.Claimed {
			if done, err := r.taken(ctx, req, cr, waitUntil, &res, tries); done {
				return res, err
			}
			continue
		}
		kind := Decide(cr.Prev, req.Fingerprint, cr.Now).Kind
		res.Outcome = claimOutcome(kind)
		r.observe(req.Scope, StepWise, res.Outcome)
		r.claimed(p, res.Outcome)
		// The claim wrote the run, or kept the one it took over (ClaimRun).
		run, err := rs.LoadRun(ctx, req.Scope)
		if err != nil {
			r.releaseRun(ctx, rs, c)
			return r.failed(res, req.Scope, fmt.Errorf("load run: %w", err))
		}
		if run == nil {
			run = &Run{Scope: req.Scope, Input: input, State: RunRunning, Refs: map[string]string{}, StartedAt: cr.Now}
		}
		run.Attempts++
		resp, err := r.drive(ctx, rs, op, c, run, cr.Now, req.StopAfter)
		if err != nil {
			return res, err
		}
		if res.Outcome == OutcomeLeaseTakenOver {
			r.observe(req.Scope, StepWise, OutcomeResumed)
		}
		res.Response = resp
		return res, nil
	}
}

// OutcomeResumed counts a run continued from its recovery point by a
// runner that took its key over (a retry or the Completer).
const OutcomeResumed Outcome = "resumed"

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
func (r *Runner) drive(ctx context.Context, rs RunStore, op *Steps, c Claim, run *Run, now time.Time, stopAfter string) (Response, error) {
	ctx = context.WithoutCancel(ctx)
	i := nextStep(op, run.Point)
	if i > 0 && stopAfter != "" && slices.ContainsFunc(op.Steps[:i], func(s Step) bool { return s.Name == stopAfter }) {
		// The run is already past the stop: this is the stopped request
		// again, sent unchanged by a client on its own (a browser does,
		// when a reused connection closes without an answer). Its runner
		// dies where the run stands, and, having run nothing, takes no
		// turn.
		run.Attempts--
		return Response{}, r.stop(ctx, rs, c, run, run.Point)
	}
	switch {
	case i < 0:
		return Response{}, r.needsAttention(ctx, rs, c, run, fmt.Sprintf("recovery point %q is not a step of %s", run.Point, op.Operation))
	case run.Attempts > op.MaxAttempts || now.Sub(run.StartedAt) > op.Limit:
		return Response{}, r.needsAttention(ctx, rs, c, run, fmt.Sprintf("no answer after %d turns (%s)", run.Attempts-1, run.LastError))
	case run.Attempts > 1:
		// The turn is counted before any call, so a runner that dies in
		// every turn still reaches the limit.
		if err := r.save(ctx, rs, c, run, nil, r.cfg.Lease); err != nil {
			return Response{}, err
		}
	}
	resumed := run.Attempts > 1
	decided := 0 // times a local step was decided afresh in this turn
	for ; run.State == RunRunning && i < len(op.Steps); i++ {
		step := op.Steps[i]
		var effect Effect
		var err error
		if step.Local != nil {
			effect, err = inBudget(ctx, r.WorkBudget(), func(ctx context.Context) (Effect, error) {
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
			if err := r.save(ctx, rs, c, run, nil, r.cfg.Lease); err != nil {
				return Response{}, err
			}
			break
		} else if err != nil {
			return Response{}, r.park(ctx, rs, c, run, step.Name, err)
		}
		prev := run.Point
		run.Point = step.Name
		if err := r.save(ctx, rs, c, run, effect, r.cfg.Lease); errors.Is(err, ErrEffectNotApplied) {
			// What the step read changed before it committed (a cancel
			// won): decide the step afresh now, so that a refusal is
			// answered at once; past reruns, the next turn does.
			run.Point = prev
			if step.Local != nil && decided+1 < reruns {
				decided++
				i--
				continue
			}
			return Response{}, r.park(ctx, rs, c, run, step.Name, err)
		} else if err != nil {
			return Response{}, err
		}
		if stopAfter == step.Name {
			return Response{}, r.stop(ctx, rs, c, run, step.Name)
		}
	}
	if run.State == RunCompensating {
		return r.compensate(ctx, rs, op, c, run)
	}
	d, err := inBudget(ctx, r.WorkBudget(), func(ctx context.Context) (Decided, error) {
		return op.Finish(ctx, run, r.cfg.Clock())
	})
	if err != nil {
		return Response{}, r.park(ctx, rs, c, run, "finish", err)
	}
	return r.finish(ctx, rs, c, run, d)
}

// compensate undoes, latest first, every external step of run that was done
// and has an Undo, then stores the refusal's answer. An undo that is itself
// refused cannot be done by retrying: the run needs attention.
func (r *Runner) compensate(ctx context.Context, rs RunStore, op *Steps, c Claim, run *Run) (Response, error) {
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
			return Response{}, r.needsAttention(ctx, rs, c, run, name+": "+refusal.Reason)
		} else if err != nil {
			return Response{}, r.park(ctx, rs, c, run, name, err)
		}
		run.Refs[name] = ref
		if err := r.save(ctx, rs, c, run, nil, r.cfg.Lease); err != nil {
			return Response{}, err
		}
	}
	d := Decided{Response: *run.Refusal}
	if op.Refused != nil {
		d.Effect = op.Refused(run, r.cfg.Clock())
	}
	return r.finish(ctx, rs, c, run, d)
}

// call runs one external step or undo: when ask, it first asks the other
// system what it holds under the step's key, and sends only if nothing.
func (r *Runner) call(ctx context.Context, ext *External, run *Run, ask bool) (ref string, err error) {
	key := ext.Key(run)
	return inBudget(ctx, r.WorkBudget(), func(ctx context.Context) (string, error) {
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
func (r *Runner) save(ctx context.Context, rs RunStore, c Claim, run *Run, effect Effect, lease time.Duration) error {
	err := rs.SaveRun(ctx, c, run, effect, lease)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrLeaseLost):
		r.observe(c.Scope, StepWise, OutcomeLeaseLost)
		return inProgress(time.Second)
	case !errors.Is(err, ErrEffectNotApplied):
		r.releaseRun(ctx, rs, c)
	}
	return fmt.Errorf("save run at %s: %w", run.Point, err)
}

// releaseRun lets go of c (RunStore.ReleaseRun), retried in the background
// until the store hears it, as the two-phase path releases its claim
// (letGo): its runner stops, and the key is free, or its run is the next
// runner's, as soon as the database answers again, not at the end of the
// longest lease a save of this runner may have set.
func (r *Runner) releaseRun(ctx context.Context, rs RunStore, c Claim) {
	r.letGo(ctx, c, r.cfg.Clock().Add(r.longestRunLease()), rs.ReleaseRun)
}

// longestRunLease is the longest lease a runner sets on its key, but for
// a run that needs attention: the Runner's lease, or a parked run's
// longest jittered backoff.
func (r *Runner) longestRunLease() time.Duration {
	return max(r.cfg.Lease, maxParkBackoff*3/2)
}

func (r *Runner) finish(ctx context.Context, rs RunStore, c Claim, run *Run, d Decided) (Response, error) {
	err := rs.FinishRun(ctx, c, d)
	switch {
	case errors.Is(err, ErrLeaseLost):
		r.observe(c.Scope, StepWise, OutcomeLeaseLost)
		return Response{}, inProgress(time.Second)
	case err != nil:
		return Response{}, r.park(ctx, rs, c, run, "finish", err)
	}
	run.State = RunDone
	r.waiters.wake(c.Scope, &d.Response)
	return d.Response, nil
}

// park leaves run at its recovery point after a transient failure at step:
// the key stays in progress, its lease ending after parkBackoff, when the
// next retry or the Completer continues it. The run is not undone.
func (r *Runner) park(ctx context.Context, rs RunStore, c Claim, run *Run, step string, cause error) error {
	r.observe(c.Scope, StepWise, OutcomeParked)
	run.LastError = step + ": " + cause.Error()
	backoff := min(parkBackoff<<min(max(run.Attempts-1, 0), 5), maxParkBackoff)
	backoff = backoff/2 + rand.N(backoff)
	if err := r.save(ctx, rs, c, run, nil, backoff); err != nil {
		return errors.Join(cause, err)
	}
	return inProgress(backoff)
}

// OutcomeParked counts a run left at its recovery point after a transient
// failure, for the next runner.
const OutcomeParked Outcome = "parked"

// OutcomeNeedsAttention counts a run that reached its limit.
const OutcomeNeedsAttention Outcome = "needs_attention"

func (r *Runner) needsAttention(ctx context.Context, rs RunStore, c Claim, run *Run, why string) error {
	r.observe(c.Scope, StepWise, OutcomeNeedsAttention)
	run.State, run.LastError = RunNeedsAttention, why
	if err := r.save(ctx, rs, c, run, nil, needsAttentionLease); err != nil {
		return err
	}
	return runNeedsAttention()
}

// ErrRunNeedsAttention is the cause of the answer to a request whose run
// needs attention (its *apperr.Error's Err): the transport may say there
// how an operator resumes it.
var ErrRunNeedsAttention = errors.New("idempotency: the run needs attention")

// runNeedsAttention is the answer to a request whose run needs attention:
// 409 operation_in_progress, as for any key held, but without Retry-After:
// no retry moves the run until an operator resumes it (ResumeRun), and no
// one can say when that will be.
func runNeedsAttention() error {
	return &apperr.Error{Code: apperr.OperationInProgress, Err: ErrRunNeedsAttention,
		Message: "the run of this idempotency key needs attention: it stopped at its limit, and no retry moves it until an operator resumes it; the outcome route shows its last error"}
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
func (r *Runner) stop(ctx context.Context, rs RunStore, c Claim, run *Run, name string) error {
	run.LastError = name + ": the runner stopped here (workshop)"
	if err := r.save(ctx, rs, c, run, nil, 0); err != nil {
		return err
	}
	return ErrStopped
}

// ErrStopped is DoSteps's error when the workshop knob stopped the run
// after a step: the request ends as if its runner died (no answer), and
// its lease has passed, so the next retry continues the run.
var ErrStopped = errors.New("idempotency: the run stopped after a step (workshop)")

// CompleteAbandoned takes over up to n runs of ops whose runner died or
// gave up (their lease passed), and drives each forward from its recovery
// point, as a retry would: a client that gave up then finds the settled
// answer on the outcome route. Run it in every replica (the Completer): the
// runs are taken with SKIP LOCKED, each by one. It returns how many it took.
func (r *Runner) CompleteAbandoned(ctx context.Context, ops []*Steps, n int) (int, error) {
	rs, ok := r.cfg.Store.(RunStore)
	if !ok {
		return 0, errors.New("idempotency: the store keeps no runs")
	}
	byName := make(map[string]*Steps, len(ops))
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		byName[op.Operation] = op
		names = append(names, op.Operation)
	}
	taken, err := rs.TakeAbandonedRuns(ctx, names, n, r.cfg.Lease)
	if err != nil {
		return 0, fmt.Errorf("take abandoned runs: %w", err)
	}
	var wg sync.WaitGroup
	for _, t := range taken {
		wg.Go(func() {
			r.observe(t.Claim.Scope, StepWise, OutcomeLeaseTakenOver)
			t.Run.Attempts++
			if _, err := r.drive(ctx, rs, byName[t.Claim.Scope.Operation], t.Claim, t.Run, t.Now, ""); err == nil {
				r.observe(t.Claim.Scope, StepWise, OutcomeResumed)
			}
		})
	}
	wg.Wait()
	return len(taken), nil
}
