package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"

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
func Distribute(ctx context.Context, db *sqlx.DB) (d Distribution, err error) {
	err = db.GetContext(ctx, &d.Citus, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`)
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
	// Each its own transaction: Citus makes no function in the one that distributed the tables.
	for _, name := range []string{"citus/key_writes.sql", "citus/scans.sql"} {
		if err := runCitusScript(ctx, db, name); err != nil {
			return d, fmt.Errorf("%s on Citus %s: %w", name, d.Citus, err)
		}
	}
	return d, nil
}

// runCitusScript runs migrations/name as one simple query: all of it or nothing.
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
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox distributed by actor_id, co-located; the key writes delegated to the actor's worker, the scans to each shard's"
	default:
		return "Citus " + d.Citus + ": idempotency_keys, demo_requests and outbox already distributed by actor_id"
	}
}

// scanOf is a statement across actors; on Citus its call runs it on one
// shard, given an actor of the shard and the statement.
func scanOf(name string) stmt { return stmt{sql: statement(name), citus: citusCall(name, 2)} }

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
