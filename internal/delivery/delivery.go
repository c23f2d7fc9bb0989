// Package delivery hands each accepted demo request, and its later events,
// to the review desk (an external service), safe to repeat: one desk
// Idempotency-Key per event (EventKey) and a lookup before any resend.
// docs/how-it-works.md tells the design.
package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tracing"
)

// States of a delivery.
const (
	Pending   = "pending"   // due now or later; or taken by a dispatcher
	Submitted = "submitted" // the desk accepted it: it holds its reference
	Unknown   = "unknown"   // attempts ran out without a clear answer: reconcile it
	Failed    = "failed"    // the desk refused it definitely
	Withdrawn = "withdrawn" // its request was cancelled before the desk accepted it: the desk never holds it
)

// The kinds of outbox row the dispatcher knows: what it hands the desk.
const (
	KindSubmit = "submit" // the request's submission
	KindCancel = "cancel" // its cancel, queued by the request's cancel
)

// A Kind is how one kind of event is handed to the desk: Send sends e under
// key; Status asks about an earlier send (reviewdesk.ErrNotFound: none taken).
type Kind struct {
	Send   func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error)
	Status func(ctx context.Context, key string) (reviewdesk.Receipt, error)
}

// ProviderKey is the desk's Idempotency-Key of request id's submission.
func ProviderKey(requestID string) string { return "demo-request:" + requestID }

// EventKey is the desk's Idempotency-Key of request id's seq-th event of
// kind, such as demo-request:<id>:cancel:2.
func EventKey(requestID, kind string, seq int) string {
	key := ProviderKey(requestID)
	if kind != KindSubmit {
		key += ":" + kind
	}
	if seq > 1 {
		key += ":" + strconv.Itoa(seq)
	}
	return key
}

// Status is a delivery as the owner of its request sees it: the hand-over
// of its submission, then of its events.
type Status struct {
	RequestID string `json:"requestId" db:"request_id"`
	Handover
	// Events follow the submission in queue order; Cancel is the last cancel.
	Events []Event `json:"events,omitempty" db:"-"`
	Cancel *Event  `json:"cancel,omitempty" db:"-"`
}

// Event is the hand-over of one later event of a request.
type Event struct {
	Kind string `json:"kind"`
	Seq  int    `json:"-"` // which of its request's events of its kind, 1 for the first
	Handover
}

// Handover is where the hand-over of one event to the desk stands.
type Handover struct {
	State             string     `json:"state" db:"state"`
	Attempts          int        `json:"attempts" db:"attempts"`
	LastError         *string    `json:"lastError,omitempty" db:"last_error"`
	NextAttemptAt     *time.Time `json:"nextAttemptAt,omitempty" db:"next_attempt_at"`
	ProviderKey       string     `json:"providerKey" db:"-"` // EventKey of its event
	ProviderReference *string    `json:"providerReference,omitempty" db:"provider_reference"`
	UpdatedAt         time.Time  `json:"updatedAt" db:"updated_at"`
}

// Due is a row a dispatcher took, and the attempt this is (1 for the first).
type Due struct {
	RequestID string `db:"request_id"`
	Actor     string `db:"actor_id"` // owns the request: the desk's calls are made for this account
	Kind      string `db:"kind"`     // one of kinds, or of Dispatcher.Kinds
	Seq       int    `db:"seq"`      // which of its request's events of its kind, 1 for the first
	Attempt   int    `db:"attempts"`
	Topic     string `db:"topic"`
	Note      string `db:"note"`
	Cancelled bool   `db:"cancelled"` // the request was cancelled: a submission of it is never sent
}

// Mark is what one attempt decided for its row.
type Mark struct {
	RequestID string
	Kind      string
	Seq       int
	Attempt   int    // the row's
	Token     string // the lease token the row was taken under
	Actor     string // the row's: its store finds the row's shard by it
	State     string
	Reference string        // Submitted
	Error     string        // the last error, if any
	Retry     time.Duration // Pending: the wait before the next attempt
}

// Store keeps the outbox.
type Store interface {
	// TakeDue leases up to n due rows, none of the busy actors', under token.
	TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]Due, error)
	// Settle records the marks of rows still taken under their tokens: how many.
	Settle(ctx context.Context, marks []Mark) (int, error)
	// Delivery returns the delivery of actor's request id. Errors: not_found.
	Delivery(ctx context.Context, actor, id string) (Status, error)
	// Reconciled records the desk's answer about a row: reference, or "" for none.
	Reconciled(ctx context.Context, id, kind string, seq int, reference string) error
}

// Metrics is what a dispatcher reports to.
type Metrics interface {
	Delivered(state string, attempts int) // a mark, and the attempts of a final one
	LookedUp(answer string)               // a lookup before a resend: accepted, not_found or unclear
	Called(op string)                     // a call to the desk: the event's kind, or that kind and _status
}

// Dispatcher hands due outbox rows to the desk, each on its own: a slow
// call holds only its own row and place.
type Dispatcher struct {
	Store       Store
	Desk        *reviewdesk.Client
	Logger      *slog.Logger
	Kinds       map[string]Kind // kinds beyond the service's own (kinds, below), as a test adds one; an event of an unknown kind ends unknown
	Metrics     Metrics         // optional
	Batch       int             // rows one take asks for at most (default 32)
	InFlight    int             // rows taken and not yet recorded, at most (default 256)
	PerActor    int             // one actor's rows in flight, at most (default 128): a hung account fills only its own
	CallTimeout time.Duration   // of one call to the desk (default 5 s); a row's lease is three: a lookup, a send and a margin
	MaxAttempts int             // when an unclear delivery becomes unknown (default 8)
	FirstRetry  time.Duration   // the wait after a first failed attempt (default 1 s), doubled after each up to a minute, jittered
	Idle        time.Duration   // the pause when nothing is due (default 200 ms, jittered)

	once    sync.Once
	mu      sync.Mutex
	byActor map[string]int // rows taken and not yet recorded, by actor
	freed   chan struct{}  // a place was freed
	kinds   map[string]Kind
}

// defaults fills the zero fields, once.
func (d *Dispatcher) defaults() {
	d.once.Do(func() {
		d.Batch = cmp.Or(d.Batch, 32)
		d.InFlight = cmp.Or(d.InFlight, 256)
		d.PerActor = cmp.Or(d.PerActor, 128)
		d.CallTimeout = cmp.Or(d.CallTimeout, 5*time.Second)
		d.MaxAttempts = cmp.Or(d.MaxAttempts, 8)
		d.FirstRetry = cmp.Or(d.FirstRetry, time.Second)
		d.Idle = cmp.Or(d.Idle, 200*time.Millisecond)
		d.Metrics = cmp.Or[Metrics](d.Metrics, noMetrics{})
		d.byActor = map[string]int{}
		d.freed = make(chan struct{}, 1)
		d.kinds = kinds(d.Desk)
		maps.Copy(d.kinds, d.Kinds)
	})
}

// kinds are the hand-overs of the service's events, in every dispatcher
// (serve's, the dispatch command's, the tests'): an operation with an event
// of its own adds its kind here.
func kinds(desk *reviewdesk.Client) map[string]Kind {
	return map[string]Kind{
		KindSubmit: {
			Send: func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error) {
				return desk.Submit(ctx, key, reviewdesk.Submission{RequestID: e.RequestID, Topic: e.Topic, Note: e.Note})
			},
			Status: func(ctx context.Context, key string) (reviewdesk.Receipt, error) { return desk.Status(ctx, key) }},
		KindCancel: {
			Send: func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error) {
				return desk.Cancel(ctx, key, ProviderKey(e.RequestID))
			},
			Status: func(ctx context.Context, key string) (reviewdesk.Receipt, error) {
				return desk.CancelStatus(ctx, key)
			}},
	}
}

// Run dispatches until ctx ends, then records the marks of the rows in
// flight. After failed takes it pauses longer, up to 5 s.
func (d *Dispatcher) Run(ctx context.Context) {
	d.defaults()
	decided := make(chan Mark, d.InFlight)
	recorded := make(chan struct{})
	go func() { defer close(recorded); d.recordAll(ctx, decided) }()
	var wg sync.WaitGroup
	pause := d.Idle
	// A take that skips the busy actors' rows still reads them: after one found nothing, pause.
	var othersIdleUntil time.Time
	for ctx.Err() == nil {
		free, busy := d.places()
		othersIdle := time.Until(othersIdleUntil)
		switch {
		case free <= 0:
			d.waitFreed(ctx, 0)
			continue
		case len(busy) > 0 && othersIdle > 0:
			d.waitFreed(ctx, othersIdle)
			continue
		}
		n, err := d.take(ctx, &wg, min(free, d.Batch), busy, decided)
		switch {
		case err != nil && ctx.Err() == nil:
			d.Logger.Warn("dispatch take failed", "err", err, "next_try_in", pause)
			select {
			case <-ctx.Done():
			case <-time.After(jitter(pause)):
			}
			pause = min(2*pause, 5*time.Second)
		case n == 0:
			pause = d.Idle
			if len(busy) > 0 {
				othersIdleUntil = time.Now().Add(d.Idle)
			}
			d.waitFreed(ctx, jitter(d.Idle))
		default:
			pause = d.Idle
		}
	}
	wg.Wait()
	close(decided)
	<-recorded
}

// waitFreed waits until ctx ends, a place is freed, or after passes (0: no bound).
func (d *Dispatcher) waitFreed(ctx context.Context, after time.Duration) {
	var timeout <-chan time.Time
	if after > 0 {
		timeout = time.After(after)
	}
	select {
	case <-ctx.Done():
	case <-d.freed:
	case <-timeout:
	}
}

// Once takes up to Batch due rows, hands each over, records their marks,
// and returns how many rows it took.
func (d *Dispatcher) Once(ctx context.Context) (int, error) {
	d.defaults()
	decided := make(chan Mark, d.Batch)
	var wg sync.WaitGroup
	n, err := d.take(ctx, &wg, d.Batch, nil, decided)
	wg.Wait()
	close(decided)
	d.recordAll(ctx, decided)
	return n, err
}

// places returns how many more rows may be taken, and the actors at PerActor.
func (d *Dispatcher) places() (free int, busy []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	free = d.InFlight
	for actor, n := range d.byActor {
		free -= n
		if n >= d.PerActor {
			busy = append(busy, actor)
		}
	}
	return free, busy
}

// take takes up to n due rows of actors not busy and starts, on wg, the
// attempt of each, which sends its mark on decided.
func (d *Dispatcher) take(ctx context.Context, wg *sync.WaitGroup, n int, busy []string, decided chan<- Mark) (int, error) {
	token := uuid.NewString()
	due, err := d.Store.TakeDue(ctx, token, n, d.lease(), busy)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	for _, row := range due {
		d.byActor[row.Actor]++
	}
	d.mu.Unlock()
	for _, row := range due {
		wg.Go(func() {
			m := d.attempt(ctx, row)
			m.RequestID, m.Kind, m.Seq, m.Attempt = row.RequestID, row.Kind, row.Seq, row.Attempt
			m.Token, m.Actor = token, row.Actor
			decided <- m
		})
	}
	return len(due), nil
}

// recordAll records the marks sent on decided until it is closed, all
// those waiting at once, and frees their places.
func (d *Dispatcher) recordAll(ctx context.Context, decided <-chan Mark) {
	for first := range decided {
		batch := []Mark{first}
		for len(decided) > 0 { // the marks already waiting: no one else receives
			batch = append(batch, <-decided)
		}
		d.record(ctx, batch)
		d.mu.Lock()
		for _, m := range batch {
			if d.byActor[m.Actor]--; d.byActor[m.Actor] == 0 {
				delete(d.byActor, m.Actor)
			}
		}
		d.mu.Unlock()
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}
}

// lease is how long a take holds its rows: a lookup, a send and a margin.
func (d *Dispatcher) lease() time.Duration { return 3 * d.CallTimeout }

// record records marks, even after ctx ended, for as long as a lease: a
// row not recorded is due again when its lease passes, and asked about first.
func (d *Dispatcher) record(ctx context.Context, marks []Mark) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.lease())
	defer cancel()
	settled, err := d.Store.Settle(ctx, marks)
	if err != nil {
		d.Logger.Warn("dispatch: marks not recorded; their rows are due again when their leases pass",
			"marks", len(marks), "err", err)
		return
	}
	for _, m := range marks {
		d.Metrics.Delivered(m.State, m.Attempt)
		if m.State == Unknown || m.State == Failed { // a person has to look at it now
			d.Logger.Warn("delivery gave up", "request_id", m.RequestID, "kind", m.Kind, "state", m.State, "attempts", m.Attempt, "err", m.Error)
		}
	}
	if settled < len(marks) {
		d.Logger.Warn("dispatch: rows taken by another dispatcher meanwhile were left as it marked them",
			"taken", len(marks), "recorded", settled)
	}
}

// attempt hands row to the desk once and decides its state: an attempt after
// the first asks the desk first; a cancelled request's submission is never sent.
// Its span "delivery <kind>" (package tracing) is the parent of the desk's
// calls; a delivery that gave up is an error.
func (d *Dispatcher) attempt(ctx context.Context, row Due) (m Mark) {
	key := EventKey(row.RequestID, row.Kind, row.Seq)
	ctx, span := tracing.Start(ctx, "delivery "+row.Kind, trace.WithAttributes(
		attribute.String("delivery.request_id", row.RequestID),
		attribute.String("delivery.kind", row.Kind),
		attribute.String("delivery.key", key),
		attribute.Int("delivery.attempt", row.Attempt)))
	defer func() {
		span.SetAttributes(attribute.String("delivery.state", m.State))
		if m.State == Unknown || m.State == Failed {
			span.SetStatus(codes.Error, m.State)
		}
		span.End()
	}()
	ctx, cancel := context.WithTimeout(reviewdesk.WithAccount(ctx, row.Actor), 2*d.CallTimeout)
	defer cancel()
	kind, ok := d.kinds[row.Kind]
	if !ok {
		return d.retry(row, fmt.Errorf("no hand-over for events of kind %q (delivery's kinds)", row.Kind))
	}
	if row.Attempt > 1 {
		receipt, err := d.call(ctx, row.Kind+"_status", func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Status(ctx, key) })
		switch {
		case err == nil:
			d.Metrics.LookedUp("accepted")
			return Mark{State: Submitted, Reference: receipt.Reference}
		case errors.Is(err, reviewdesk.ErrNotFound):
			d.Metrics.LookedUp("not_found") // never accepted: sending is safe
		default:
			d.Metrics.LookedUp("unclear")
			return d.retry(row, err)
		}
	}
	if row.Kind == KindSubmit && row.Cancelled {
		return Mark{State: Withdrawn}
	}
	receipt, err := d.call(ctx, row.Kind, func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Send(ctx, key, row) })
	if refused, ok := errors.AsType[*reviewdesk.RefusedError](err); ok {
		return Mark{State: Failed, Error: refused.Error()}
	}
	if err != nil {
		return d.retry(row, err)
	}
	return Mark{State: Submitted, Reference: receipt.Reference}
}

func (d *Dispatcher) call(ctx context.Context, op string, fn func(context.Context) (reviewdesk.Receipt, error)) (reviewdesk.Receipt, error) {
	d.Metrics.Called(op)
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	return fn(ctx)
}

// retry is the mark of an unclear attempt: pending after a backoff, or unknown at the last.
func (d *Dispatcher) retry(row Due, err error) Mark {
	if row.Attempt >= d.MaxAttempts {
		return Mark{State: Unknown, Error: err.Error()}
	}
	return Mark{State: Pending, Error: err.Error(), Retry: d.backoff(row.Attempt)}
}

// backoff is the wait after attempt n: FirstRetry doubled n-1 times, at
// most a minute, jittered, as the client's backoff (api/client) is made.
func (d *Dispatcher) backoff(n int) time.Duration {
	b := &backoff.ExponentialBackOff{InitialInterval: d.FirstRetry, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: time.Minute}
	b.Reset()
	wait := b.NextBackOff()
	for range n - 1 {
		wait = b.NextBackOff()
	}
	return wait
}

// jitter is d give or take half.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d) }

// Reconcile asks the desk what became of actor's request id and its unknown
// events, and records the answers; it never sends, so it is safe to repeat.
// Errors: not_found; unavailable (the desk did not answer clearly).
func (d *Dispatcher) Reconcile(ctx context.Context, actor, id string) (Status, error) {
	d.defaults()
	st, err := d.Store.Delivery(ctx, actor, id)
	if err != nil {
		return st, err
	}
	var ask []Event
	if st.State != Submitted && st.State != Withdrawn {
		ask = append(ask, Event{Kind: KindSubmit, Seq: 1})
	}
	for _, e := range st.Events {
		if e.State == Unknown {
			ask = append(ask, e)
		}
	}
	if len(ask) == 0 {
		return st, nil
	}
	if d.Desk == nil {
		return Status{}, &apperr.Error{Code: apperr.Unavailable, Message: "no review desk is configured (PROVIDER_URL)",
			RetryAfter: time.Minute}
	}
	for _, e := range ask {
		kind, ok := d.kinds[e.Kind]
		if !ok {
			return Status{}, fmt.Errorf("reconcile: no hand-over for events of kind %q (delivery's kinds)", e.Kind)
		}
		key := EventKey(id, e.Kind, e.Seq)
		receipt, err := d.call(reviewdesk.WithAccount(ctx, actor), e.Kind+"_status",
			func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Status(ctx, key) })
		var ref string // "": never accepted, back in the queue
		if err == nil {
			ref = receipt.Reference
		} else if !errors.Is(err, reviewdesk.ErrNotFound) {
			return Status{}, &apperr.Error{Code: apperr.Unavailable, Message: "the review desk does not answer clearly; try again",
				RetryAfter: time.Second, Err: err}
		}
		if err := d.Store.Reconciled(ctx, id, e.Kind, e.Seq, ref); err != nil {
			return Status{}, err
		}
	}
	return d.Store.Delivery(ctx, actor, id)
}

type noMetrics struct{}

func (noMetrics) Delivered(string, int) {}
func (noMetrics) LookedUp(string)       {}
func (noMetrics) Called(string)         {}
