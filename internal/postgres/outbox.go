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

// The outbox is how a create hands its event to the other system without calling it
// inside the request: the statement that writes the business row and completes the key
// also writes an outbox row, in the same commit, so an event exists exactly when its
// request does. The dispatcher (package delivery) then takes due rows under a lease,
// calls the desk with a key derived from the request (never a fresh one), and records
// the outcome here; a retry first asks the desk whether it took the event already.
//
// The outbox statements (package delivery), off a request's path, so unprepared.
var (
	takeDue     = scanOf("outbox_take_due.sql")
	settle      = scanOf("outbox_settle.sql")
	deliverySQL = statement("outbox_delivery.sql")
	backlogSQL  = statement("outbox_backlog.sql")
	acceptedSQL = statement("outbox_accepted.sql") // reconcile: the desk accepted it
	requeuedSQL = statement("outbox_requeued.sql") // reconcile: the desk never did
)

// TakeDue implements delivery.Store: it takes up to n due rows, marking each taken
// under token for lease (FOR UPDATE SKIP LOCKED, so replicas that take at once share
// the rows and never send the same one together). An actor in busy is left out: its
// earlier event is still being handed over, and its events go in order. On Citus it
// takes from the shards in turn until it has n rows; a failed shard's error counts
// only when none gave rows, since a partial batch is still progress.
func (s *Store) TakeDue(ctx context.Context, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error) {
	if busy == nil {
		busy = []string{} // an empty array, not NULL: no actor is left out
	}
	ts, err := s.targets(ctx, takeDue)
	if err != nil {
		return nil, err
	}
	var due []delivery.Due
	var failed error
	first := s.nextShard.Add(1)
	for i := 0; i < len(ts) && len(due) < n; i++ {
		t := ts[(int(first%uint32(len(ts)))+i)%len(ts)]
		var part []delivery.Due
		if err := s.db.SelectContext(ctx, &part, t.query, t.with(s.now(), pq.Array(busy), n-len(due), token, lease.Microseconds())...); err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		due = append(due, part...)
	}
	if len(due) == 0 && failed != nil {
		return nil, dbErr(failed)
	}
	return due, nil
}

// Settle implements delivery.Store: it records what each call of a taken row ended in
// (submitted, retry later, unknown, failed). A mark counts only under the token that
// took the row: a dispatcher whose lease ran out, and whose row another took, settles
// nothing, so two dispatchers never both record an outcome. On Citus each shard's
// marks go to that shard.
func (s *Store) Settle(ctx context.Context, marks []delivery.Mark) (int, error) {
	actors := make([]string, len(marks))
	for i, m := range marks {
		actors[i] = m.Actor
	}
	ts, of, err := s.targetsOf(ctx, settle, actors)
	if err != nil {
		return 0, err
	}
	settled := 0
	var failed error
	for j, t := range ts {
		n, err := s.settleOn(ctx, t, marks, of[j])
		settled += n
		failed = cmp.Or(failed, err)
	}
	return settled, failed
}

// settleOn records the marks of the indexes given on t.
func (s *Store) settleOn(ctx context.Context, t target, marks []delivery.Mark, of []int) (int, error) {
	ids, kinds, tokens := make([]string, len(of)), make([]string, len(of)), make([]string, len(of))
	states, refs, errs := make([]string, len(of)), make([]string, len(of)), make([]string, len(of))
	seqs, retry := make([]int64, len(of)), make([]int64, len(of))
	for i, k := range of {
		m := marks[k]
		ids[i], kinds[i], seqs[i], states[i], refs[i], errs[i], retry[i] = m.RequestID, cmp.Or(m.Kind, delivery.KindSubmit),
			int64(max(m.Seq, 1)), m.State, m.Reference, m.Error, m.Retry.Microseconds()
		tokens[i] = m.Token
	}
	args := t.with(s.now(), pq.Array(ids), pq.Array(kinds), pq.Array(seqs), pq.Array(states),
		pq.Array(refs), pq.Array(errs), pq.Array(retry), pq.Array(tokens))
	if t.query == settle.sql {
		res, err := s.db.ExecContext(ctx, t.query, args...)
		if err != nil {
			return 0, dbErr(err)
		}
		n, err := res.RowsAffected()
		return int(n), err
	}
	var n int // the call's: how many rows it changed
	err := s.db.GetContext(ctx, &n, t.query, args...)
	return n, dbErr(err)
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
