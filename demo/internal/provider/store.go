package provider

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/postgres"
)

//go:embed schema/*.sql
var schema embed.FS

// migrationsTable is the review desk's own record of its migrations, so it
// can share a database with the API (as in tests) without a clash.
const migrationsTable = "review_desk_schema_migrations"

// Migrate applies the review desk's schema to db (postgres.MigrateFS:
// through a pooler in transaction mode it only checks that the schema is
// current).
func Migrate(db *sqlx.DB) error {
	if err := postgres.MigrateFS(db, schema, "schema", migrationsTable, 0); err != nil {
		return fmt.Errorf("review desk: %w", err)
	}
	return nil
}

// Receipt is an accepted call (a submission, a cancel, a slot, …) under its
// key, as the desk answers it.
type Receipt struct {
	Key         string    `json:"key" db:"key"`
	Reference   string    `json:"reference" db:"reference"`
	AcceptedAt  time.Time `json:"acceptedAt" db:"accepted_at"`
	Fingerprint string    `json:"-" db:"fingerprint"` // of a cancel, a release or a refund: the key of what it undoes
}

// store keeps the desk's calls: the submissions and cancels here, the
// resources of an expedite in expedite_store.go.
type store struct {
	db     *sqlx.DB
	accept *sqlx.Stmt // acceptSQL, prepared: planning it costs more than running it
}

func newStore(db *sqlx.DB) (*store, error) {
	accept, err := db.Preparex(acceptSQL)
	if err != nil {
		return nil, fmt.Errorf("prepare the accept statement: %w", err)
	}
	return &store{db: db, accept: accept}, nil
}

// acceptSQL accepts a submission under its key once: the primary key
// decides a race. It returns the row it inserted (fresh) or, in the same
// round trip, the row that was there. A row committed by a concurrent
// request after this statement's snapshot is seen by neither part: the
// caller runs it again.
const acceptSQL = `
WITH fresh AS (
    INSERT INTO submissions (key, fingerprint, request_id, topic, note, reference, accepted_at)
    VALUES ($1, $2, $3, $4, $5, 'RD-' || lpad(nextval('submission_refs')::text, 6, '0'), now())
    ON CONFLICT (key) DO NOTHING
    RETURNING key, fingerprint, reference, accepted_at, true AS fresh
)
SELECT * FROM fresh
UNION ALL
SELECT key, fingerprint, reference, accepted_at, false FROM submissions
WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM fresh)`

// submit stores s under key unless the key is taken, and returns the
// receipt of the key and whether this call stored it.
func (st *store) submit(ctx context.Context, key, fp string, s Submission) (Receipt, bool, error) {
	for range 3 {
		var row struct {
			Receipt
			Fresh bool `db:"fresh"`
		}
		err := st.accept.GetContext(ctx, &row, key, fp, s.RequestID, s.Topic, s.Note)
		if errors.Is(err, sql.ErrNoRows) {
			continue // a concurrent first submission committed after our snapshot
		}
		return row.Receipt, row.Fresh, err
	}
	return Receipt{}, false, errors.New("accept submission: the key kept changing")
}

// lookup returns the receipt of the submission under key; ok is false when
// the desk never accepted it.
func (st *store) lookup(ctx context.Context, key string) (r Receipt, ok bool, err error) {
	return st.get(ctx, `SELECT key, fingerprint, reference, accepted_at FROM submissions WHERE key = $1`, key)
}

// cancelSQL accepts a cancel under its key once, and at most one cancel per
// submission: either unique index decides a race. It returns the row it
// inserted (fresh) or, in the same round trip, the row that holds the key or
// the submission; the caller compares both with what it asked. As in
// acceptSQL, a row committed after this statement's snapshot is seen by
// neither part: the caller runs it again.
const cancelSQL = `
WITH fresh AS (
    INSERT INTO cancels (key, submission_key, reference, accepted_at)
    VALUES ($1, $2, 'RC-' || lpad(nextval('cancel_refs')::text, 6, '0'), now())
    ON CONFLICT DO NOTHING
    RETURNING key, submission_key AS fingerprint, reference, accepted_at, true AS fresh
)
SELECT * FROM fresh
UNION ALL
(SELECT key, submission_key, reference, accepted_at, false FROM cancels
 WHERE (key = $1 OR submission_key = $2) AND NOT EXISTS (SELECT 1 FROM fresh)
 ORDER BY key = $1 DESC LIMIT 1)`

// cancel stores the cancel of the submission under submissionKey under key
// unless either is taken, and returns the receipt of the cancel there and
// whether this call stored it. Its Fingerprint is the key of the
// submission it cancels.
func (st *store) cancel(ctx context.Context, key, submissionKey string) (Receipt, bool, error) {
	for range 3 {
		var row struct {
			Receipt
			Fresh bool `db:"fresh"`
		}
		err := st.db.GetContext(ctx, &row, cancelSQL, key, submissionKey)
		if errors.Is(err, sql.ErrNoRows) {
			continue // a concurrent first cancel committed after our snapshot
		}
		return row.Receipt, row.Fresh, err
	}
	return Receipt{}, false, errors.New("accept cancel: the key kept changing")
}

// lookupCancel returns the receipt of the cancel under key; ok is false
// when the desk never accepted it.
func (st *store) lookupCancel(ctx context.Context, key string) (r Receipt, ok bool, err error) {
	return st.get(ctx, `SELECT key, submission_key AS fingerprint, reference, accepted_at FROM cancels WHERE key = $1`, key)
}

// cancelOf returns the receipt of the cancel of the submission under key,
// if the desk holds one.
func (st *store) cancelOf(ctx context.Context, submissionKey string) (r Receipt, ok bool, err error) {
	return st.get(ctx, `SELECT key, submission_key AS fingerprint, reference, accepted_at FROM cancels WHERE submission_key = $1`, submissionKey)
}

func (st *store) get(ctx context.Context, query, key string) (r Receipt, ok bool, err error) {
	err = st.db.GetContext(ctx, &r, query, key)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}
