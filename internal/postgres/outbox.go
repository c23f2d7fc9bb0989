package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
)

// The outbox statements (package delivery). They are not on a request's
// path, so they run unprepared; each is one statement.
var (
	takeDueSQL  = statement("outbox_take_due.sql")
	settleSQL   = statement("outbox_settle.sql")
	deliverySQL = statement("outbox_delivery.sql")
	backlogSQL  = statement("outbox_backlog.sql")
	// The desk's answer about a request, as reconcile records it: accepted
	// (a reference), or never accepted.
	acceptedSQL = statement("outbox_accepted.sql")
	requeuedSQL = statement("outbox_requeued.sql")
)

// TakeDue implements delivery.Store.
func (s *Store) TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	if busy == nil {
		busy = []string{} // an empty array, not NULL: no actor is left out
	}
	var due []delivery.Due
	err := s.db.SelectContext(ctx, &due, takeDueSQL, s.now(), pq.Array(busy), n, token, lease.Microseconds())
	return due, dbErr(err)
}

// Settle implements delivery.Store.
func (s *Store) Settle(ctx context.Context, marks []delivery.Mark) (int, error) {
	ids, kinds, tokens := make([]string, len(marks)), make([]string, len(marks)), make([]string, len(marks))
	states, refs, errs := make([]string, len(marks)), make([]string, len(marks)), make([]string, len(marks))
	seqs, retry := make([]int64, len(marks)), make([]int64, len(marks))
	for i, m := range marks {
		ids[i], kinds[i], seqs[i], states[i], refs[i], errs[i], retry[i] = m.RequestID, cmp.Or(m.Kind, delivery.KindSubmit),
			int64(max(m.Seq, 1)), m.State, m.Reference, m.Error, m.Retry.Microseconds()
		tokens[i] = m.Token
	}
	res, err := s.db.ExecContext(ctx, settleSQL, s.now(), pq.Array(ids), pq.Array(kinds), pq.Array(seqs), pq.Array(states),
		pq.Array(refs), pq.Array(errs), pq.Array(retry), pq.Array(tokens))
	if err != nil {
		return 0, dbErr(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Delivery implements delivery.Store: the request's submission, with its
// other events in the order they were queued, and the last cancel as Cancel.
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
	for _, r := range rows[1:] {
		st.Events = append(st.Events, delivery.Event{Kind: r.Kind, State: r.State, Attempts: r.Attempts, LastError: r.LastError,
			NextAttemptAt: r.NextAttemptAt, ProviderKey: delivery.EventKey(st.RequestID, r.Kind, r.Seq), Seq: r.Seq,
			ProviderReference: r.ProviderReference, UpdatedAt: r.UpdatedAt})
	}
	for i := range st.Events {
		if st.Events[i].Kind == delivery.KindCancel {
			st.Cancel = &st.Events[i]
		}
	}
	return st, nil
}

// Reconciled implements delivery.Store.
func (s *Store) Reconciled(ctx context.Context, id, kind string, seq int, reference string) error {
	var err error
	if reference != "" {
		_, err = s.db.ExecContext(ctx, acceptedSQL, s.now(), reference, id, kind, seq)
	} else {
		_, err = s.db.ExecContext(ctx, requeuedSQL, s.now(), id, kind, seq)
	}
	return dbErr(err)
}

// Backlog returns how many deliveries are pending, and how long the one due
// longest has been due (0 when none is), by the store's time.
func (s *Store) Backlog(ctx context.Context) (n int, oldestDue time.Duration, err error) {
	var row struct {
		N   int             `db:"n"`
		Age sql.NullFloat64 `db:"age"`
	}
	err = s.db.GetContext(ctx, &row, backlogSQL, s.now())
	if err != nil {
		return 0, 0, dbErr(err)
	}
	return row.N, time.Duration(max(row.Age.Float64, 0) * float64(time.Second)), nil
}
