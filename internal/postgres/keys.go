package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/idempotency"
)

var claimSQL = keyWriteOf("claim.sql")

// stmt is a statement, sql/name, and the call of its function on Citus
// (migrations/citus: key_writes.sql for a key write, scans.sql for a scan).
type stmt struct {
	sql, citus string
}

func keyWriteOf(name string) stmt {
	return stmt{sql: statement(name), citus: citusCall(name, 0)}
}

// citusCall is the call of sql/name's function on Citus: lead parameters, then the statement's.
func citusCall(name string, lead int) string {
	n := lead
	for _, m := range paramRE.FindAllStringSubmatch(statement(name), -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, lead+i)
	}
	params := make([]string, n)
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return "SELECT * FROM " + strings.TrimSuffix(name, ".sql") + "(" + strings.Join(params, ", ") + ")"
}

var paramRE = regexp.MustCompile(`\$(\d+)`)

// keyStatements are an effect's statements: the one-phase write, and the two-phase finish.
type keyStatements struct {
	onePhase stmt
	finish   stmt
}

// answerOnly completes a key with no business change (a refusal).
var answerOnly = keyStatements{onePhase: keyWriteOf("answer_only.sql"), finish: keyWriteOf("finish_claim_answer_only.sql")}

// effect is the store's idempotency.Effect: its statements, their business arguments
// (after the key's), and whether its row may have changed since the work read it.
type effect struct {
	what        string
	stmts       *keyStatements
	args        []any
	conditional bool
}

func (e *effect) Describe() string { return e.what }

// answer runs a's one-phase write (or finish) with its arguments (before, a's answer,
// after, the effect's), in a transaction when its effect is conditional (inTx); run runs
// it and returns whether the key was written and how many rows the effect changed.
func (s *Store) answer(ctx context.Context, a idempotency.Answer, finish bool, before, after []any,
	run func(tx *sqlx.Tx, query string, args []any) (wrote bool, changed int, err error)) error {
	e, ok := a.Effect.(*effect)
	if !ok && a.Effect != nil {
		return fmt.Errorf("postgres: %s is not an effect of this store", a.Effect.Describe())
	}
	stmts, business := &answerOnly, []any(nil)
	if e != nil {
		stmts, business = e.stmts, e.args
	}
	headers, err := json.Marshal(a.Response.Header)
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	k := stmts.onePhase
	if finish {
		k = stmts.finish
	}
	q, err := s.keyWrite(ctx, k)
	if err != nil {
		return err
	}
	args := slices.Concat(before, []any{a.Response.Status, a.Response.Body, string(headers),
		sql.NullString{String: a.Response.ResultID, Valid: a.Response.ResultID != ""}}, after, business)
	return s.inTx(ctx, e, func(tx *sqlx.Tx) error {
		wrote, changed, err := run(tx, q, args)
		switch {
		case err != nil || e == nil || !wrote || changed > 0:
			return err
		case e.conditional: // its row changed since the work read it
			return idempotency.ErrEffectNotApplied
		}
		return fmt.Errorf("finish: the business write %q changed nothing", e.what)
	})
}

// recordRow is a row of idempotency_keys as the statements return it: recordColumns.
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

// The columns the store scans by position: of a key write, of a finish, and of lookup_key.sql.
var (
	writeColumns  = append([]string{"now", "wrote", "effect"}, recordColumns...)
	finishColumns = []string{"wrote", "effect"}
	lookupColumns = append([]string{"now"}, recordColumns...)
)

// write runs a key write in tx if not nil: what it found, and how many rows its effect changed.
func (s *Store) write(ctx context.Context, tx *sqlx.Tx, query string, args []any) (w idempotency.KeyWrite, changed int, err error) {
	var row recordRow
	if err = s.queryRow(ctx, tx, query, args, row.dest(&w.Now, &w.Wrote, &changed)...); err != nil {
		return idempotency.KeyWrite{}, 0, err
	}
	w.Prev, err = row.record()
	return w, changed, err
}

// Claim implements idempotency.Store (sql/claim.sql).
func (s *Store) Claim(ctx context.Context, c idempotency.Claim, fp string, lease, ttl time.Duration) (idempotency.KeyWrite, error) {
	q, err := s.keyWrite(ctx, claimSQL)
	if err != nil {
		return idempotency.KeyWrite{}, err
	}
	w, _, err := s.write(ctx, nil, q, []any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, fp, c.Token, lease.Microseconds(), ttl.Microseconds()})
	return w, err
}

// CompleteAtomically implements idempotency.Store (sql/create_demo_request.sql, for a create).
func (s *Store) CompleteAtomically(ctx context.Context, c idempotency.Claim, fp string, ttl time.Duration, a idempotency.Answer) (w idempotency.KeyWrite, err error) {
	err = s.answer(ctx, a, false,
		[]any{s.now(), c.Scope.Actor, c.Scope.Operation, c.Scope.Key, fp, c.Token}, []any{ttl.Microseconds()},
		func(tx *sqlx.Tx, q string, args []any) (_ bool, changed int, err error) {
			w, changed, err = s.write(ctx, tx, q, args)
			return w.Wrote, changed, err
		})
	if err != nil {
		return idempotency.KeyWrite{}, err
	}
	return w, nil
}

// FinishClaimAtomically implements idempotency.Store (sql/finish_claim_create_demo_request.sql).
func (s *Store) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, a idempotency.Answer) error {
	return s.answer(ctx, a, true, []any{s.now()}, []any{c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token},
		func(tx *sqlx.Tx, q string, args []any) (wrote bool, changed int, err error) {
			if err = s.queryRow(ctx, tx, q, args, &wrote, &changed); err == nil && !wrote { // finishColumns
				err = idempotency.ErrLeaseLost
			}
			return wrote, changed, err
		})
}

// inTx runs fn in a transaction when e is conditional, else with a nil tx.
// A unique violation there was decided on an old read: ErrEffectNotApplied.
func (s *Store) inTx(ctx context.Context, e *effect, fn func(tx *sqlx.Tx) error) error {
	if e == nil || !e.conditional {
		return fn(nil)
	}
	return await(ctx, s.db, func(ctx context.Context) error {
		tx, err := s.db.BeginTxx(ctx, nil)
		if err != nil {
			return dbErr(err)
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			if pe, ok := errors.AsType[*pq.Error](err); ok && pe.Code == "23505" { // unique_violation
				return idempotency.ErrEffectNotApplied
			}
			return err
		}
		return dbErr(tx.Commit())
	})
}

var (
	releaseClaimSQL          = statement("release_claim.sql")
	lookupKeySQL             = statement("lookup_key.sql")
	countInProgressClaimsSQL = statement("count_in_progress_claims.sql")
)

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	return await(ctx, s.db, func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, releaseClaimSQL, c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
		return dbErr(err)
	})
}

// Lookup implements idempotency.Store.
func (s *Store) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	var now time.Time // lookupColumns
	var row recordRow
	if err := s.queryRow(ctx, nil, lookupKeySQL, []any{s.now(), sc.Actor, sc.Operation, sc.Key}, row.dest(&now)...); err != nil {
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
