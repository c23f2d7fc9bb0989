package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// A pool bounds each statement by a deadline, at which lib/pq has the server
// cancel it (57014, a 503). A deadline rather than statement_timeout: PgBouncer in
// transaction mode refuses the startup parameter, and a SET would pass from one
// client's transaction to another's (docs/running.md). Kept in the client, the
// deadline also bounds what the server cannot: in a partition neither the answer
// nor the cancel arrives, so the statement's reads end cancelLimit after its
// deadline, and its connection is not used again.

// boundConnector opens bounded lib/pq connections; it is the pool's driver too, for Pooled and the watch.
type boundConnector struct {
	pq     driver.Connector
	bound  time.Duration
	pooled bool
	hear   *hearing
}

// pqConn, pqRows and pqStmt are what lib/pq's connections, rows and statements implement.
type pqConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
}

type pqRows interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeScanType
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypePrecisionScale
}

type pqStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// Connect opens a connection, which ends with ctx: a waiter that gives up (watch) stops it.
func (c *boundConnector) Connect(ctx context.Context) (driver.Conn, error) {
	end := c.hear.begin(context.Background()) // a connect: its waiter waits on
	ctx, d := connecting(ctx)
	stop := context.AfterFunc(ctx, d.end)
	conn, err := c.pq.Connect(ctx)
	if !stop() && err == nil { // ctx ended as it connected
		conn.Close()
		err = context.Cause(ctx)
	}
	if end(err); err != nil {
		return nil, err
	}
	bc := &boundDriverConn{pqConn: conn.(pqConn), boundConnector: c, net: d.conn}
	pq.SetNoticeHandler(conn, func(notice *pq.Error) {
		if strings.Contains(notice.Message, "wait for synchronous replication") {
			bc.notReplicated.Store(true)
		}
	})
	return bc, nil
}

func (c *boundConnector) Driver() driver.Driver { return c }

// Open is there for driver.Driver; the pool connects through Connect.
func (c *boundConnector) Open(string) (driver.Conn, error) {
	return nil, errors.New("postgres: connect through the pool that Open returns")
}

// Pooled reports whether db, a pool of Open, reaches PostgreSQL through a pooler in transaction mode.
func Pooled(db *sqlx.DB) bool {
	if db == nil {
		return false
	}
	c, ok := db.Driver().(*boundConnector)
	return ok && c.pooled
}

// boundDriverConn is a lib/pq connection whose statements each run under a deadline of bound.
type boundDriverConn struct {
	pqConn
	*boundConnector              // its pool's bound, pooled and hearing
	net             *boundedConn // what it reads and writes
	// notReplicated: the server warned that a commit's wait for its standby was cancelled.
	notReplicated atomic.Bool
	// spent: a statement of it met its deadline, so a cancel request may still be on its
	// way to its server process, to cancel whatever runs there next: it is not used again.
	spent atomic.Bool
}

// bounded returns ctx with the statement's deadline, at which lib/pq sends the
// server a cancel request; the connection's reads end cancelLimit later, whether
// the server answered the cancel or nothing arrives. Its end says whether the
// deadline came, and if it did the connection is spent.
func (c *boundDriverConn) bounded(ctx context.Context) (context.Context, func() bool) {
	c.notReplicated.Store(false)
	ctx, cancel := context.WithTimeout(ctx, c.bound)
	deadline, _ := ctx.Deadline()
	c.net.until.Store(deadline.Add(cancelLimit).UnixNano())
	return ctx, func() bool {
		c.net.until.Store(0)
		ended := ctx.Err() != nil
		if ended {
			c.spent.Store(true)
		}
		cancel()
		return ended
	}
}

// IsValid completes driver.Validator: the pool closes a connection that is not.
func (c *boundDriverConn) IsValid() bool { return !c.spent.Load() && c.pqConn.IsValid() }

// ResetSession completes driver.SessionResetter, for a connection reused at once.
func (c *boundDriverConn) ResetSession(ctx context.Context) error {
	if c.spent.Load() {
		return driver.ErrBadConn
	}
	return c.pqConn.ResetSession(ctx)
}

// expired returns err, or the context's error beside it where the deadline ended the statement.
func expired(ctx context.Context, ended bool, err error) error {
	if _, answered := errors.AsType[*pq.Error](err); err == nil || answered || !ended {
		return err
	}
	return fmt.Errorf("%w (%w)", ctx.Err(), err)
}

// replicated returns err, or ErrNotReplicated for a nil err after the server's warning.
func (c *boundDriverConn) replicated(err error) error {
	if err == nil && c.notReplicated.Load() {
		return ErrNotReplicated
	}
	return err
}

func (c *boundDriverConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.pooled {
		return &boundStmt{pqStmt: unprepared{c.pqConn, query}, conn: c, query: query}, nil
	}
	ctx, done := c.bounded(ctx)
	end := c.hear.begin(ctx)
	st, err := c.pqConn.PrepareContext(ctx, query)
	end(err)
	if err = expired(ctx, done(), err); err != nil {
		return nil, err
	}
	return &boundStmt{pqStmt: st.(pqStmt), conn: c, query: query}, nil
}

// BeginTx begins a transaction on ctx as it is; each statement in it has its own deadline.
func (c *boundDriverConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	end := c.hear.begin(ctx)
	tx, err := c.pqConn.BeginTx(ctx, opts)
	if end(err); err != nil {
		return nil, err
	}
	return &boundTx{Tx: tx, conn: c}, nil
}

func (c *boundDriverConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return (&boundStmt{pqStmt: unprepared{c.pqConn, query}, conn: c, query: query}).ExecContext(ctx, args)
}

func (c *boundDriverConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return (&boundStmt{pqStmt: unprepared{c.pqConn, query}, conn: c, query: query}).QueryContext(ctx, args)
}

func (c *boundDriverConn) Ping(ctx context.Context) error {
	ctx, done := c.bounded(ctx)
	err := c.pqConn.Ping(ctx)
	return expired(ctx, done(), err)
}

// boundTx is a transaction whose commit its standby did not confirm is ErrNotReplicated.
// The server's commit holds on the primary (its WAL is flushed) but a failover may lose
// it, so it is not acknowledged: the request answers 503, and the retry replays or
// runs again, which is safe either way.
type boundTx struct {
	driver.Tx
	conn *boundDriverConn
}

func (t *boundTx) Commit() error {
	t.conn.notReplicated.Store(false)
	return t.conn.replicated(t.Tx.Commit())
}

// boundRows are rows read under their statement's deadline, which ends when they are closed.
type boundRows struct {
	pqRows
	conn *boundDriverConn
	done func() bool
}

func (r *boundRows) Next(dest []driver.Value) error {
	err := r.pqRows.Next(dest)
	if err == io.EOF && r.conn.notReplicated.Load() {
		return ErrNotReplicated
	}
	return err
}

func (r *boundRows) Close() error {
	err := r.pqRows.Close()
	r.done()
	return r.conn.replicated(err)
}

// boundStmt is a statement, prepared or unprepared, run under its connection's bound.
type boundStmt struct {
	pqStmt
	conn  *boundDriverConn
	query string // its text, which also names its span (traceStatement)
}

// ExecContext runs s traced, heard (hearing), and ErrNotReplicated where the server said so.
func (s *boundStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ctx, traced := traceStatement(ctx, s.query)
	ctx, done := s.conn.bounded(ctx)
	end := s.conn.hear.begin(ctx)
	res, err := s.pqStmt.ExecContext(ctx, args)
	end(err)
	err = s.conn.replicated(expired(ctx, done(), err))
	traced(err)
	return res, err
}

// QueryContext is ExecContext for a statement with rows: its deadline ends when they are closed.
func (s *boundStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ctx, traced := traceStatement(ctx, s.query)
	ctx, done := s.conn.bounded(ctx)
	end := s.conn.hear.begin(ctx)
	rows, err := s.pqStmt.QueryContext(ctx, args)
	end(err)
	if err != nil {
		err = expired(ctx, done(), err)
		traced(err)
		return nil, err
	}
	traced(nil)
	return &boundRows{pqRows: rows.(pqRows), conn: s.conn, done: done}, nil
}

// unprepared is a statement the server parses at each run, as a pooler in transaction mode
// needs: a prepared statement lives in one server connection, and the pooler may give
// the next transaction another.
type unprepared struct {
	conn  pqConn
	query string
}

func (u unprepared) Close() error  { return nil }
func (u unprepared) NumInput() int { return -1 } // the server counts them

// Exec and Query are there for driver.Stmt: database/sql calls the Context forms.
func (u unprepared) Exec([]driver.Value) (driver.Result, error) { return nil, driver.ErrSkip }
func (u unprepared) Query([]driver.Value) (driver.Rows, error)  { return nil, driver.ErrSkip }

func (u unprepared) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return u.conn.ExecContext(ctx, u.query, args)
}

func (u unprepared) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return u.conn.QueryContext(ctx, u.query, args)
}

// ErrNotReplicated: a commit's wait for its synchronous standby was cancelled; a failover may lose it.
var ErrNotReplicated = errors.New("postgres: the commit was not confirmed by a synchronous standby (it holds on the primary only)")
