package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// A pool bounds each statement by a deadline, at which lib/pq has the server
// cancel it (57014, a 503): PgBouncer refuses statement_timeout (docs/running.md).

// boundConnector opens bounded lib/pq connections; it is the pool's driver too, for Pooled and await.
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

func (c *boundConnector) Connect(ctx context.Context) (driver.Conn, error) {
	end := c.hear.begin(nil)
	conn, err := c.pq.Connect(ctx)
	if end(err); err != nil {
		return nil, err
	}
	bc := &boundDriverConn{pqConn: conn.(pqConn), bound: c.bound, pooled: c.pooled, hear: c.hear}
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
	bound  time.Duration
	pooled bool
	hear   *hearing
	// notReplicated: the server warned that a commit's wait for its standby was cancelled.
	notReplicated atomic.Bool
}

func (c *boundDriverConn) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	c.notReplicated.Store(false)
	return context.WithTimeout(ctx, c.bound)
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
		return &boundStmt{conn: c, query: query}, nil
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	end := c.hear.begin(waiterOf(ctx))
	st, err := c.pqConn.PrepareContext(ctx, query)
	if end(err); err != nil {
		return nil, err
	}
	return &boundStmt{pq: st.(pqStmt), conn: c, query: query}, nil
}

// BeginTx begins a transaction on ctx as it is; each statement in it has its own deadline.
func (c *boundDriverConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	end := c.hear.begin(waiterOf(ctx))
	tx, err := c.pqConn.BeginTx(ctx, opts)
	if end(err); err != nil {
		return nil, err
	}
	return &boundTx{pq: tx, conn: c}, nil
}

func (c *boundDriverConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.exec(ctx, nil, query, args)
}

func (c *boundDriverConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.query(ctx, nil, query, args)
}

// exec runs query, prepared as st or unprepared (st nil), under c's bound:
// traced, heard (hearing), and ErrNotReplicated where the server said so.
func (c *boundDriverConn) exec(ctx context.Context, st pqStmt, query string, args []driver.NamedValue) (driver.Result, error) {
	ctx, done := traceStatement(ctx, query)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	end := c.hear.begin(waiterOf(ctx))
	var res driver.Result
	var err error
	if st != nil {
		res, err = st.ExecContext(ctx, args)
	} else {
		res, err = c.pqConn.ExecContext(ctx, query, args)
	}
	end(err)
	err = c.replicated(err)
	done(err)
	return res, err
}

// query is exec for a statement with rows: its deadline ends when they are closed.
func (c *boundDriverConn) query(ctx context.Context, st pqStmt, query string, args []driver.NamedValue) (driver.Rows, error) {
	ctx, done := traceStatement(ctx, query)
	ctx, cancel := c.bounded(ctx)
	end := c.hear.begin(waiterOf(ctx))
	var rows driver.Rows
	var err error
	if st != nil {
		rows, err = st.QueryContext(ctx, args)
	} else {
		rows, err = c.pqConn.QueryContext(ctx, query, args)
	}
	end(err)
	if done(err); err != nil {
		cancel()
		return nil, err
	}
	return &boundRows{pqRows: rows.(pqRows), conn: c, cancel: cancel}, nil
}

func (c *boundDriverConn) Ping(ctx context.Context) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	return c.pqConn.Ping(ctx)
}

// boundTx is a transaction whose commit its standby did not confirm is ErrNotReplicated.
type boundTx struct {
	pq   driver.Tx
	conn *boundDriverConn
}

func (t *boundTx) Commit() error {
	t.conn.notReplicated.Store(false)
	return t.conn.replicated(t.pq.Commit())
}

func (t *boundTx) Rollback() error { return t.pq.Rollback() }

// boundRows are rows read under their statement's deadline, which ends when they are closed.
type boundRows struct {
	pqRows
	conn   *boundDriverConn
	cancel context.CancelFunc
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
	r.cancel()
	return r.conn.replicated(err)
}

// boundStmt is a statement run under its connection's bound, prepared (pq) or, pooled, not (pq nil).
type boundStmt struct {
	pq    pqStmt
	conn  *boundDriverConn
	query string // its text, which also names its span (traceStatement)
}

func (s *boundStmt) Close() error {
	if s.pq == nil {
		return nil
	}
	return s.pq.Close()
}

func (s *boundStmt) NumInput() int {
	if s.pq == nil {
		return -1 // the server counts them
	}
	return s.pq.NumInput()
}

// Exec and Query are there for driver.Stmt: database/sql calls the Context forms.
func (s *boundStmt) Exec([]driver.Value) (driver.Result, error) { return nil, driver.ErrSkip }
func (s *boundStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, driver.ErrSkip }

func (s *boundStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.exec(ctx, s.pq, s.query, args)
}

func (s *boundStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.conn.query(ctx, s.pq, s.query, args)
}

// ErrNotReplicated: a commit's wait for its synchronous standby was cancelled; a failover may lose it.
var ErrNotReplicated = errors.New("postgres: the commit was not confirmed by a synchronous standby (it holds on the primary only)")
