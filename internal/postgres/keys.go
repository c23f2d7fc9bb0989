package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// Names. One concept has one name in Go, SQL and JSON: the scope is
// (actor_id, operation, idem_key) — idem_key because "key" says too little
// in SQL — the fingerprint of the significant fields is `fingerprint`, and
// the end of a claim's lease is `lease_until` (Record.LeaseUntil; the
// outcome route shows what is left of it as leaseRemainingSeconds).
//
// The statements use named parameters (:actor), which sqlx numbers in reading
// order ($1, $2, …) when it prepares them; a type is given with CAST (sqlx
// reads "::" as an escaped colon). Every time is the clock CTE: the database
// clock, or the store's test clock. testdata/*.sql holds every assembled
// statement, checked by a test, for reading.

// clockCTE is the time of a statement.
const clockCTE = `clock AS (
    SELECT coalesce(CAST(:now AS timestamptz), now()) AS now
)`

// expiredRule is the expiry rule, written once: a record past its TTL that
// no live lease holds (idempotency.Record.Expired). The table is k.
const expiredRule = `(k.expires_at <= clock.now AND (k.state = 'completed' OR k.lease_until <= clock.now))`

// takeOverRule is when a statement may replace a row (idempotency.Decide's
// TakeOverExpired and TakeOverLease): it expired, or its owner's lease
// passed and the same intent (fingerprint) asks again.
const takeOverRule = expiredRule + `
        OR (k.state = 'in_progress' AND k.lease_until <= clock.now AND k.fingerprint = :fingerprint)`

// column is one column of the key row a statement writes, and its value.
type column struct{ name, value string }

// claimedRow is the key row of a claim: in progress, owned for the lease.
var claimedRow = []column{
	{"fingerprint", ":fingerprint"},
	{"state", "'in_progress'"},
	{"claim_token", "CAST(:token AS uuid)"},
	{"lease_until", "clock.now + CAST(:lease_us AS bigint) * interval '1 microsecond'"},
	{"status_code", "NULL"},
	{"response_body", "NULL"},
	{"response_headers", "NULL"},
	{"result_id", "NULL"},
	{"created_at", "clock.now"},
	{"completed_at", "NULL"},
	{"expires_at", "clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'"},
}

// completedRow is the key row of a one-phase create: born completed, with
// its answer.
var completedRow = []column{
	{"fingerprint", ":fingerprint"},
	{"state", "'completed'"},
	{"claim_token", "CAST(:token AS uuid)"},
	{"lease_until", "NULL"},
	{"status_code", "CAST(:status AS integer)"},
	{"response_body", "CAST(:body AS bytea)"},
	{"response_headers", "CAST(:headers AS jsonb)"},
	{"result_id", ":result_id"},
	{"created_at", "clock.now"},
	{"completed_at", "clock.now"},
	{"expires_at", "clock.now + CAST(:ttl_us AS bigint) * interval '1 microsecond'"},
}

// claimSQL builds a statement that writes a key row where the scope is free:
// the claim (row = claimedRow) or a one-phase create (row = completedRow,
// with the operation's effect). It is one statement, committed on its own,
// so a concurrent request sees the row at once, and the unique scope decides
// the race. Its parts run on one snapshot:
//
//   - prev reads the row as it was, so a request that does not write learns
//     in the same round trip whether to replay, wait or refuse;
//   - the INSERT writes the row where prev found none; ON CONFLICT DO NOTHING
//     skips it, without a lock or a write, when the scope is taken. A
//     concurrent first request that has not committed yet makes it wait on
//     the unique index, then skip; its row is not in this snapshot, so the
//     caller runs the statement again and finds it;
//   - with takeOver, takeover replaces a row by takeOverRule. It locks only a
//     row it takes over and rechecks the rule once it holds the lock, so of
//     two racing takeovers one wins;
//   - finished is the row this statement wrote, if any: the effect (the
//     business change, written as CTEs that select FROM finished, the last
//     one named effect) happens only with it.
//
// So a replay or a 409 writes nothing: it costs a read, not a commit.
//
// Rows to take over are rare (a key reused after its TTL, an owner that
// died), and an UPDATE costs PostgreSQL about a tenth of the statement to set
// up even when it changes nothing. So each statement comes in two forms
// (writeStatements): without takeover, run first, and with it, run only when
// the first found a row to take over; it reads the row again on a new
// snapshot and decides afresh.
//
// A claim must be visible at once, not durable, so it commits without waiting
// for its WAL flush (synchronous_commit off for this transaction alone). A
// crash may lose a claim, never a creation: the finish commits durably, and
// flushing its commit flushes the claim before it; a finish whose claim was
// lost finds no row, creates nothing, and the retry claims again. A one-phase
// create commits durably: it is the creation.
func claimSQL(row []column, effect string, async, takeOver bool) string {
	var names, values, sets []string
	for _, c := range row {
		names = append(names, c.name)
		values = append(values, c.value)
		sets = append(sets, c.name+" = "+c.value)
	}
	asyncCTE, asyncJoin := "", ""
	if async {
		asyncCTE = `, async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true)
)`
		asyncJoin = " CROSS JOIN async_commit"
	}
	insert := `INSERT INTO idempotency_keys AS k (actor_id, operation, idem_key,
        ` + strings.Join(names, ", ") + `)
    SELECT :actor, :operation, :key,
        ` + strings.Join(values, ", ") + `
    FROM clock WHERE NOT EXISTS (SELECT 1 FROM prev)
    ON CONFLICT (actor_id, operation, idem_key) DO NOTHING
    RETURNING k.result_id`
	writes := `, finished AS (
    ` + insert + `
)`
	if takeOver {
		writes = `, fresh AS (
    ` + insert + `
), takeover AS (
    UPDATE idempotency_keys k SET
        ` + strings.Join(sets, ",\n        ") + `
    FROM clock
    WHERE k.actor_id = :actor AND k.operation = :operation AND k.idem_key = :key
      AND (` + takeOverRule + `)
    RETURNING k.result_id
), finished AS (
    SELECT result_id FROM fresh UNION ALL SELECT result_id FROM takeover
)`
	}
	return `WITH ` + clockCTE + asyncCTE + `, prev AS (
    SELECT fingerprint, state, lease_until, status_code, response_body,
           response_headers, result_id, created_at, completed_at, expires_at
    FROM idempotency_keys
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
)` + writes + effectCTEs(effect) + `
SELECT clock.now, EXISTS (SELECT 1 FROM finished) AS claimed, ` + effectCount(effect) + ` AS effect, prev.*
FROM clock` + asyncJoin + ` LEFT JOIN prev ON true`
}

// writeStatements are the two forms of a statement that writes a key row
// (claimSQL): for a free scope, and able to take over a row.
type writeStatements struct{ free, takeOver string }

func newWriteStatements(row []column, effect string, async bool) writeStatements {
	return writeStatements{free: claimSQL(row, effect, async, false), takeOver: claimSQL(row, effect, async, true)}
}

// finishSQL builds the two-phase finish: ONE statement, hence one
// transaction, completes the key only while the caller's claim token still
// holds it (the CTE finished), and the effect selects FROM finished: a lost
// lease completes nothing and changes nothing.
func finishSQL(effect string) string {
	return `WITH ` + clockCTE + `, finished AS (
    UPDATE idempotency_keys SET state = 'completed', lease_until = NULL,
        status_code = CAST(:status AS integer), response_body = CAST(:body AS bytea),
        response_headers = CAST(:headers AS jsonb), result_id = :result_id,
        completed_at = clock.now
    FROM clock
    WHERE actor_id = :actor AND operation = :operation AND idem_key = :key
      AND claim_token = CAST(:token AS uuid) AND state = 'in_progress'
    RETURNING result_id
)` + effectCTEs(effect) + `
SELECT (SELECT count(*) FROM finished) = 1 AS claimed, ` + effectCount(effect) + ` AS effect`
}

func effectCTEs(effect string) string {
	if effect == "" {
		return ""
	}
	return ",\n" + strings.TrimSpace(effect)
}

func effectCount(effect string) string {
	if effect == "" {
		return "0"
	}
	return "(SELECT count(*) FROM effect)"
}

// keyStatements are the statements of one kind of effect.
type keyStatements struct {
	onePhase writeStatements // with completedRow
	finish   string          // finishSQL(effect)
}

func newKeyStatements(effect string) keyStatements {
	if effect != "" && !strings.Contains(effect, "FROM finished") {
		// An effect that does not read finished would commit without its key.
		panic("postgres: a business write must select FROM finished: " + effect)
	}
	return keyStatements{onePhase: newWriteStatements(completedRow, effect, false), finish: finishSQL(effect)}
}

var (
	claimStatements = newWriteStatements(claimedRow, "", true)
	// answerOnly completes a key with no business change (a refusal).
	answerOnly = newKeyStatements("")
)

// effect is the postgres store's idempotency.Effect: CTEs that select FROM
// finished, their arguments, and whether they may find their row changed
// since the work read it (then they run in a transaction that rolls back).
type effect struct {
	what        string
	stmts       *keyStatements
	args        map[string]any
	conditional bool
}

func (e *effect) Describe() string { return e.what }

// statementsOf returns the statements and arguments of d's effect.
func statementsOf(d idempotency.Decided) (*keyStatements, map[string]any, *effect, error) {
	if d.Effect == nil {
		return &answerOnly, map[string]any{}, nil, nil
	}
	e, ok := d.Effect.(*effect)
	if !ok {
		return nil, nil, nil, fmt.Errorf("postgres: %s is not an effect of this store", d.Effect.Describe())
	}
	args := make(map[string]any, len(e.args)+12)
	for k, v := range e.args {
		args[k] = v
	}
	return e.stmts, args, e, nil
}

// answerArgs adds the stored answer of d and the scope to args.
func (s *Store) answerArgs(args map[string]any, sc idempotency.Scope, fp, token string, d idempotency.Decided) error {
	headers, err := json.Marshal(d.Response.Header)
	if err != nil {
		return fmt.Errorf("encode headers: %w", err)
	}
	args["now"] = s.now()
	args["actor"], args["operation"], args["key"] = sc.Actor, sc.Operation, sc.Key
	args["fingerprint"], args["token"] = fp, token
	args["status"], args["body"], args["headers"] = d.Response.Status, d.Response.Body, string(headers)
	args["result_id"] = sql.NullString{String: d.Response.ResultID, Valid: d.Response.ResultID != ""}
	return nil
}

// recordRow is a row of idempotency_keys as scanned.
type recordRow struct {
	Fingerprint     sql.NullString `db:"fingerprint"`
	State           sql.NullString `db:"state"`
	LeaseUntil      sql.NullTime   `db:"lease_until"`
	StatusCode      sql.NullInt64  `db:"status_code"`
	ResponseBody    []byte         `db:"response_body"`
	ResponseHeaders []byte         `db:"response_headers"`
	ResultID        sql.NullString `db:"result_id"`
	CreatedAt       sql.NullTime   `db:"created_at"`
	CompletedAt     sql.NullTime   `db:"completed_at"`
	ExpiresAt       sql.NullTime   `db:"expires_at"`
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

// claimRow is what claimSQL returns.
type claimRow struct {
	Now     time.Time `db:"now"`
	Claimed bool      `db:"claimed"`
	Effect  int       `db:"effect"`
	recordRow
}

// write runs w's statement for a free scope and, only when the row it found
// is one to take over (idempotency.Decide, which agrees with takeOverRule),
// the statement that takes it over. It returns what the last one found and
// how many rows its effect changed.
func (s *Store) write(ctx context.Context, tx *sqlx.Tx, w writeStatements, fp string, args map[string]any) (idempotency.ClaimResult, int, error) {
	var row claimRow
	if err := s.queryRow(ctx, tx, w.free, args, &row); err != nil {
		return idempotency.ClaimResult{}, 0, err
	}
	cr, err := row.result()
	if err != nil || cr.Claimed || cr.Prev == nil {
		return cr, row.Effect, err
	}
	if k := idempotency.Decide(cr.Prev, fp, cr.Now).Kind; k != idempotency.TakeOverExpired && k != idempotency.TakeOverLease {
		return cr, row.Effect, nil
	}
	row = claimRow{}
	if err := s.queryRow(ctx, tx, w.takeOver, args, &row); err != nil {
		return idempotency.ClaimResult{}, 0, err
	}
	cr, err = row.result()
	return cr, row.Effect, err
}

func (r claimRow) result() (idempotency.ClaimResult, error) {
	prev, err := r.record()
	return idempotency.ClaimResult{Claimed: r.Claimed, Prev: prev, Now: r.Now}, err
}

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, sc idempotency.Scope, fp, token string, lease, ttl time.Duration) (idempotency.ClaimResult, error) {
	args := map[string]any{
		"now": s.now(), "actor": sc.Actor, "operation": sc.Operation, "key": sc.Key,
		"fingerprint": fp, "token": token, "lease_us": lease.Microseconds(), "ttl_us": ttl.Microseconds(),
	}
	cr, _, err := s.write(ctx, nil, claimStatements, fp, args)
	return cr, err
}

// CreateResultAndFinishAtomically implements idempotency.Store: the
// one-phase path. The key is inserted already completed with d's answer
// and, FROM it, d's business change: one statement, one commit.
func (s *Store) CreateResultAndFinishAtomically(ctx context.Context, sc idempotency.Scope, fp, token string, ttl time.Duration, d idempotency.Decided) (idempotency.ClaimResult, error) {
	stmts, args, e, err := statementsOf(d)
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := s.answerArgs(args, sc, fp, token, d); err != nil {
		return idempotency.ClaimResult{}, err
	}
	args["ttl_us"] = ttl.Microseconds()
	var cr idempotency.ClaimResult
	err = s.inTx(ctx, e, func(tx *sqlx.Tx) error {
		var changed int
		if cr, changed, err = s.write(ctx, tx, stmts.onePhase, fp, args); err != nil {
			return err
		}
		return checkEffect(e, cr.Claimed, changed)
	})
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	return cr, nil
}

// FinishClaimAtomically implements idempotency.Store: the two-phase
// finish. d's business change and the completion of the key commit
// in one statement, fenced by the claim token.
func (s *Store) FinishClaimAtomically(ctx context.Context, c idempotency.Claim, d idempotency.Decided) error {
	stmts, args, e, err := statementsOf(d)
	if err != nil {
		return err
	}
	if err := s.answerArgs(args, c.Scope, "", c.Token, d); err != nil {
		return err
	}
	delete(args, "fingerprint") // the finish is fenced by the token alone
	return s.inTx(ctx, e, func(tx *sqlx.Tx) error {
		var got struct {
			Claimed bool `db:"claimed"`
			Effect  int  `db:"effect"`
		}
		if err := s.queryRow(ctx, tx, stmts.finish, args, &got); err != nil {
			return err
		}
		if !got.Claimed {
			return idempotency.ErrLeaseLost
		}
		return checkEffect(e, got.Claimed, got.Effect)
	})
}

// checkEffect reports an effect that changed nothing although its key was
// written: for a conditional effect its row changed since the work read it
// (ErrEffectNotApplied: the transaction rolls back); for any other, a bug in
// the effect's SQL.
func checkEffect(e *effect, wrote bool, n int) error {
	switch {
	case e == nil || !wrote || n > 0:
		return nil
	case e.conditional:
		return idempotency.ErrEffectNotApplied
	}
	return fmt.Errorf("finish: the business write %q changed nothing", e.what)
}

// Release implements idempotency.Store: it deletes the claim while it is
// still c's and still in progress, so the next request with the key runs as a
// first one. A finish whose commit went through unseen (the connection broke
// after it) left the key completed, and the release leaves it alone.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	_, err := s.db.ExecContext(ctx, `
DELETE FROM idempotency_keys
WHERE actor_id = $1 AND operation = $2 AND idem_key = $3
  AND claim_token = $4::uuid AND state = 'in_progress'`,
		c.Scope.Actor, c.Scope.Operation, c.Scope.Key, c.Token)
	return dbErr(err)
}

// Lookup implements idempotency.Store.
func (s *Store) Lookup(ctx context.Context, sc idempotency.Scope) (*idempotency.Record, time.Time, error) {
	var row struct {
		Now time.Time `db:"now"`
		recordRow
	}
	err := s.db.QueryRowxContext(ctx, `
SELECT coalesce($1::timestamptz, now()) AS now, k.fingerprint, k.state, k.lease_until, k.status_code,
       k.response_body, k.response_headers, k.result_id, k.created_at, k.completed_at, k.expires_at
FROM (SELECT 1) one LEFT JOIN idempotency_keys k
  ON k.actor_id = $2 AND k.operation = $3 AND k.idem_key = $4`,
		s.now(), sc.Actor, sc.Operation, sc.Key).StructScan(&row)
	if err != nil {
		return nil, time.Time{}, dbErr(err)
	}
	rec, err := row.record()
	return rec, row.Now, err
}

// purgeSQL deletes up to :batch expired records, oldest first.
var purgeSQL = `WITH ` + clockCTE + `
DELETE FROM idempotency_keys
WHERE (actor_id, operation, idem_key) IN (
    SELECT k.actor_id, k.operation, k.idem_key
    FROM idempotency_keys k, clock
    WHERE ` + expiredRule + `
    ORDER BY k.expires_at
    LIMIT CAST(:batch AS integer)
    FOR UPDATE OF k SKIP LOCKED
)`

// PurgeExpired deletes up to batch expired records: completed ones past their
// TTL, and abandoned claims past both their TTL and their lease. A claim
// whose lease is alive is never deleted. It returns how many it deleted.
func (s *Store) PurgeExpired(ctx context.Context, batch int) (int64, error) {
	res, err := s.db.NamedExecContext(ctx, purgeSQL, map[string]any{"now": s.now(), "batch": batch})
	if err != nil {
		return 0, fmt.Errorf("purge expired keys: %w", dbErr(err))
	}
	return res.RowsAffected()
}

// InProgress returns how many claims are in progress and the claim time of
// the oldest (zero when there is none), and the store's time.
func (s *Store) InProgress(ctx context.Context) (n int, oldest, now time.Time, err error) {
	var row struct {
		N      int          `db:"n"`
		Oldest sql.NullTime `db:"oldest"`
		Now    time.Time    `db:"now"`
	}
	err = s.db.GetContext(ctx, &row, `
SELECT count(*) AS n, min(created_at) AS oldest, coalesce($1::timestamptz, now()) AS now
FROM idempotency_keys WHERE lease_until IS NOT NULL -- in progress, by the table's CHECK
`, s.now())
	if err != nil {
		return 0, time.Time{}, time.Time{}, fmt.Errorf("count in-progress claims: %w", dbErr(err))
	}
	return row.N, row.Oldest.Time, row.Now, nil
}
