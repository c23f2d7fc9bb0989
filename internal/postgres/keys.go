package postgres

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// answerOnlySQL completes a key with no business change (a refusal), through
// write_key (migrations/000002_write_key.up.sql), as every key write does.
//
//go:embed sql/answer_only.sql
var answerOnlySQL string

// effect is the store's idempotency.Effect: its statement, the call of an
// operation's function that returns key_write (its key's arguments, then
// args, its business arguments).
type effect struct {
	what string
	stmt string
	args []any
}

func (e *effect) Describe() string { return e.what }

// answer runs a's statement, in one phase or as the finish of c (finish).
// The key's arguments come first (fp and ttl, which a finish does not use),
// then a's answer, then the effect's.
//
// One statement serves both paths because the key and the business rows must
// commit together either way: in one phase the key is written completed with
// its answer, and in two the claim's row is completed, but only while c's
// token still holds it. Either way the business rows are written only where
// the key was, so no crash or race can leave a request without its key, or a
// key completed without its request. The body is stored as bytes, not jsonb,
// so that a replay sends the very bytes of the first answer.
//
// A change decided on a read (a cancel) finds its row changed since the work
// read it, or places an event another transition placed meanwhile: its
// function aborts, serialization_failure or unique_violation, and nothing of
// the statement commits, not the key either (ErrEffectNotApplied): the work
// decides again on a fresh read.
func (s *Store) answer(ctx context.Context, c idempotency.Claim, finish bool, fp any, ttl any, a idempotency.Answer) (w idempotency.KeyWrite, err error) {
	e, ok := a.Effect.(*effect)
	if !ok && a.Effect != nil {
		return w, fmt.Errorf("postgres: %s is not an effect of this store", a.Effect.Describe())
	}
	q, business := answerOnlySQL, []any(nil)
	if e != nil {
		q, business = e.stmt, e.args
	}
	headers, err := json.Marshal(a.Response.Header)
	if err != nil {
		return w, fmt.Errorf("encode headers: %w", err)
	}
	args := slices.Concat([]any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token, finish, fp, ttl,
		a.Response.Status, a.Response.Body, string(headers),
		sql.NullString{String: a.Response.ResultID, Valid: a.Response.ResultID != ""}}, business)
	w, changed, err := s.write(ctx, q, args)
	if pe, ok := errors.AsType[*pq.Error](err); ok && (pe.Code.Name() == "serialization_failure" || pe.Code.Name() == "unique_violation") {
		return idempotency.KeyWrite{}, idempotency.ErrEffectNotApplied
	}
	if err == nil && e != nil && w.Wrote && changed == 0 {
		err = fmt.Errorf("postgres: the business write %q changed nothing", e.what)
	}
	return w, err
}

// recordRow is a row of idempotency_keys as the statements return it: recordColumns.
// Every column may be NULL: a key write returns the row that was there before
// it, and a free key had none.
type recordRow struct {
	Fingerprint     sql.NullString
	State           sql.NullString
	LeaseUntil      sql.NullTime
	StatusCode      sql.NullInt64
	ResponseBody    []byte
	ResponseHeaders []byte
	ResultID        sql.NullString
	CreatedAt       sql.NullTime
	CompletedAt     sql.NullTime
	ExpiresAt       sql.NullTime
}

// recordColumns are the columns of a recordRow, in the order of dest.
var recordColumns = []string{"fingerprint", "state", "lease_until", "status_code", "response_body",
	"response_headers", "result_id", "created_at", "completed_at", "expires_at"}

// dest appends the scan destinations of r to d, in the order of recordColumns.
func (r *recordRow) dest(d ...any) []any {
	return append(d, &r.Fingerprint, &r.State, &r.LeaseUntil, &r.StatusCode, &r.ResponseBody,
		&r.ResponseHeaders, &r.ResultID, &r.CreatedAt, &r.CompletedAt, &r.ExpiresAt)
}

// record converts the row, nil when the LEFT JOIN found none.
func (r recordRow) record() (*idempotency.Record, error) {
	if !r.State.Valid {
		return nil, nil
	}
	rec := &idempotency.Record{
		Fingerprint: r.Fingerprint.String,
		State:       idempotency.State(r.State.String),
		LeaseUntil:  r.LeaseUntil.Time,
		CreatedAt:   r.CreatedAt.Time,
		CompletedAt: r.CompletedAt.Time,
		ExpiresAt:   r.ExpiresAt.Time,
		Response: idempotency.Response{
			Status:   int(r.StatusCode.Int64),
			Body:     r.ResponseBody,
			ResultID: r.ResultID.String,
		},
	}
	if len(r.ResponseHeaders) > 0 {
		if err := json.Unmarshal(r.ResponseHeaders, &rec.Response.Header); err != nil {
			return nil, fmt.Errorf("decode stored headers: %w", err)
		}
	}
	return rec, nil
}

// The columns the store scans by position: of a key write, and of lookup_key.sql.
var (
	writeColumns  = append(append([]string{"now", "wrote"}, recordColumns...), "effect")
	lookupColumns = append([]string{"now"}, recordColumns...)
)

// write runs a key write: what it found, and how many rows its effect changed.
func (s *Store) write(ctx context.Context, query string, args []any) (w idempotency.KeyWrite, changed int, err error) {
	var row recordRow
	if err = s.rows.queryRow(ctx, query, args, append(row.dest(&w.Now, &w.Wrote), &changed)...); err != nil {
		return idempotency.KeyWrite{}, 0, err
	}
	w.Prev, err = row.record()
	return w, changed, err
}

// claimSQL writes a key in progress through write_key, as every key write does.
//
//go:embed sql/claim.sql
var claimSQL string

// Claim implements idempotency.Store (sql/claim.sql). The claim commits on its
// own, before the work runs, so that a retry meanwhile finds the key in
// progress rather than running the work a second time. Its token is new on
// every claim: the finish completes the key only while the token still holds
// it, which fences out an owner whose lease passed and whose key was taken.
func (s *Store) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (idempotency.KeyWrite, error) {
	w, _, err := s.write(ctx, claimSQL, []any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token, fp, lease.Microseconds(), ttl.Microseconds()})
	return w, err
}

// CompleteAtomically implements idempotency.Store (sql/create_demo_request.sql, for a create).
// The key is written completed and the business rows from it in one
// statement: a duplicate sent meanwhile waits on the key's unique index for
// this commit and then replays, and a crash before the commit leaves nothing.
func (s *Store) CompleteAtomically(ctx context.Context, c idempotency.Claim, fp string, ttl time.Duration, a idempotency.Answer) (idempotency.KeyWrite, error) {
	return s.answer(ctx, c, false, fp, ttl.Microseconds(), a)
}

// FinishClaimAtomically implements idempotency.Store (the same statement, as the claim's finish).
// A finish that wrote nothing found the key no longer under c's token: another
// request took it over after the lease passed, and this work's rows were not
// written, so the work is not done twice (ErrLeaseLost).
func (s *Store) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	w, err := s.answer(ctx, c, true, nil, nil, a)
	if err == nil && !w.Wrote {
		err = idempotency.ErrLeaseLost
	}
	return err
}

var (
	//go:embed sql/release_claim.sql
	releaseClaimSQL string
	//go:embed sql/lookup_key.sql
	lookupKeySQL string
	//go:embed sql/count_in_progress_claims.sql
	countInProgressClaimsSQL string
)

// Release implements idempotency.Store. It deletes the key only while c's
// token holds it in progress: a key another request took over, or one that was
// completed, is not this request's to delete. A released key is free, and the
// next attempt runs the work afresh, as a transient failure should allow.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	_, err := s.db.ExecContext(ctx, releaseClaimSQL, c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
	return dbErr(err)
}

// Lookup implements idempotency.Store: one indexed read of a key, with the
// database's clock, which a retry reads first and the outcome route shows. It
// takes no lock and writes nothing, so a key's many readers never queue.
func (s *Store) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	var now time.Time // lookupColumns
	var row recordRow
	if err := s.rows.queryRow(ctx, lookupKeySQL, []any{s.now(), sc.Actor, sc.Operation, sc.Key}, row.dest(&now)...); err != nil {
		return nil, time.Time{}, err
	}
	rec, err := row.record()
	return rec, now, err
}

// InProgress returns how many claims are in progress, the oldest's claim time and the store's time.
func (s *Store) InProgress(ctx context.Context) (n int, oldest, now time.Time, err error) {
	var first sql.NullTime
	if err = s.db.QueryRowContext(ctx, countInProgressClaimsSQL, s.now()).Scan(&n, &first, &now); err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("count in-progress claims: %w", dbErr(err))
	}
	return n, first.Time, now, nil
}
