package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/migrations"
)

// Distribution is what Distribute found and did.
type Distribution struct {
	Citus       string // the version of the citus extension; empty on one PostgreSQL
	Distributed bool   // this call distributed the tables (they were not yet)
}

// Distribute, on a Citus coordinator, distributes the tables by actor_id unless
// they are already, and makes the store's functions; on one PostgreSQL it does nothing.
// Every start of serve runs it: each step holds the lock of citusTx, so
// replicas that start together wait for each other.
func Distribute(ctx context.Context, db *sqlx.DB) (d Distribution, err error) {
	err = db.GetContext(ctx, &d.Citus, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("distribute: %w", dbErr(err))
	}
	// Each its own transaction: Citus makes no function in the one that distributes the tables.
	err = citusTx(ctx, db, func(tx *sqlx.Tx) error {
		var done bool
		err := tx.GetContext(ctx, &done,
			`SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'idempotency_keys'::regclass)`)
		if err == nil && !done {
			err = runCitusScript(ctx, tx, "citus/distribute.sql")
			d.Distributed = true
		}
		return err
	})
	if err == nil {
		err = citusTx(ctx, db, func(tx *sqlx.Tx) error { return runCitusScript(ctx, tx, "citus/scans.sql") })
	}
	if err == nil {
		err = citusTx(ctx, db, func(tx *sqlx.Tx) error { return delegateKeyWrites(ctx, tx) })
	}
	if err != nil {
		return d, fmt.Errorf("distribute on Citus %s: %w", d.Citus, err)
	}
	return d, nil
}

// citusTx runs fn in a transaction that holds the lock of the store's
// changes to a Citus schema: two starts that make the same function at once
// would otherwise fail ("tuple concurrently updated").
func citusTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('demo-api: the store on Citus'))`); err != nil {
		return dbErr(err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	return dbErr(tx.Commit())
}

// runCitusScript runs migrations/name in tx, as one simple query.
func runCitusScript(ctx context.Context, tx *sqlx.Tx, name string) error {
	script, err := fs.ReadFile(migrations.Citus, name)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, string(script))
	return dbErr(err)
}

// delegateKeyWrites distributes each function of the schema that returns
// key_write (write_key, and every operation's) and is not yet: by the actor,
// its second argument, and co-located with the keys. Citus then delegates
// its call to the worker that holds the actor's shard, also inside a
// transaction (force_delegation: a conditional effect's), and there each
// statement of the function is a router statement on the local shard: one
// round trip from the coordinator. Citus routes no statement that inserts
// in a CTE to one shard, so the operations are functions, not statements.
// A worker's session has its own search_path, so each function is first
// pinned to the schema it was made in (the migrations' functions carry
// none: on one PostgreSQL they run in the caller's, which saves a setting
// and its undo on every call).
func delegateKeyWrites(ctx context.Context, tx *sqlx.Tx) error {
	var schema string
	var fns []string
	err := tx.GetContext(ctx, &schema, `SELECT quote_ident(current_schema())`)
	if err == nil {
		err = tx.SelectContext(ctx, &fns, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.prorettype = to_regtype('key_write') AND p.pronamespace = current_schema()::regnamespace
		  AND NOT EXISTS (SELECT FROM pg_dist_object d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		                  AND d.distribution_argument_index IS NOT NULL)
		ORDER BY p.proname <> 'write_key', 1`)
	}
	for _, fn := range fns {
		if err != nil {
			break
		}
		_, err = tx.ExecContext(ctx, `ALTER FUNCTION `+fn+` SET search_path TO `+schema)
		if err == nil {
			_, err = tx.ExecContext(ctx, `SELECT create_distributed_function($1, '$2', colocate_with => 'idempotency_keys', force_delegation => true)`, fn)
		}
	}
	return dbErr(err)
}

// String says what d is, for migrate's log.
func (d Distribution) String() string {
	switch {
	case d.Citus == "":
		return "one PostgreSQL (no citus extension): nothing to distribute"
	case d.Distributed:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox distributed by actor_id, co-located; the key writes delegated to the actor's worker, the scans to each shard's"
	default:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox already distributed by actor_id"
	}
}

// stmt is a statement that scans across actors, sql/name, and the call of
// its function on Citus (migrations/citus/scans.sql), which runs it on one
// shard, given an actor of the shard and the statement.
type stmt struct {
	sql, citus string
}

func scanOf(name string) stmt { return stmt{sql: statement(name), citus: scanCall(name)} }

// scanCall is the call of sql/name's function on Citus: the shard's actor,
// the statement, then the statement's parameters.
func scanCall(name string) string {
	n := 0
	for _, m := range paramRE.FindAllStringSubmatch(statement(name), -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	params := make([]string, n+2)
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return "SELECT * FROM " + strings.TrimSuffix(name, ".sql") + "(" + strings.Join(params, ", ") + ")"
}

var paramRE = regexp.MustCompile(`\$(\d+)`)

// target is one run of a scan: the query, and the arguments before the statement's own.
type target struct {
	query string
	args  []any
}

func (t target) with(args ...any) []any { return append(slices.Clone(t.args), args...) }

// targets returns the runs of sc: its statement once, or on Citus its call once per shard.
func (s *Store) targets(ctx context.Context, sc stmt) ([]target, error) {
	c, err := s.onCitus(ctx)
	if err != nil || !c.Scans {
		return []target{{query: sc.sql}}, err
	}
	actors, err := s.shards(ctx)
	if err != nil {
		return nil, err
	}
	ts := make([]target, len(actors))
	for i, a := range actors {
		ts[i] = target{query: sc.citus, args: []any{a, sc.sql}}
	}
	return ts, nil
}

// targetsOf is targets for the given actors' rows, with the indexes of the actors of each.
func (s *Store) targetsOf(ctx context.Context, sc stmt, actors []string) ([]target, [][]int, error) {
	all := make([]int, len(actors))
	for i := range all {
		all[i] = i
	}
	c, err := s.onCitus(ctx)
	if err != nil || !c.Scans {
		return []target{{query: sc.sql}}, [][]int{all}, err
	}
	var shards []int64
	if err := s.db.SelectContext(ctx, &shards, `SELECT get_shard_id_for_distribution_column('idempotency_keys', u.a)
		FROM unnest($1::text[]) WITH ORDINALITY AS u(a, i) ORDER BY u.i`, pq.Array(actors)); err != nil {
		return nil, nil, dbErr(err)
	}
	var ts []target
	var of [][]int
	seen := map[int64]int{}
	for i, shard := range shards {
		j, ok := seen[shard]
		if !ok {
			j = len(ts)
			seen[shard] = j
			ts = append(ts, target{query: sc.citus, args: []any{actors[i], sc.sql}})
			of = append(of, nil)
		}
		of[j] = append(of[j], i)
	}
	return ts, of, nil
}

// shards returns an actor of each shard of the key table, in order; read
// once, so splitting a shard needs a restart.
func (s *Store) shards(ctx context.Context) ([]string, error) {
	if actors := s.shardActors.Load(); actors != nil {
		return *actors, nil
	}
	// The first of 0, 1, 2, … whose hash falls in each shard; 64 a shard cover them all.
	var rows []struct {
		Actor  string `db:"actor"`
		Shards int    `db:"shards"`
	}
	err := s.db.SelectContext(ctx, &rows, `SELECT DISTINCT ON (shard) g::text AS actor, c.n AS shards
		FROM (SELECT count(*) AS n FROM pg_dist_shard WHERE logicalrelid = 'idempotency_keys'::regclass) c,
			generate_series(0, 64 * c.n) g, get_shard_id_for_distribution_column('idempotency_keys', g::text) shard
		ORDER BY shard, g`)
	if err != nil {
		return nil, fmt.Errorf("find the shards: %w", dbErr(err))
	}
	if len(rows) == 0 || len(rows) != rows[0].Shards {
		return nil, fmt.Errorf("find the shards: an actor for %d shards", len(rows))
	}
	actors := make([]string, len(rows))
	for i, r := range rows {
		actors[i] = r.Actor
	}
	s.shardActors.Store(&actors)
	return actors, nil
}
