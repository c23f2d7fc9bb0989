// Package postgres keeps the idempotency records and the business rows in
// PostgreSQL, on the database clock (unless a test sets Store.Clock). It is
// the only package that speaks SQL or reads SQLSTATE codes.
package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepg "github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/demo-api/demo-api/internal/apperr"
	"github.com/demo-api/demo-api/internal/delivery"
	"github.com/demo-api/demo-api/migrations"
)

// Statement bounds for Open: how long one statement of a pool may run (bound.go).
const (
	KeyStatements  = 1500 * time.Millisecond // a request's statements, which take milliseconds
	LongStatements = 10 * time.Second        // the sweeper's and dispatcher's batches, and the commands
)

// Options are how OpenWith opens a pool.
type Options struct {
	StatementTimeout time.Duration // KeyStatements or LongStatements
	Pooled           bool          // the URL reaches a pooler in transaction mode other than PgBouncer
}

// Open is OpenWith with the statement bound statementTimeout.
func Open(ctx context.Context, url string, statementTimeout time.Duration) (*sqlx.DB, error) {
	return OpenWith(ctx, url, Options{StatementTimeout: statementTimeout})
}

// OpenWith connects to the database at url (ParseURL) and checks that it
// answers. PgBouncer, in any pool mode, is taken as Pooled.
func OpenWith(ctx context.Context, url string, opts Options) (*sqlx.DB, error) {
	if opts.StatementTimeout <= 0 {
		return nil, errors.New("open database: no statement bound")
	}
	dsn, err := ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg, err := pq.NewConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.BinaryParameters = true // a statement with arguments is one round trip, not two
	// A partition gives 503s within seconds: a connect is bounded, and so is each read and write.
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 3*time.Second)
	dialer := &boundedDialer{limit: opts.StatementTimeout + max(opts.StatementTimeout/5, 500*time.Millisecond)}
	pooled := opts.Pooled
	if !pooled {
		if pooled, err = behindPgBouncer(ctx, cfg, dialer); err != nil {
			return nil, fmt.Errorf("reach database: %w", err)
		}
	}
	pqc, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	pqc.Dialer(dialer)
	db := sqlx.NewDb(sql.OpenDB(&boundConnector{pq: pqc, bound: opts.StatementTimeout, pooled: pooled,
		hear: &hearing{underway: map[*time.Time]struct{}{}}}), "postgres")
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("reach database: %w", startupHint(err))
	}
	return db, nil
}

// poolerProbe is a startup parameter PostgreSQL accepts (an extension's setting) and PgBouncer refuses.
const poolerProbe = "demo_api.pooler_probe"

// behindPgBouncer connects once with poolerProbe, which only PgBouncer refuses.
func behindPgBouncer(ctx context.Context, cfg pq.Config, dialer pq.Dialer) (bool, error) {
	probe := cfg.Clone()
	probe.Runtime[poolerProbe] = "on"
	c, err := pq.NewConnectorConfig(probe)
	if err != nil {
		return false, err
	}
	c.Dialer(dialer)
	ctx, _ = connecting(ctx)
	conn, err := c.Connect(ctx)
	if err == nil {
		conn.Close()
	} else if refusedParameter(err) == poolerProbe {
		return true, nil
	}
	return false, startupHint(err)
}

// refusedParameter returns the startup parameter a pooler refused in err, or "".
func refusedParameter(err error) string {
	if pqErr, ok := errors.AsType[*pq.Error](err); ok && pqErr.Code == "08P01" {
		if param, ok := strings.CutPrefix(pqErr.Message, "unsupported startup parameter: "); ok {
			return param
		}
	}
	return ""
}

// startupHint adds what to do to a pooler's refusal of the URL's startup parameter.
func startupHint(err error) error {
	if param := refusedParameter(err); param != "" && param != poolerProbe {
		return fmt.Errorf("%w (the pooler refuses the URL's parameter %s: remove it from the URL; "+
			"statements are bounded without it)", err, param)
	}
	return err
}

// Every connection is dialed through boundedDialer, so that no read waits forever: a
// partition holds bytes rather than refusing them, and TCP alone would wait for minutes.
//
// boundedDialer dials connections whose every read and write fails after limit: lib/pq does
// not stop reading at a context's deadline, and its cancel would cross the same partition.
// A dial whose context no connect marked (connecting) is lib/pq's cancel request for a
// statement past its deadline: it has cancelLimit in all.
type boundedDialer struct {
	net.Dialer
	limit time.Duration
}

// cancelLimit bounds how long lib/pq waits for a cancel request, its connect and the
// server's answer: lib/pq ends a prepared statement only once its cancel has, and in
// a partition no cancel arrives.
const cancelLimit = 250 * time.Millisecond

// dialingKey marks a connect's context; its value is the connect's *dialing.
type dialingKey struct{}

// dialing is a connect's connection, once dialed; the connect's end (ctx's) expires it,
// since lib/pq's startup reads do not watch ctx.
type dialing struct {
	mu    sync.Mutex
	conn  *boundedConn
	ended bool
}

// connecting returns ctx marked as a connect's, and what its dial makes.
func connecting(ctx context.Context) (context.Context, *dialing) {
	d := new(dialing)
	return context.WithValue(ctx, dialingKey{}, d), d
}

func (d *dialing) made(c *boundedConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn = c; d.ended {
		c.expire()
	}
}

func (d *dialing) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ended = true; d.conn != nil {
		d.conn.expire()
	}
}

// Dial and DialTimeout complete pq.Dialer; lib/pq calls DialContext, which each of them is.
func (d *boundedDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d *boundedDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

func (d *boundedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	connect, ok := ctx.Value(dialingKey{}).(*dialing)
	if !ok {
		end := time.Now().Add(cancelLimit)
		ctx, cancel := context.WithDeadline(ctx, end)
		defer cancel()
		c, err := d.Dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cancelConn{Conn: c, end: end, linger: d.limit}, nil
	}
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	bc := &boundedConn{Conn: c, limit: d.limit}
	connect.made(bc)
	return bc, nil
}

// cancelConn is a cancel request's connection. lib/pq reads it until the server closes
// it, which says the cancel was done; at end it reads an EOF instead. The connection
// itself stays open, in the background, until the server closes it or linger passes:
// a pooler told of a cancel may not expect its client gone first (PgBouncer 1.18 exits).
type cancelConn struct {
	net.Conn
	end    time.Time
	linger time.Duration
}

func (c *cancelConn) SetDeadline(time.Time) error      { return nil }
func (c *cancelConn) SetReadDeadline(time.Time) error  { return nil }
func (c *cancelConn) SetWriteDeadline(time.Time) error { return nil }

func (c *cancelConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(c.end)
	n, err := c.Conn.Read(b)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return n, io.EOF
	}
	return n, err
}

func (c *cancelConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(c.end)
	return c.Conn.Write(b)
}

func (c *cancelConn) Close() error {
	go func() {
		c.Conn.SetReadDeadline(time.Now().Add(c.linger))
		io.Copy(io.Discard, c.Conn)
		c.Conn.Close()
	}()
	return nil
}

// boundedConn is a connection to the database; a read or write on it waits limit at most,
// and while a statement runs, no longer than until (boundDriverConn.bounded).
type boundedConn struct {
	net.Conn
	limit time.Duration
	until atomic.Int64 // Unix nanoseconds; 0 while no statement runs
}

func (c *boundedConn) deadline() time.Time {
	d := time.Now().Add(c.limit)
	if u := c.until.Load(); u != 0 && u < d.UnixNano() {
		return time.Unix(0, u)
	}
	return d
}

// expire ends the connection's reads and writes, those under way too.
func (c *boundedConn) expire() {
	c.until.Store(1)
	_ = c.Conn.SetDeadline(time.Unix(0, 1)) // a closed connection has nothing left to end
}

func (c *boundedConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(c.deadline())
	return c.Conn.Read(b)
}

func (c *boundedConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(c.deadline())
	return c.Conn.Write(b)
}

// Migrate applies the embedded migrations up (steps 0: all) or down (steps
// < 0: that many). Through a Pooled db it only checks that the schema is current.
func Migrate(db *sqlx.DB, steps int) error {
	return MigrateFS(db, migrations.FS, ".", "", steps)
}

// ErrMigrateNeedsDirectURL is the error of a migration through a pooler in transaction mode.
var ErrMigrateNeedsDirectURL = errors.New("migrations need a direct connection to PostgreSQL, not one through a pooler in " +
	"transaction mode (where a session's lock outlives its transaction): run them with a URL of the server itself")

// MigrateFS is Migrate for the migrations in dir of fsys, recorded in table (empty: schema_migrations).
func MigrateFS(db *sqlx.DB, fsys fs.FS, dir, table string, steps int) error {
	src, err := iofs.New(fsys, dir)
	if err != nil {
		return fmt.Errorf("read migrations: %w", err)
	}
	if Pooled(db) {
		return schemaCurrent(db, src, cmp.Or(table, migratepg.DefaultMigrationsTable), steps)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		return fmt.Errorf("migrate: %w", dbErr(err))
	}
	var m *migrate.Migrate
	drv, err := migratepg.WithConnection(context.Background(), conn, &migratepg.Config{MigrationsTable: table})
	if err == nil {
		m, err = migrate.NewWithInstance("iofs", src, "postgres", drv)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	defer m.Close() // closes conn, not db
	if steps == 0 {
		err = m.Up()
	} else {
		err = m.Steps(steps)
	}
	if errors.Is(err, fs.ErrNotExist) { // the database's version is none of the files'
		return fmt.Errorf("migrate: the database is at a migration this build does not have (a development database: "+
			"make db-reset starts it afresh): %w", err)
	}
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// schemaCurrent returns nil when steps is 0 and the schema is current, else ErrMigrateNeedsDirectURL.
// A migration holds a session's advisory lock while it runs, which a pooler in
// transaction mode cannot give: behind one, a service only checks that the
// schema is the one it needs, and migrates through a direct URL.
func schemaCurrent(db *sqlx.DB, src source.Driver, table string, steps int) error {
	var want uint
	for v, err := src.First(); err == nil; v, err = src.Next(v) {
		want = v
	}
	var version uint
	var dirty bool
	err := db.QueryRow("SELECT version, dirty FROM "+pq.QuoteIdentifier(table)+" LIMIT 1").Scan(&version, &dirty)
	if pqErr, ok := errors.AsType[*pq.Error](err); ok && pqErr.Code == "42P01" { // no table: nothing applied
		err = sql.ErrNoRows
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("migrate: read the schema's version: %w", dbErr(err))
	}
	if steps == 0 && version == want && !dirty {
		return nil
	}
	return fmt.Errorf("migrate: the schema is at version %d%s, this build needs %d: %w",
		version, map[bool]string{true: " (dirty)"}[dirty], want, ErrMigrateNeedsDirectURL)
}

// Store implements the idempotency store and the business store. It keeps no
// state of a key in memory: every decision is made by a statement, on the
// database's clock and under its unique index, so that any number of
// replicas share one Store's rules through the database alone.
type Store struct {
	db    *sqlx.DB
	Clock func() time.Time // if set, replaces the database clock (tests move time with it)
	rows  rowQuerier       // runs the statements that return a row
	scans scanner          // New's or NewCitus's
}

// scanner runs the scans (the dispatcher's take and marks, the sweeper's purge), all that differs
// on Citus: onePostgres runs each statement once, citusScans (citus.go) a call of it per shard.
type scanner interface {
	takeDue(ctx context.Context, s *Store, token string, n int, lease time.Duration, busy []string) ([]delivery.Due, error)
	settle(ctx context.Context, s *Store, marks []delivery.Mark) (int, error)
	purgeExpired(ctx context.Context, s *Store, batch int, mark SweepMark) (deleted int64, next *SweepMark, err error)
}

// onePostgres is the scanner of one PostgreSQL (outbox.go, sweep.go).
type onePostgres struct{}

// rowQuerier runs query and scans its one row into dest; an error worth
// trying again is apperr unavailable (dbErr). New picks prepared
// statements, or unprepared ones through a pooler.
type rowQuerier interface {
	queryRow(ctx context.Context, query string, args []any, dest ...any) error
}

// prepared prepares each statement once per Store (and per connection): the
// key statements cost several times more to plan than to run. database/sql
// prepares it again on each connection that first runs it, and forgets it
// with a connection the pool closes.
type prepared struct {
	db    *sqlx.DB
	stmts sync.Map // query text → *sqlx.Stmt
}

func (p *prepared) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	st, err := p.prepare(ctx, query)
	if err != nil {
		return err
	}
	return dbErr(st.QueryRowContext(ctx, args...).Scan(dest...))
}

func (p *prepared) prepare(ctx context.Context, query string) (*sqlx.Stmt, error) {
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sqlx.Stmt), nil
	}
	st, err := p.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, dbErr(err)
	}
	if prev, loaded := p.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sqlx.Stmt), nil
	}
	return st, nil
}

// plain sends each statement with its parameters, as a pooler in
// transaction mode needs: a prepared statement lives on one server
// connection, which the pooler does not keep for the client.
type plain struct{ db *sqlx.DB }

func (p plain) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return dbErr(p.db.QueryRowxContext(ctx, query, args...).Scan(dest...))
}

// New returns the Store on one PostgreSQL at db (NewCitus: on a Citus
// coordinator); it prepares nothing when db is Pooled.
func New(db *sqlx.DB) *Store {
	s := &Store{db: db, rows: &prepared{db: db}, scans: onePostgres{}}
	if Pooled(db) {
		s.rows = plain{db}
	}
	return s
}

// Prepared reports whether the store prepares its statements (not through a Pooled db).
func (s *Store) Prepared() bool {
	_, ok := s.rows.(*prepared)
	return ok
}

// DB is the store's pool, for a store of a service's own beside the keys.
func (s *Store) DB() *sqlx.DB { return s.db }

// now is every statement's time argument: NULL is the database clock (coalesce($n::timestamptz, now())).
// Leases and expiry are read on one clock, the database's, so that replicas
// whose own clocks drift still agree on when a key may be taken over; a test
// sets Clock to move time instead of sleeping.
func (s *Store) now() any {
	if s.Clock == nil {
		return nil
	}
	return s.Clock()
}

// Ping reports whether the database answers. After a restart every idle
// connection is bad, so it pings again, up to once per open connection and once more.
func (s *Store) Ping(ctx context.Context) (err error) {
	for range s.db.Stats().OpenConnections + 1 {
		if err = s.db.PingContext(ctx); !errors.Is(err, driver.ErrBadConn) || ctx.Err() != nil {
			break
		}
	}
	return err
}

// Unavailable reports whether err is worth trying again as is: unreachable, shutting down, busy,
// cancelled, unserializable. Such an error answers 503 with Retry-After and stores nothing: the
// key's statement did not commit, or its commit was not confirmed, and the same key may run again.
func Unavailable(err error) bool {
	_, netErr := errors.AsType[net.Error](err)
	if netErr || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) || errors.Is(err, ErrNotReplicated) ||
		errors.Is(err, ErrSilent) {
		return true
	}
	pqErr, ok := errors.AsType[*pq.Error](err) // connection, rollback, resources, operator intervention:
	return ok && slices.Contains([]string{"08", "40", "53", "57"}, string(pqErr.Code.Class()))
}

// dbErr turns an Unavailable error into apperr unavailable; others pass unchanged.
// Only this package reads SQLSTATEs: above it an error is unavailable (503, try again)
// or the caller's to decide.
func dbErr(err error) error {
	if err == nil || !Unavailable(err) {
		return err
	}
	return &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable, try again",
		RetryAfter: time.Second, Err: err}
}
