package postgres

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// What a store built on this one uses (the full demo's runs and
// expedites, demo/): the pool, the clock argument, the statements' way of
// running, and the key row's write and answer.

// DB is the store's pool.
func (s *Store) DB() *sqlx.DB { return s.db.DB }

// Now is the time argument of a statement: nil for the database's clock,
// which the statement reads as coalesce($n::timestamptz, now()).
func (s *Store) Now() any { return s.now() }

// QueryRow runs query with args ($1, $2, …), in tx if not nil, prepared
// unless the store is Unprepared, and scans its one row into dest.
func (s *Store) QueryRow(ctx context.Context, tx *sqlx.Tx, query string, args []any, dest ...any) error {
	return s.queryRow(ctx, tx, query, args, dest...)
}

// WriteKey runs query, a statement that writes a key row as claim.sql
// does, with args, and returns what it found.
func (s *Store) WriteKey(ctx context.Context, tx *sqlx.Tx, query string, args []any) (idempotency.KeyWrite, error) {
	w, _, err := s.write(ctx, tx, query, args)
	return w, err
}

// Answer is the response of d as a key row stores it: status, body,
// headers (JSON) and result id.
func Answer(d idempotency.Answer) (status int, body []byte, headers string, resultID sql.NullString, err error) {
	a, err := answerOf(d)
	return a.status, a.body, a.headers, a.resultID, err
}

// Err is err as the store reports it: a database that cannot be reached,
// or that must be asked again, is apperr unavailable (503).
func Err(err error) error { return dbErr(err) }
