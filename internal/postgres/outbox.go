package postgres

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
)

// The outbox is how a create hands its event to the other system without calling it
// inside the request: the statement that writes the business row and completes the key
// also writes an outbox row, in the same commit, so an event exists exactly when its
// request does. The dispatcher (package delivery) then takes due rows under a lease,
// calls the desk with a key derived from the request (never a fresh one), and records
// the outcome here; a retry first asks the desk whether it took the event already.
//
// The outbox statements (package delivery), off a request's path, so unprepared.
var (
	//go:embed sql/outbox_take_due.sql
	takeDueSQL string
	//go:embed sql/outbox_settle.sql
	settleSQL string
	//go:embed sql/outbox_delivery.sql
	deliverySQL string
	//go:embed sql/outbox_backlog.sql
	backlogSQL string
	//go:embed sql/outbox_accepted.sql
	acceptedSQL string // reconcile: the desk accepted it
	//go:embed sql/outbox_requeued.sql
	requeuedSQL string // reconcile: the desk never did
)

// TakeDue implements delivery.Store: it takes up to n due rows, marking each taken
// under token for lease (FOR UPDATE SKIP LOCKED, so replicas that take at once share
// the rows and never send the same one together). An actor in busy is left out: its
// earlier event is still being handed over, and its events go in order.
func (s *Store) TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	return s.scans.takeDue(ctx, s, token, n, lease, busy)
}

func (onePostgres) takeDue(ctx context.Context, s *Store, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	var due []delivery.Due
	err := s.db.SelectContext(ctx, &due, takeDueSQL, s.takeArgs(token, n, lease, busy)...)
	return due, dbErr(err)
}

// takeArgs are a take's arguments, in its statement's order.
func (s *Store) takeArgs(token string, n int, lease time.Duration, busy []string) []any {
	if busy == nil {
		busy = []string{} // an empty array, not NULL: no actor is left out
	}
	return []any{s.now(), pq.Array(busy), n, token, lease.Microseconds()}
}

// Settle implements delivery.Store: it records what each call of a taken row ended in
// (submitted, retry later, unknown, failed). A mark counts only under the token that
// took the row: a dispatcher whose lease ran out, and whose row another took, settles
// nothing, so two dispatchers never both record an outcome.
func (s *Store) Settle(ctx context.Context, marks []delivery.Mark) (int, error) {
	return s.scans.settle(ctx, s, marks)
}

func (onePostgres) settle(ctx context.Context, s *Store, marks []delivery.Mark) (int, error) {
	var n int
	err := s.db.GetContext(ctx, &n, settleSQL, s.settleArgs(marks)...)
	return n, dbErr(err)
}

// settleArgs are the arguments of the settle of marks, in its statement's order.
func (s *Store) settleArgs(marks []delivery.Mark) []any {
	n := len(marks)
	ids, kinds, tokens := make([]string, n), make([]string, n), make([]string, n)
	states, refs, errs := make([]string, n), make([]string, n), make([]string, n)
	seqs, retry := make([]int64, n), make([]int64, n)
	for i, m := range marks {
		ids[i], kinds[i], seqs[i], states[i], refs[i], errs[i], retry[i] = m.RequestID, cmp.Or(m.Kind, delivery.KindSubmit),
			int64(max(m.Seq, 1)), m.State, m.Reference, m.Error, m.Retry.Microseconds()
		tokens[i] = m.Token
	}
	return []any{s.now(), pq.Array(ids), pq.Array(kinds), pq.Array(seqs), pq.Array(states),
		pq.Array(refs), pq.Array(errs), pq.Array(retry), pq.Array(tokens)}
}

// Delivery implements delivery.Store: the submission, its other events in order, the last cancel.
func (s *Store) Delivery(ctx context.Context, actor, id string) (delivery.Status, error) {
	var rows []struct {
		delivery.Status
		Kind string `db:"kind"`
		Seq  int    `db:"seq"`
	}
	if err := s.db.SelectContext(ctx, &rows, deliverySQL, id, actor); err != nil {
		return delivery.Status{}, dbErr(err)
	}
	if len(rows) == 0 || rows[0].Kind != delivery.KindSubmit {
		return delivery.Status{}, apperr.Errorf(apperr.NotFound, "no delivery of demo request %q", id)
	}
	st := rows[0].Status
	st.ProviderKey = delivery.EventKey(st.RequestID, delivery.KindSubmit, rows[0].Seq)
	st.Events = make([]delivery.Event, len(rows)-1)
	for i, r := range rows[1:] {
		st.Events[i] = delivery.Event{Kind: r.Kind, Seq: r.Seq, Handover: r.Handover}
		st.Events[i].ProviderKey = delivery.EventKey(st.RequestID, r.Kind, r.Seq)
		if r.Kind == delivery.KindCancel {
			st.Cancel = &st.Events[i]
		}
	}
	return st, nil
}

// Reconciled implements delivery.Store: after the desk was asked, a delivery it
// accepted is marked submitted with its reference; one it never got is due again.
// Nothing is resent blindly: the question comes first.
func (s *Store) Reconciled(ctx context.Context, id, kind string, seq int, reference string) error {
	var err error
	if reference != "" {
		_, err = s.db.ExecContext(ctx, acceptedSQL, s.now(), reference, id, kind, seq)
	} else {
		_, err = s.db.ExecContext(ctx, requeuedSQL, s.now(), id, kind, seq)
	}
	return dbErr(err)
}

// Backlog returns how many deliveries are pending, and how long the oldest has been due.
func (s *Store) Backlog(ctx context.Context) (n int, oldestDue time.Duration, err error) {
	var age sql.NullFloat64 // seconds
	if err = s.db.QueryRowContext(ctx, backlogSQL, s.now()).Scan(&n, &age); err != nil {
		return 0, 0, dbErr(err)
	}
	return n, time.Duration(max(age.Float64, 0) * float64(time.Second)), nil
}
