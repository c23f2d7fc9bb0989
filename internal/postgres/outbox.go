package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
)

// The outbox statements (package delivery). They are not on a request's
// path, so they run unprepared; each is one statement.

// takeDueSQL takes up to :batch due rows, oldest due first, skipping rows
// another dispatcher holds locked at this moment, and leases them to :token:
// a taken row is due again when the lease passes (its dispatcher died).
var takeDueSQL = `WITH ` + clockCTE + `, due AS (
    SELECT o.request_id
    FROM outbox o, clock
    WHERE o.next_attempt_at <= clock.now -- pending, by the table's CHECK
    ORDER BY o.next_attempt_at
    LIMIT CAST(:batch AS integer)
    FOR UPDATE OF o SKIP LOCKED
), taken AS (
    UPDATE outbox o SET attempts = o.attempts + 1, lease_token = CAST(:token AS uuid),
        next_attempt_at = clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond',
        updated_at = clock.now
    FROM due, clock
    WHERE o.request_id = due.request_id
    RETURNING o.request_id, o.attempts
)
SELECT taken.request_id, taken.attempts, r.topic, r.note
FROM taken JOIN demo_requests r ON r.id = taken.request_id`

// settleSQL records the marks of rows still leased to :token, in one
// statement. A row whose lease another dispatcher took is not matched. It
// commits without waiting for its WAL flush: a mark a crash loses leaves its
// row taken, due again when the lease passes, and that attempt asks the desk
// first — which is what it does after any crash.
var settleSQL = `WITH ` + clockCTE + `, async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
), mark AS (
    SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:states AS delivery_state[]), CAST(:refs AS text[]),
                         CAST(:errors AS text[]), CAST(:retry_us AS bigint[]))
        AS m(request_id, state, reference, error, retry_us)
)
UPDATE outbox o SET state = mark.state, provider_reference = nullif(mark.reference, ''),
    last_error = nullif(mark.error, ''), lease_token = NULL, updated_at = clock.now,
    next_attempt_at = CASE WHEN mark.state = 'pending'
                           THEN clock.now + mark.retry_us * interval '1 microsecond' END
FROM mark, clock, async_commit
WHERE o.request_id = mark.request_id AND o.lease_token = CAST(:token AS uuid) AND o.state = 'pending'`

// TakeDue implements delivery.Store.
func (s *Store) TakeDue(ctx context.Context, token string, n int, lease time.Duration) ([]delivery.Due, error) {
	var due []delivery.Due
	err := s.namedSelect(ctx, &due, takeDueSQL, map[string]any{
		"now": s.now(), "batch": n, "token": token, "lease_us": lease.Microseconds(),
	})
	return due, err
}

// Settle implements delivery.Store.
func (s *Store) Settle(ctx context.Context, token string, marks []delivery.Mark) (int, error) {
	ids := make([]string, len(marks))
	states, refs, errs := make([]string, len(marks)), make([]string, len(marks)), make([]string, len(marks))
	retry := make([]int64, len(marks))
	for i, m := range marks {
		ids[i], states[i], refs[i], errs[i], retry[i] = m.RequestID, m.State, m.Reference, m.Error, m.Retry.Microseconds()
	}
	res, err := s.db.NamedExecContext(ctx, settleSQL, map[string]any{
		"now": s.now(), "token": token, "ids": pq.Array(ids), "states": pq.Array(states),
		"refs": pq.Array(refs), "errors": pq.Array(errs), "retry_us": pq.Array(retry),
	})
	if err != nil {
		return 0, dbErr(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// Delivery implements delivery.Store.
func (s *Store) Delivery(ctx context.Context, actor, id string) (delivery.Status, error) {
	var st delivery.Status
	err := s.db.GetContext(ctx, &st, `
SELECT o.request_id, o.state, o.attempts, o.last_error, o.next_attempt_at,
       o.provider_reference, o.updated_at
FROM outbox o JOIN demo_requests r ON r.id = o.request_id
WHERE o.request_id = $1 AND r.actor_id = $2`, id, actor)
	if errors.Is(err, sql.ErrNoRows) {
		return st, apperr.Errorf(apperr.NotFound, "no delivery of demo request %q", id)
	}
	if err != nil {
		return st, dbErr(err)
	}
	st.ProviderKey = delivery.ProviderKey(st.RequestID)
	return st, nil
}

// The desk's answer about a request, as reconcile records it. Accepted (a
// reference): any delivery not yet submitted is, and the mark of a
// dispatcher still holding it then matches nothing. Never accepted: an
// unknown delivery goes back in the queue, due now, as if never tried (the
// desk just said so); a pending one is left to its dispatcher, which asks
// before it sends.
var (
	acceptedSQL = `WITH ` + clockCTE + `
UPDATE outbox o SET state = 'submitted', provider_reference = :reference, next_attempt_at = NULL,
    lease_token = NULL, last_error = NULL, updated_at = clock.now
FROM clock
WHERE o.request_id = CAST(:id AS uuid) AND o.state <> 'submitted'`
	requeuedSQL = `WITH ` + clockCTE + `
UPDATE outbox o SET state = 'pending', attempts = 0, next_attempt_at = clock.now, lease_token = NULL,
    last_error = 'reconciled, the review desk never accepted it, so it is queued again', updated_at = clock.now
FROM clock
WHERE o.request_id = CAST(:id AS uuid) AND o.state = 'unknown'` // no colon in a literal: sqlx would read a parameter
)

// Reconciled implements delivery.Store.
func (s *Store) Reconciled(ctx context.Context, id, reference string) error {
	query := acceptedSQL
	if reference == "" {
		query = requeuedSQL
	}
	_, err := s.db.NamedExecContext(ctx, query, map[string]any{"now": s.now(), "id": id, "reference": reference})
	return dbErr(err)
}

// Backlog returns how many deliveries are pending, and how long the one due
// longest has been due (0 when none is), by the store's time.
func (s *Store) Backlog(ctx context.Context) (n int, oldestDue time.Duration, err error) {
	var row struct {
		N   int             `db:"n"`
		Age sql.NullFloat64 `db:"age"`
	}
	err = s.db.GetContext(ctx, &row, `
SELECT count(*) AS n,
       extract(epoch FROM coalesce($1::timestamptz, now()) - min(next_attempt_at)) AS age
FROM outbox WHERE next_attempt_at IS NOT NULL -- pending, by the table's CHECK
`, s.now())
	if err != nil {
		return 0, 0, dbErr(err)
	}
	return row.N, time.Duration(max(row.Age.Float64, 0) * float64(time.Second)), nil
}

// namedSelect runs query with named args and scans its rows into dest.
func (s *Store) namedSelect(ctx context.Context, dest any, query string, args map[string]any) error {
	q, list, err := sqlx.Named(query, args)
	if err != nil {
		return err
	}
	return dbErr(s.db.SelectContext(ctx, dest, s.db.Rebind(q), list...))
}
