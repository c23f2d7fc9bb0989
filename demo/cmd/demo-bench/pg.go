package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
)

// lab is what the bench and the scale bench start from: the module's
// root, a folder of their own with demo-api built into it, a durable
// PostgreSQL with pg_stat_statements, its admin connection, and the
// environment the report describes.
type lab struct {
	root, tmp, bin string
	pg             *pgtest.Server
	admin          *sqlx.DB
	env            environment
}

// startLab starts a lab, in a folder named from prefix, its PostgreSQL
// with opts (made durable, with pg_stat_statements), saying each step to
// logf. stop undoes it; on an error, startLab has undone what it made.
func startLab(ctx context.Context, prefix string, logf func(string, ...any), opts pgtest.Options) (_ *lab, err error) {
	l := &lab{}
	defer func() {
		if err != nil {
			l.stop()
		}
	}()
	if l.root, err = moduleRoot(); err != nil {
		return nil, err
	}
	if l.tmp, err = os.MkdirTemp("", prefix); err != nil {
		return nil, err
	}
	logf("building ./cmd/demo-api")
	if l.bin, err = buildServer(ctx, l.root, l.tmp); err != nil {
		return nil, err
	}
	more := ""
	for _, name := range slices.Sorted(maps.Keys(opts.Settings)) {
		more += fmt.Sprintf(", %s=%s", name, opts.Settings[name])
	}
	logf("starting a durable PostgreSQL with pg_stat_statements%s", more)
	opts.Durable = true
	opts.Settings = maps.Clone(opts.Settings)
	if opts.Settings == nil {
		opts.Settings = map[string]string{}
	}
	opts.Settings["shared_preload_libraries"] = "pg_stat_statements"
	opts.Settings["pg_stat_statements.track_utility"] = "off"
	if l.pg, err = pgtest.Start(ctx, opts); err != nil {
		return nil, err
	}
	if l.admin, err = sqlx.Open("postgres", l.pg.URL("postgres")); err != nil {
		return nil, err
	}
	l.admin.SetMaxOpenConns(2)
	l.env = describeEnv(ctx, l.admin, l.pg.Source)
	l.env.Code = describeCode(ctx, l.root)
	return l, nil
}

// stop closes the admin connection, stops PostgreSQL and removes the folder.
func (l *lab) stop() {
	if l.admin != nil {
		l.admin.Close()
	}
	if l.pg != nil {
		l.pg.Stop()
	}
	if l.tmp != "" {
		os.RemoveAll(l.tmp)
	}
}

// statsDB reads what PostgreSQL did during a phase: statements from
// pg_stat_statements (the app's only: those of the bench database),
// transaction ids assigned (each is a commit that waits for its WAL flush)
// and WAL bytes written. It connects to the admin database, so its own
// queries are not the app's.
type statsDB struct {
	admin *sqlx.DB
	dbid  int64
	pgss  bool // pg_stat_statements is loaded
}

// snapshot is the counters at one moment.
type snapshot struct {
	xid, walBytes int64
}

func (s *statsDB) snapshot(ctx context.Context) (snapshot, error) {
	var sn snapshot
	err := s.admin.QueryRowxContext(ctx, `SELECT
    pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
    pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&sn.xid, &sn.walBytes)
	return sn, err
}

// resetStatements empties pg_stat_statements.
func (s *statsDB) resetStatements(ctx context.Context) error {
	if !s.pgss {
		return nil
	}
	_, err := s.admin.ExecContext(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// statement is one normalised statement of the app, as counted.
type statement struct {
	QueryID   int64   `db:"queryid"`
	Query     string  `db:"query"`
	Calls     int64   `db:"calls"`
	TotalExec float64 `db:"total_exec_time"` // ms
	TotalPlan float64 `db:"total_plan_time"` // ms; 0 unless pg_stat_statements.track_planning
	MaxExec   float64 `db:"max_exec_time"`   // ms
	// What it did, which the host's load does not change: rows returned or
	// changed, shared buffers touched (hit or read) and dirtied, WAL records
	// and bytes.
	Rows       int64 `db:"rows"`
	Buffers    int64 `db:"buffers"`
	Dirtied    int64 `db:"shared_blks_dirtied"`
	WALRecords int64 `db:"wal_records"`
	WALBytes   int64 `db:"wal_bytes"`
}

// add sums o's counters into s.
func (s *statement) add(o statement) {
	s.Calls += o.Calls
	s.TotalExec += o.TotalExec
	s.TotalPlan += o.TotalPlan
	s.MaxExec = max(s.MaxExec, o.MaxExec)
	s.Rows += o.Rows
	s.Buffers += o.Buffers
	s.Dirtied += o.Dirtied
	s.WALRecords += o.WALRecords
	s.WALBytes += o.WALBytes
}

// statements returns the app's statements since the last reset.
func (s *statsDB) statements(ctx context.Context) ([]statement, error) {
	if !s.pgss {
		return nil, nil
	}
	var out []statement
	err := s.admin.SelectContext(ctx, &out, `
SELECT queryid, query, calls, total_exec_time, total_plan_time, max_exec_time, rows,
       shared_blks_hit + shared_blks_read AS buffers, shared_blks_dirtied, wal_records, wal_bytes::bigint AS wal_bytes
FROM pg_stat_statements
WHERE dbid = $1 AND calls > 0 ORDER BY calls DESC, queryid`, s.dbid)
	return out, err
}

// phaseCounters is what PostgreSQL did during one phase.
type phaseCounters struct {
	statements []statement
	calls      int64
	xids       int64
	walBytes   int64
}

// measure runs f between two readings of the counters.
func (s *statsDB) measure(ctx context.Context, f func()) (phaseCounters, error) {
	var pc phaseCounters
	if err := s.resetStatements(ctx); err != nil {
		return pc, fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	before, err := s.snapshot(ctx)
	if err != nil {
		return pc, err
	}
	f()
	after, err := s.snapshot(ctx)
	if err != nil {
		return pc, err
	}
	if pc.statements, err = s.statements(ctx); err != nil {
		return pc, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	for _, st := range pc.statements {
		pc.calls += st.Calls
	}
	pc.xids = after.xid - before.xid
	pc.walBytes = after.walBytes - before.walBytes
	return pc, nil
}

// setupDatabase creates the bench database and pg_stat_statements in the
// admin one; it reports whether pg_stat_statements is usable.
func setupDatabase(ctx context.Context, admin *sqlx.DB, name string) (dbid int64, pgss bool, err error) {
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return 0, false, fmt.Errorf("create database %s: %w", name, err)
	}
	if err := admin.GetContext(ctx, &dbid, `SELECT oid::bigint FROM pg_database WHERE datname = $1`, name); err != nil {
		return 0, false, err
	}
	if _, err := admin.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return dbid, false, nil
	}
	if _, err := admin.ExecContext(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return dbid, false, nil
	}
	return dbid, true, nil
}

// shortQuery is the first line-ish of a normalised statement, for tables.
func shortQuery(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > n {
		q = q[:n-1] + "…"
	}
	return strings.ReplaceAll(q, "|", `\|`)
}
