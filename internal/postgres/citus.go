package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/migrations"
)

// Distribution is what Distribute found and did.
type Distribution struct {
	// Citus is the version of the citus extension in the database; empty
	// when it has none (one PostgreSQL).
	Citus string
	// Distributed says that this call distributed the tables; false when
	// they were already, or the database is not Citus.
	Distributed bool
}

// Distribute distributes the key table, the business table and the outbox
// by actor_id, co-located (migrations/citus/distribute.sql), and makes the
// functions the store calls there for the key writes
// (migrations/citus/key_writes.sql), when db is a Citus coordinator (the
// citus extension is installed): the tables when they are not distributed
// yet, the functions every time. On one PostgreSQL it changes nothing.
// migrate calls it after the migrations.
func Distribute(ctx context.Context, db *sqlx.DB) (Distribution, error) {
	var d Distribution
	err := db.GetContext(ctx, &d.Citus, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("distribute: %w", dbErr(err))
	}
	var done bool
	if err := db.GetContext(ctx, &done,
		`SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'idempotency_keys'::regclass)`); err != nil {
		return d, fmt.Errorf("distribute: %w", dbErr(err))
	}
	if !done {
		if err := runCitusScript(ctx, db, "citus/distribute.sql"); err != nil {
			return d, fmt.Errorf("distribute on Citus %s: %w", d.Citus, err)
		}
		d.Distributed = true
	}
	// A transaction of its own: Citus makes no function in the transaction
	// that distributed the tables. CREATE OR REPLACE: every migrate brings
	// them up to date.
	if err := runCitusScript(ctx, db, "citus/key_writes.sql"); err != nil {
		return d, fmt.Errorf("key writes on Citus %s: %w", d.Citus, err)
	}
	return d, nil
}

// runCitusScript runs migrations/name. Without arguments, its statements
// go as one simple query: one implicit transaction, all of them or none.
func runCitusScript(ctx context.Context, db *sqlx.DB, name string) error {
	script, err := fs.ReadFile(migrations.Citus, name)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, string(script))
	return dbErr(err)
}

// String says what d is, for migrate's log.
func (d Distribution) String() string {
	switch {
	case d.Citus == "":
		return "one PostgreSQL (no citus extension): nothing to distribute"
	case d.Distributed:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox distributed by actor_id, co-located; the key writes delegated to the actor's worker"
	default:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox already distributed by actor_id"
	}
}
