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

// The statement bound of a pool, and what a pooler in transaction mode
// (PgBouncer's) allows.
//
// A statement bound set at connection start (the statement_timeout startup
// parameter) is refused by PgBouncer unless it is told to ignore it, and
// then it is silently gone; a SET on a connection would stay on whichever
// server connection ran it, for the next client. So the bound is kept by
// the client: each statement runs under a context deadline of its pool's
// bound, and at the deadline lib/pq asks the server to cancel it (a
// CancelRequest on a connection of its own, which PgBouncer forwards to the
// server connection running it) and drops the connection. The answer is
// SQLSTATE 57014, as with statement_timeout, and so a 503. A partition,
// where the cancel cannot arrive either, is bounded by the read deadline
// of every connection (boundedConn).
//
// Behind a pooler in transaction mode, a statement prepared in one
// transaction may not exist on the server connection of the next, or may
// exist there under the same name as another client's statement. There,
// a pool prepares nothing on the server: a statement that the code
// prepares is sent unprepared each time it runs (with binary parameters,
// still one round trip).
//
// A cancel that arrives while a commit waits for its synchronous standby
// does not undo the commit: PostgreSQL keeps it on the primary and reports
// it done, with a warning. The pool reads the connection's notices and
// makes that an error (ErrNotReplicated), so that nothing is acknowledged
// that a failover may lose.

// boundConnector opens lib/pq connections whose statements are bounded,
// and, when pooled, never prepared on the server. It is the pool's
// driver.Driver too, so that Pooled can read the pool's mode.
type boundConnector struct {
	pq     driver.Connector
	bound  time.Duration
	pooled bool
	hear   *hearing
}

// pqConn is what a lib/pq connection implements and the pool uses.
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

// pqRows is what lib/pq's rows implement.
type pqRows interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeScanType
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypePrecisionScale
}

// pqStmt is what lib/pq's prepared statements implement.
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
	pc, ok := conn.(pqConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("postgres: the driver's connection (%T) lacks what the pool needs", conn)
	}
	bc := &boundDriverConn{pq: pc, bound: c.bound, pooled: c.pooled, hear: c.hear}
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

// Pooled reports whether db, a pool of Open, reaches PostgreSQL through a
// pooler in transaction mode: one Open recognised (PgBouncer), or one it
// was told of (Options.Pooled). There no statement is prepared on the
// server, and migrations need a direct connection (Migrate).
func Pooled(db *sqlx.DB) bool {
	if db == nil {
		return false
	}
	c, ok := db.Driver().(*boundConnector)
	return ok && c.pooled
}

// boundDriverConn is a lib/pq connection whose statements each run under
// a deadline of bound.
type boundDriverConn struct {
	pq     pqConn
	bound  time.Duration
	pooled bool
	hear   *hearing
	// notReplicated is set by the server's warning that a commit's wait
	// for its synchronous standby was cancelled (ErrNotReplicated).
	notReplicated atomic.Bool
}

func (c *boundDriverConn) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	c.notReplicated.Store(false)
	return context.WithTimeout(ctx, c.bound)
}

// replicated returns err, or ErrNotReplicated when err is nil and the
// server warned that the commit was not confirmed by its standby.
func (c *boundDriverConn) replicated(err error) error {
	if err == nil && c.notReplicated.Load() {
		return ErrNotReplicated
	}
	return err
}

func (c *boundDriverConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *boundDriverConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if c.pooled {
		return &unpreparedStmt{conn: c, query: query}, nil
	}
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	end := c.hear.begin(waiterOf(ctx))
	st, err := c.pq.PrepareContext(ctx, query)
	if end(err); err != nil {
		return nil, err
	}
	ps, ok := st.(pqStmt)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("postgres: the driver's statement (%T) lacks what the pool needs", st)
	}
	return &boundStmt{pq: ps, conn: c, query: query}, nil
}

func (c *boundDriverConn) Close() error { return c.pq.Close() }

func (c *boundDriverConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction on ctx as it is: lib/pq watches it until
// the transaction ends, and each statement in it has its own deadline.
func (c *boundDriverConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	end := c.hear.begin(waiterOf(ctx))
	tx, err := c.pq.BeginTx(ctx, opts)
	if end(err); err != nil {
		return nil, err
	}
	return &boundTx{pq: tx, conn: c}, nil
}

func (c *boundDriverConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ctx, done := traceStatement(ctx, query)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	end := c.hear.begin(waiterOf(ctx))
	res, err := c.pq.ExecContext(ctx, query, args)
	end(err)
	err = c.replicated(err)
	if done(err); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *boundDriverConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ctx, done := traceStatement(ctx, query)
	ctx, cancel := c.bounded(ctx)
	end := c.hear.begin(waiterOf(ctx))
	rows, err := c.pq.QueryContext(ctx, query, args)
	end(err)
	done(err)
	return c.boundRowsOf(rows, err, cancel)
}

func (c *boundDriverConn) Ping(ctx context.Context) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	return c.pq.Ping(ctx)
}

func (c *boundDriverConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.pq.CheckNamedValue(nv)
}

func (c *boundDriverConn) ResetSession(ctx context.Context) error { return c.pq.ResetSession(ctx) }

func (c *boundDriverConn) IsValid() bool { return c.pq.IsValid() }

// boundTx is a transaction whose commit is an error when its standby did
// not confirm it (ErrNotReplicated).
type boundTx struct {
	pq   driver.Tx
	conn *boundDriverConn
}

func (t *boundTx) Commit() error {
	t.conn.notReplicated.Store(false)
	return t.conn.replicated(t.pq.Commit())
}

func (t *boundTx) Rollback() error { return t.pq.Rollback() }

// boundRows are rows read under their statement's deadline, which ends
// when they are closed. Their end, or their Close, is ErrNotReplicated
// when the server warned that their statement's commit was not confirmed
// by its standby.
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

func (c *boundDriverConn) boundRowsOf(rows driver.Rows, err error, cancel context.CancelFunc) (driver.Rows, error) {
	if err != nil {
		cancel()
		return nil, err
	}
	pr, ok := rows.(pqRows)
	if !ok {
		rows.Close()
		cancel()
		return nil, fmt.Errorf("postgres: the driver's rows (%T) lack what the pool needs", rows)
	}
	return &boundRows{pqRows: pr, conn: c, cancel: cancel}, nil
}

func (r *boundRows) Close() error {
	err := r.pqRows.Close()
	r.cancel()
	return r.conn.replicated(err)
}

// boundStmt is a statement prepared on the server whose every run has a
// deadline of its connection's bound.
type boundStmt struct {
	pq    pqStmt
	conn  *boundDriverConn
	query string // its text, which names its span (traceStatement)
}

func (s *boundStmt) Close() error  { return s.pq.Close() }
func (s *boundStmt) NumInput() int { return s.pq.NumInput() }

func (s *boundStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *boundStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

func (s *boundStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ctx, done := traceStatement(ctx, s.query)
	ctx, cancel := s.conn.bounded(ctx)
	defer cancel()
	end := s.conn.hear.begin(waiterOf(ctx))
	res, err := s.pq.ExecContext(ctx, args)
	end(err)
	err = s.conn.replicated(err)
	if done(err); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *boundStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ctx, done := traceStatement(ctx, s.query)
	ctx, cancel := s.conn.bounded(ctx)
	end := s.conn.hear.begin(waiterOf(ctx))
	rows, err := s.pq.QueryContext(ctx, args)
	end(err)
	done(err)
	return s.conn.boundRowsOf(rows, err, cancel)
}

// unpreparedStmt is a statement the code prepared on a pooled connection:
// nothing is prepared on the server; each run sends its text.
type unpreparedStmt struct {
	conn  *boundDriverConn
	query string
}

func (s *unpreparedStmt) Close() error  { return nil }
func (s *unpreparedStmt) NumInput() int { return -1 } // the server counts them

func (s *unpreparedStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), named(args))
}

func (s *unpreparedStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), named(args))
}

func (s *unpreparedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.ExecContext(ctx, s.query, args)
}

func (s *unpreparedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.conn.QueryContext(ctx, s.query, args)
}

func named(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// ErrNotReplicated is the error of a commit that its synchronous standby
// did not confirm before the statement's bound (or the caller's deadline)
// cancelled the wait: PostgreSQL keeps such a commit on the primary and
// reports it done with a warning only. A failover may lose it, so it is
// not acknowledged: the store answers it as unavailable.
var ErrNotReplicated = errors.New("postgres: the commit was not confirmed by a synchronous standby (it holds on the primary only)")
