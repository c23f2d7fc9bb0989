// Package delivery hands every accepted demo request to the review desk, an
// external service, and keeps a record of what became of each hand-over.
//
// A local table cannot make a call to another system happen exactly once: a
// dispatcher can send, be accepted, and die before it records that. So the
// create writes an outbox row in the same statement as the request and its
// key (nothing calls the desk inside a request), and the dispatcher makes the
// call safe to repeat instead:
//
//   - it takes due rows with FOR UPDATE SKIP LOCKED and a lease, so several
//     dispatchers share one backlog and never send one row at the same moment;
//   - it sends under the desk's own Idempotency-Key, derived from the request
//     (demo-request:<id>), the same on every attempt: the desk accepts a key
//     once;
//   - an attempt after the first — after a timeout, a crash, an unclear
//     answer — asks the desk for the key's status FIRST, and sends only if
//     the desk never accepted it;
//   - it retries with bounded, jittered exponential backoff; after
//     MaxAttempts the delivery is unknown (or failed, on a definite refusal)
//     and waits for a person: the status route shows it, and reconcile asks
//     the desk and records its answer, never resending blindly;
//   - its marks are fenced by the lease token: a dispatcher whose lease
//     passed, and whose row another took, changes nothing.
//
// A cancelled request must not reach the desk, or must be cancelled there.
// The rule between the cancel and the dispatcher: no attempt that takes a
// delivery after its request's cancel committed sends it; what the desk
// accepted (or an attempt taken before the cancel is sending) is cancelled
// there.
//
//   - The cancel's own statement withdraws a delivery never tried (the desk
//     is never called), and makes a tried one that waits for its next
//     attempt due at once.
//   - The dispatcher never submits a cancelled request: for a delivery
//     tried before, it asks the desk whether an earlier attempt got there
//     (submitted) or not (withdrawn), and sends nothing either way.
//   - For any delivery not withdrawn, the cancel queues a second outbox
//     row, a cancel, which the dispatcher hands the desk by the same rules
//     under the key demo-request:<id>:cancel (CancelKey). A dispatcher that
//     took the submission before the cancel committed may be sending it
//     right now: its attempt settles it, and the cancel at the desk follows.
//
// Each outbox row is one event of its request, and a request may have any
// number of one kind: reopened and cancelled again (in a service that has a
// reopen), it has a second cancel, a row of its own under a key of its own
// (EventKey), handed to the desk once like the first. A request's events
// reach the desk in the order their statements queued them: one is not
// taken while an earlier one is pending. The dispatcher knows how to hand
// over a submission and a cancel; an operation of a service's own hands an
// event of a kind of its own the same way: its statement queues the row,
// and Dispatcher.Kinds says how the desk is told.
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

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/reviewdesk"
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
	KindSubmit = "submit" // the request's submission, under ProviderKey
	KindCancel = "cancel" // its cancel, under CancelKey, queued by the request's cancel
)

// A Kind is how one kind of event is handed to the desk: Send sends event e
// under key (EventKey), and Status asks the desk what became of an earlier
// send under key (reviewdesk.ErrNotFound: it never accepted one).
type Kind struct {
	Send   func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error)
	Status func(ctx context.Context, key string) (reviewdesk.Receipt, error)
}

// ProviderKey is the desk's Idempotency-Key of request id: the same on every
// attempt, by every dispatcher.
func ProviderKey(requestID string) string { return "demo-request:" + requestID }

// CancelKey is the desk's Idempotency-Key of the first cancel of request id.
func CancelKey(requestID string) string { return ProviderKey(requestID) + ":cancel" }

// EventKey is the desk's Idempotency-Key of request id's seq-th event of
// kind (seq 1 for the first): ProviderKey or CancelKey for the first, and
// that key with ":<seq>" after it for a later one, such as
// demo-request:<id>:cancel:2. The same on every attempt, by every
// dispatcher.
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

// Status is a delivery as the owner of its request sees it.
type Status struct {
	RequestID         string     `json:"requestId" db:"request_id"`
	State             string     `json:"state" db:"state"`
	Attempts          int        `json:"attempts" db:"attempts"`
	LastError         *string    `json:"lastError,omitempty" db:"last_error"`
	NextAttemptAt     *time.Time `json:"nextAttemptAt,omitempty" db:"next_attempt_at"`
	ProviderKey       string     `json:"providerKey" db:"-"` // ProviderKey(RequestID)
	ProviderReference *string    `json:"providerReference,omitempty" db:"provider_reference"`
	UpdatedAt         time.Time  `json:"updatedAt" db:"updated_at"`
	// Events are the request's events after its submission (its cancels,
	// and a service's own kinds), in the order they were queued.
	Events []Event `json:"events,omitempty" db:"-"`
	// Cancel is the last of Events that is a cancel, if any: the request's
	// cancel queued one when its delivery was not Withdrawn.
	Cancel *Event `json:"cancel,omitempty" db:"-"`
}

// Event is the hand-over of one event of a request to the desk: pending,
// submitted (the desk holds it), unknown or failed, as a delivery.
type Event struct {
	Kind              string     `json:"kind"`
	State             string     `json:"state"`
	Attempts          int        `json:"attempts"`
	LastError         *string    `json:"lastError,omitempty"`
	NextAttemptAt     *time.Time `json:"nextAttemptAt,omitempty"`
	ProviderKey       string     `json:"providerKey"` // EventKey(RequestID, Kind, Seq)
	Seq               int        `json:"-"`           // which of its request's events of its kind, 1 for the first
	ProviderReference *string    `json:"providerReference,omitempty"`
	UpdatedAt         time.Time  `json:"updatedAt"`
}

// Due is a row a dispatcher took: the request to hand over, and the attempt
// this is (1 for the first).
type Due struct {
	RequestID string `db:"request_id"`
	// Actor owns the request: the desk's calls are made for this account.
	Actor   string `db:"actor_id"`
	Kind    string `db:"kind"` // KindSubmit, KindCancel or one of Dispatcher.Kinds
	Seq     int    `db:"seq"`  // which of its request's events of its kind, 1 for the first
	Attempt int    `db:"attempts"`
	Topic   string `db:"topic"`
	Note    string `db:"note"`
	// Cancelled is true when the request was cancelled: a submission of it
	// is never sent.
	Cancelled bool `db:"cancelled"`
}

// Mark is what one attempt decided for its row: the new state, and for a
// pending row the wait before the next attempt.
type Mark struct {
	RequestID string
	Kind      string
	Seq       int
	Token     string // the lease token the row was taken under
	Actor     string // the row's: its store finds the row's shard by it
	State     string
	Reference string // Submitted
	Error     string // the last error, if any
	Retry     time.Duration
}

// Store keeps the outbox.
type Store interface {
	// TakeDue takes up to n due rows for lease under token, leaving the
	// rows of the busy actors: each taken row is due again only when the
	// lease passes.
	TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]Due, error)
	// Settle records the marks of rows still taken under their tokens, and
	// returns how many it recorded: a row another dispatcher took since is
	// left alone.
	Settle(ctx context.Context, marks []Mark) (int, error)
	// Delivery returns the delivery of actor's request id. Errors: not_found.
	Delivery(ctx context.Context, actor, id string) (Status, error)
	// Reconciled records the desk's answer about request id's seq-th row
	// of kind: accepted with reference, or
	// (reference "") never accepted.
	Reconciled(ctx context.Context, id, kind string, seq int, reference string) error
}

// Metrics is what a dispatcher reports to.
type Metrics interface {
	// Delivered counts a mark by its state, and for a final one observes
	// the attempts it took.
	Delivered(state string, attempts int)
	// LookedUp counts a status lookup before a resend, by the desk's answer:
	// accepted, not_found or unclear.
	LookedUp(answer string)
	// Called counts a call to the desk: the kind of the event it sends
	// (submit, cancel, …), or that kind and _status for a lookup.
	Called(op string)
}

// Dispatcher hands due outbox rows to the desk. Each row it takes is handed
// over on its own, under the row's lease and the call's deadline, and its
// mark is recorded as soon as it is decided, with the others decided
// meanwhile: a slow call holds its own row and its place in flight, never
// another row's, and the next take does not wait for it.
type Dispatcher struct {
	Store  Store
	Desk   *reviewdesk.Client
	Logger *slog.Logger
	// Kinds, if set, are how the events of a service's own kinds are
	// handed to the desk, beside the submission and the cancel. An event
	// of a kind no one knows is retried, and ends unknown.
	Kinds map[string]Kind
	// Metrics, if set, counts deliveries, lookups and calls.
	Metrics Metrics
	// Batch is how many rows one take asks for at most (default 32).
	Batch int
	// InFlight bounds the rows taken and not yet recorded (default 256): a
	// take asks for no more rows than there are free places.
	InFlight int
	// PerActor bounds one actor's rows in flight (default 128; a take may
	// pass it by less than a batch): an account whose calls hang fills its
	// own places, and the other actors' rows are still taken.
	PerActor int
	// CallTimeout bounds one call to the desk (default 5 s); a row's lease
	// is three of them: a lookup and a send, with a margin.
	CallTimeout time.Duration
	// MaxAttempts is when an unclear delivery becomes unknown (default 8).
	MaxAttempts int
	// FirstRetry is the backoff after a first failed attempt (default 1 s);
	// it doubles with each attempt, jittered by ±50 %, up to MaxRetry
	// (default 1 min).
	FirstRetry, MaxRetry time.Duration
	// Idle is the pause when nothing is due (default 200 ms, jittered).
	Idle time.Duration

	once sync.Once
	mu   sync.Mutex
	// inFlight counts the rows taken and not yet recorded, all and by actor.
	inFlight int
	byActor  map[string]int
	freed    chan struct{} // a place was freed
	kinds    map[string]Kind
}

// decision is a taken row and its attempt's mark, to be recorded.
type decision struct {
	row  Due
	mark Mark
}

// defaults fills the zero fields, once.
func (d *Dispatcher) defaults() { d.once.Do(d.setDefaults) }

func (d *Dispatcher) setDefaults() {
	d.Batch = cmp.Or(d.Batch, 32)
	d.InFlight = cmp.Or(d.InFlight, 256)
	d.PerActor = cmp.Or(d.PerActor, 128)
	d.CallTimeout = cmp.Or(d.CallTimeout, 5*time.Second)
	d.MaxAttempts = cmp.Or(d.MaxAttempts, 8)
	d.FirstRetry = cmp.Or(d.FirstRetry, time.Second)
	d.MaxRetry = cmp.Or(d.MaxRetry, time.Minute)
	d.Idle = cmp.Or(d.Idle, 200*time.Millisecond)
	if d.Metrics == nil {
		d.Metrics = noMetrics{}
	}
	d.byActor = map[string]int{}
	d.freed = make(chan struct{}, 1)
	d.kinds = map[string]Kind{
		KindSubmit: {
			Send: func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error) {
				return d.Desk.Submit(ctx, key, reviewdesk.Submission{RequestID: e.RequestID, Topic: e.Topic, Note: e.Note})
			},
			Status: func(ctx context.Context, key string) (reviewdesk.Receipt, error) { return d.Desk.Status(ctx, key) }},
		KindCancel: {
			Send: func(ctx context.Context, key string, e Due) (reviewdesk.Receipt, error) {
				return d.Desk.Cancel(ctx, key, ProviderKey(e.RequestID))
			},
			Status: func(ctx context.Context, key string) (reviewdesk.Receipt, error) {
				return d.Desk.CancelStatus(ctx, key)
			}},
	}
	maps.Copy(d.kinds, d.Kinds)
}

// Run dispatches until ctx ends: it takes due rows while there are free
// places, and before it returns it records the marks of the rows in
// flight. A take that fails (the database is away) is logged and tried
// again after a pause that doubles with each failure in a row, up to
// maxFailedPause, so a database that is gone for long is asked, and logged,
// a few times a second at most.
func (d *Dispatcher) Run(ctx context.Context) {
	d.defaults()
	decided := make(chan decision, d.InFlight)
	recorded := make(chan struct{})
	go func() { defer close(recorded); d.recordAll(ctx, decided) }()
	var wg sync.WaitGroup
	pause := d.Idle
	// A take that leaves the busy actors' rows reads all of them: after one
	// that found nothing else, the next waits until a busy actor frees a
	// place or a pause passes, instead of reading them again at each freed
	// place.
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
			sleep(ctx, pause/2+rand.N(pause))
			pause = min(2*pause, maxFailedPause)
		case n == 0:
			// Nothing due, or only rows of actors at their share: a freed
			// place may make one of theirs takeable before the pause ends.
			pause = d.Idle
			if len(busy) > 0 {
				othersIdleUntil = time.Now().Add(d.Idle)
			}
			d.waitFreed(ctx, d.Idle/2+rand.N(d.Idle))
		default:
			pause = d.Idle
		}
	}
	wg.Wait()
	close(decided)
	<-recorded
}

// waitFreed waits until ctx ends, a place is freed, or after passes (0:
// no bound).
func (d *Dispatcher) waitFreed(ctx context.Context, after time.Duration) {
	var timeout <-chan time.Time
	if after > 0 {
		t := time.NewTimer(after)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-d.freed:
	case <-timeout:
	}
}

// maxFailedPause bounds the pause after failed takes.
const maxFailedPause = 5 * time.Second

// Once takes up to Batch due rows, hands each over, records their marks,
// and returns how many rows it took.
func (d *Dispatcher) Once(ctx context.Context) (int, error) {
	d.defaults()
	decided := make(chan decision, d.Batch)
	var wg sync.WaitGroup
	n, err := d.take(ctx, &wg, d.Batch, nil, decided)
	wg.Wait()
	close(decided)
	d.recordAll(ctx, decided)
	return n, err
}

// places returns how many more rows may be taken, and the actors that have
// as many in flight as one may.
func (d *Dispatcher) places() (free int, busy []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for actor, n := range d.byActor {
		if n >= d.PerActor {
			busy = append(busy, actor)
		}
	}
	return d.InFlight - d.inFlight, busy
}

// take takes up to n due rows of actors not busy and starts, on wg, the
// attempt of each, which sends its decision on decided. It returns how
// many rows it took.
func (d *Dispatcher) take(ctx context.Context, wg *sync.WaitGroup, n int, busy []string, decided chan<- decision) (int, error) {
	token := uuid.NewString()
	due, err := d.Store.TakeDue(ctx, token, n, 3*d.CallTimeout, busy)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	d.inFlight += len(due)
	for _, row := range due {
		d.byActor[row.Actor]++
	}
	d.mu.Unlock()
	for _, row := range due {
		wg.Go(func() {
			m := d.tracedAttempt(ctx, row)
			m.Token, m.Actor = token, row.Actor
			decided <- decision{row: row, mark: m}
		})
	}
	return len(due), nil
}

// recordAll records the decisions sent on decided until it is closed, all
// those waiting at once, and frees their places.
func (d *Dispatcher) recordAll(ctx context.Context, decided <-chan decision) {
	for first := range decided {
		batch := []decision{first}
	waiting:
		for {
			select {
			case next, ok := <-decided:
				if !ok {
					break waiting
				}
				batch = append(batch, next)
			default:
				break waiting
			}
		}
		d.record(ctx, batch)
		d.mu.Lock()
		for _, x := range batch {
			d.inFlight--
			if d.byActor[x.row.Actor]--; d.byActor[x.row.Actor] == 0 {
				delete(d.byActor, x.row.Actor)
			}
		}
		d.mu.Unlock()
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}
}

// record records the marks of batch. It records them even when ctx ended
// meanwhile (a shutdown): an accepted submission is best recorded now, not
// found by a lookup later. A mark that cannot be recorded leaves its row
// taken: it is due again when its lease passes, and that attempt asks the
// desk first.
func (d *Dispatcher) record(ctx context.Context, batch []decision) {
	marks := make([]Mark, len(batch))
	for i, x := range batch {
		marks[i] = x.mark
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.CallTimeout)
	defer cancel()
	settled, err := d.Store.Settle(ctx, marks)
	if err != nil {
		d.Logger.Warn("dispatch: marks not recorded; their rows are due again when their leases pass",
			"marks", len(marks), "err", err)
		return
	}
	for _, x := range batch {
		d.Metrics.Delivered(x.mark.State, x.row.Attempt)
		if m := x.mark; m.State == Unknown || m.State == Failed { // a person has to look at it now
			d.Logger.Warn("delivery gave up", "request_id", m.RequestID, "kind", m.Kind, "state", m.State, "attempts", x.row.Attempt, "err", m.Error)
		}
	}
	if settled < len(marks) {
		d.Logger.Warn("dispatch: rows taken by another dispatcher meanwhile were left as it marked them",
			"taken", len(marks), "recorded", settled)
	}
}

// attempt hands row to the desk once and decides its mark. An attempt after
// the first asks the desk first: the one before may have been accepted. A
// submission of a cancelled request is never sent: asked, the desk holds it
// (submitted; the request's cancel row cancels it there) or never got it
// (withdrawn).
func (d *Dispatcher) attempt(ctx context.Context, row Due) Mark {
	ctx, cancel := context.WithTimeout(reviewdesk.WithAccount(ctx, row.Actor), 2*d.CallTimeout)
	defer cancel()
	kind, ok := d.kinds[row.Kind]
	if !ok {
		return d.retry(row, fmt.Errorf("no hand-over for events of kind %q (Dispatcher.Kinds)", row.Kind))
	}
	key := EventKey(row.RequestID, row.Kind, row.Seq)
	if row.Attempt > 1 {
		receipt, err := d.call(ctx, row.Kind+"_status", func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Status(ctx, key) })
		switch {
		case err == nil:
			d.Metrics.LookedUp("accepted")
			return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Submitted, Reference: receipt.Reference}
		case errors.Is(err, reviewdesk.ErrNotFound):
			d.Metrics.LookedUp("not_found") // never accepted: sending is safe
		default:
			d.Metrics.LookedUp("unclear")
			return d.retry(row, err)
		}
	}
	if row.Kind == KindSubmit && row.Cancelled {
		// The desk never accepted it (asked above, or never tried): it
		// never will.
		return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Withdrawn}
	}
	receipt, err := d.call(ctx, row.Kind, func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Send(ctx, key, row) })
	if refused, ok := errors.AsType[*reviewdesk.RefusedError](err); ok {
		return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Failed, Error: refused.Error()}
	}
	if err != nil {
		return d.retry(row, err)
	}
	return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Submitted, Reference: receipt.Reference}
}

func (d *Dispatcher) call(ctx context.Context, op string, fn func(context.Context) (reviewdesk.Receipt, error)) (reviewdesk.Receipt, error) {
	d.Metrics.Called(op)
	ctx, cancel := context.WithTimeout(ctx, d.CallTimeout)
	defer cancel()
	return fn(ctx)
}

// retry is the mark of an unclear attempt: pending after a backoff, or
// unknown once the attempts ran out.
func (d *Dispatcher) retry(row Due, err error) Mark {
	if row.Attempt >= d.MaxAttempts {
		return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Unknown, Error: err.Error()}
	}
	return Mark{RequestID: row.RequestID, Kind: row.Kind, Seq: row.Seq, State: Pending, Error: err.Error(), Retry: d.backoff(row.Attempt)}
}

// backoff is the wait after attempt n (1 for the first): FirstRetry doubled
// n-1 times, capped at MaxRetry, jittered.
func (d *Dispatcher) backoff(n int) time.Duration {
	b := &backoff.ExponentialBackOff{InitialInterval: d.FirstRetry, RandomizationFactor: 0.5,
		Multiplier: 2, MaxInterval: d.MaxRetry}
	b.Reset()
	wait := b.NextBackOff()
	for range n - 1 {
		wait = b.NextBackOff()
	}
	return wait
}

// Delivery returns the delivery of actor's request id. Errors: not_found.
func (d *Dispatcher) Delivery(ctx context.Context, actor, id string) (Status, error) {
	return d.Store.Delivery(ctx, actor, id)
}

// Reconcile asks the desk now what became of actor's request id and of its
// other events, and records its answers: accepted makes a row submitted;
// never accepted puts an unknown row back in the queue, whose next attempt
// sends it. It never sends itself, so it is safe to repeat. A submitted or
// withdrawn delivery, and an event not unknown (pending is its
// dispatcher's; failed was refused), are answered as they are, without a
// call.
//
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
			return Status{}, fmt.Errorf("reconcile: no hand-over for events of kind %q (Dispatcher.Kinds)", e.Kind)
		}
		key := EventKey(id, e.Kind, e.Seq)
		receipt, err := d.call(reviewdesk.WithAccount(ctx, actor), e.Kind+"_status",
			func(ctx context.Context) (reviewdesk.Receipt, error) { return kind.Status(ctx, key) })
		switch {
		case err == nil:
			err = d.Store.Reconciled(ctx, id, e.Kind, e.Seq, receipt.Reference)
		case errors.Is(err, reviewdesk.ErrNotFound):
			err = d.Store.Reconciled(ctx, id, e.Kind, e.Seq, "")
		default:
			return Status{}, &apperr.Error{Code: apperr.Unavailable, Message: "the review desk does not answer clearly; try again",
				RetryAfter: time.Second, Err: err}
		}
		if err != nil {
			return Status{}, err
		}
	}
	return d.Store.Delivery(ctx, actor, id)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

type noMetrics struct{}

func (noMetrics) Delivered(string, int) {}
func (noMetrics) LookedUp(string)       {}
func (noMetrics) Called(string)         {}
