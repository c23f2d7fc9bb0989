// Package postgres keeps the idempotency records and the business rows in
// PostgreSQL. It is the only package that speaks SQL or reads SQLSTATE codes.
// Every time it stores or compares comes from the database clock, unless a
// test sets Store.Clock.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepg "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/migrations"
)

// Statement bounds for Open: how long one statement of a pool may run on the
// server (statement_timeout). A read or write on the pool's connections waits
// that and a margin at most, so a partitioned database is an error within it.
const (
	// KeyStatements bounds a request's statements: the key statements (and
	// the reads beside them) take milliseconds, so a partition is answered
	// 503 within seconds.
	KeyStatements = 2 * time.Second
	// LongStatements bounds the batches of the sweeper and the dispatcher,
	// and the commands that run alone (migrate, purge, provider).
	LongStatements = 10 * time.Second
)

// Open connects to the database at url and checks that it answers. Its
// statements run for at most statementTimeout (KeyStatements or
// LongStatements) unless the URL sets its own statement_timeout.
//
// It sets lib/pq's binary_parameters: a statement with arguments then costs one
// network round trip (Parse, Bind, Execute in one go) instead of two, and
// []byte arguments travel as raw bytes, which suits the bytea response body.
func Open(ctx context.Context, url string, statementTimeout time.Duration) (*sqlx.DB, error) {
	cfg, err := pq.NewConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.BinaryParameters = true
	// Bound every wait on the database, so that an unreachable or
	// partitioned database gives 503s within seconds, not hung requests: a
	// connection attempt, and a statement on the server (the work's own
	// deadline, half the lease, bounds the rest). A URL may set its own.
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 3 * time.Second
	}
	if cfg.Runtime == nil {
		cfg.Runtime = map[string]string{}
	}
	if _, ok := cfg.Runtime["statement_timeout"]; !ok {
		cfg.Runtime["statement_timeout"] = strconv.FormatInt(statementTimeout.Milliseconds(), 10)
	}
	connector, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// The server ends a statement at its timeout; only a partition makes the
	// wait for its answer longer. lib/pq does not stop reading at a
	// context's deadline (it sends a cancel request, over the same
	// partition), so each read and write on the connection gets a deadline
	// of its own.
	connector.Dialer(&boundedDialer{limit: ioLimit(cfg.Runtime["statement_timeout"])})
	db := sqlx.NewDb(sql.OpenDB(connector), "postgres")
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("reach database: %w", err)
	}
	return db, nil
}

// ioLimit is how long one read or write on a connection may block: the
// statement timeout (in PostgreSQL's form: milliseconds, or with a unit Go
// reads, such as 10s) and a margin for its error to arrive, a fifth of it
// and at least half a second; 15 s for a form it does not read.
func ioLimit(statementTimeout string) time.Duration {
	d, err := time.ParseDuration(statementTimeout)
	if ms, errMS := strconv.Atoi(statementTimeout); errMS == nil {
		d, err = time.Duration(ms)*time.Millisecond, nil
	}
	if err != nil || d <= 0 {
		return 15 * time.Second
	}
	return d + max(d/5, 500*time.Millisecond)
}

// boundedDialer dials connections whose every read and write fails after
// limit: a database that stopped answering (a partition) is an error within
// seconds, not a wait until TCP gives up. lib/pq reads only when it expects
// an answer, so an idle pooled connection is not touched.
type boundedDialer struct {
	net.Dialer
	limit time.Duration
}

func (d *boundedDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *boundedDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

func (d *boundedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c, limit: d.limit}, nil
}

type boundedConn struct {
	net.Conn
	limit time.Duration
}

func (c *boundedConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.limit))
	return c.Conn.Read(b)
}

func (c *boundedConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.limit))
	return c.Conn.Write(b)
}

// Migrate applies the embedded migrations up (steps 0: all) or down (steps
// < 0: that many). It is a no-op when there is nothing to apply.
func Migrate(db *sqlx.DB, steps int) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("read migrations: %w", err)
	}
	drv, err := migratepg.WithInstance(db.DB, &migratepg.Config{})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if steps == 0 {
		err = m.Up()
	} else {
		err = m.Steps(steps)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// sqlFiles holds every statement the store runs, one file each: the file is
// what PostgreSQL runs, with its parameters ($1, $2, … in reading order)
// listed at its top. The Go code passes them positionally.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statement returns the text of sql/name. It is called for package
// variables, so a missing file stops the program as it starts, by its name.
func statement(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		panic("postgres: " + err.Error())
	}
	return string(b)
}

// Store implements the idempotency store and the business store.
type Store struct {
	db *sqlx.DB
	// Clock, if set, replaces the database clock (tests move time with it).
	Clock func() time.Time
	// Unprepared runs every statement unprepared, for a pooler in
	// transaction mode (such as PgBouncer's), where a prepared statement may
	// not exist on the next transaction's connection. Each statement is then
	// planned on every run: set it only behind such a pooler. Set it before
	// the Store is used.
	Unprepared bool
	stmts      sync.Map // query text → *sqlx.Stmt
}

// prepared returns the statement of query prepared once per Store (and,
// through database/sql, once per connection). The key statements cost
// several times more to plan than to run.
func (s *Store) prepared(ctx context.Context, query string) (*sqlx.Stmt, error) {
	if st, ok := s.stmts.Load(query); ok {
		return st.(*sqlx.Stmt), nil
	}
	st, err := s.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, dbErr(err)
	}
	if prev, loaded := s.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sqlx.Stmt), nil
	}
	return st, nil
}

// queryRow runs the prepared query with args ($1, $2, …), in tx if not nil,
// and scans its one row into dest, one destination per column in the
// query's order.
func (s *Store) queryRow(ctx context.Context, tx *sqlx.Tx, query string, args []any, dest ...any) error {
	if s.Unprepared {
		var on sqlx.QueryerContext = s.db
		if tx != nil {
			on = tx
		}
		return dbErr(on.QueryRowxContext(ctx, query, args...).Scan(dest...))
	}
	st, err := s.prepared(ctx, query)
	if err != nil {
		return err
	}
	if tx != nil {
		st = tx.StmtxContext(ctx, st)
	}
	return dbErr(st.QueryRowContext(ctx, args...).Scan(dest...))
}

// inTx runs fn in a transaction when e is conditional, so that fn's error
// rolls its statement back; otherwise fn's one statement commits on its own
// (fn gets a nil tx).
func (s *Store) inTx(ctx context.Context, e *effect, fn func(tx *sqlx.Tx) error) error {
	if e == nil || !e.conditional {
		return fn(nil)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return dbErr(tx.Commit())
}

// New returns a Store on db.
func New(db *sqlx.DB) *Store { return &Store{db: db} }

// now is the time argument of every statement: NULL means the database
// clock, through coalesce($n::timestamptz, now()).
func (s *Store) now() any {
	if s.Clock == nil {
		return nil
	}
	return s.Clock()
}

// Ping reports whether the database answers.
//
// Connections the pool holds idle die together when PostgreSQL restarts. A
// ping on one fails with driver.ErrBadConn (lib/pq's answer to any failed
// ping), which drops it from the pool, but database/sql does not ping again:
// each call would spend itself on one dead connection and say the database
// is down while it answers. So Ping pings again on a bad connection, at most
// once per connection open when it started and once more (by then on a new
// one), or until ctx ends.
func (s *Store) Ping(ctx context.Context) error {
	var err error
	for range s.db.Stats().OpenConnections + 1 {
		if err = s.db.PingContext(ctx); !errors.Is(err, driver.ErrBadConn) || ctx.Err() != nil {
			break
		}
	}
	return err
}

// dbErr turns an error worth retrying as is into apperr unavailable: the
// database was unreachable, shutting down, out of resources, cancelled a
// statement or could not serialize. Other errors pass unchanged.
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	// Unreachable: refused, reset, cut mid-answer, or a timeout of the
	// network or of the caller.
	_, netErr := errors.AsType[net.Error](err)
	retry := netErr || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
	if pqErr, ok := errors.AsType[*pq.Error](err); ok {
		switch pqErr.Code.Class() {
		case "08", "40", "53", "57": // connection, rollback, resources, operator intervention
			retry = true
		}
	}
	if !retry {
		return err
	}
	return &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable, try again",
		RetryAfter: time.Second, Err: err}
}
