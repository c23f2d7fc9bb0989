package postgres

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// The wait for a connection.
//
// database/sql makes a statement wait for a free connection until the
// statement's context ends: for a request, its work's deadline. While the
// database does not answer, every connection is held by a statement that
// waits out its bound, and the requests queued behind them would wait far
// longer than the 3 s in which a partition is answered 503. So each of the
// store's statements first takes a seat, one per connection of the pool
// (holding one, it never waits in database/sql), and waits for a seat only
// while the database answers: once no statement got an answer for
// poolWait, a waiting one is answered 503 with Retry-After (ErrPoolBusy),
// as an unavailable database is, and so is one whose seat came free only
// because its holder's statement failed. A busy pool whose statements
// still end, however slowly, keeps its waiters waiting.
const (
	// maxConns is how many connections a pool of Open keeps, and so its
	// seats.
	maxConns = 32
	// poolWait is how long the database may answer no statement before a
	// statement waiting for a seat gives up: less than a partition's bound
	// on a statement itself (ioLimit, 2.5 s), so that a request is
	// answered within 3 s, and more than a slow laptop's pause.
	poolWait = time.Second
)

// ErrPoolBusy is the error of a statement that found no connection free
// while the database answered none: answered 503, as Unavailable says.
var ErrPoolBusy = errors.New("postgres: no connection of the pool came free, and the database answers no statement")

// seats admits as many statements at once as the pool has connections.
// A nil *seats admits any number (a pool that Open did not make).
type seats struct {
	free     chan struct{} // a value for each seat taken
	answered atomic.Int64  // when a statement last got an answer, in Unix nanoseconds
}

func newSeats(n int) *seats {
	s := &seats{free: make(chan struct{}, n)}
	s.answered.Store(time.Now().UnixNano())
	return s
}

// take waits for a seat while the database answers (poolWait) and ctx
// lasts, and returns what gives it back with the statement's error.
func (s *seats) take(ctx context.Context) (leave func(error), err error) {
	if s == nil {
		return func(error) {}, nil
	}
	select {
	case s.free <- struct{}{}:
		return s.leave, nil
	default:
	}
	t := time.NewTimer(poolWait)
	defer t.Stop()
	for {
		select {
		case s.free <- struct{}{}:
			if s.silent() >= poolWait { // its holder failed: this one would wait out its bound too
				<-s.free
				return nil, ErrPoolBusy
			}
			return s.leave, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			silent := s.silent()
			if silent >= poolWait {
				return nil, ErrPoolBusy
			}
			t.Reset(poolWait - silent)
		}
	}
}

// silent is how long no statement got an answer.
func (s *seats) silent() time.Duration { return time.Since(time.Unix(0, s.answered.Load())) }

// leave gives a seat back; err is its statement's.
func (s *seats) leave(err error) {
	if err == nil || (!Unavailable(err) && !errors.Is(err, context.Canceled)) {
		s.answered.Store(time.Now().UnixNano())
	}
	<-s.free
}

// pool is the store's *sqlx.DB: its one-statement calls take a seat
// first. The store's other uses of it (queryRow, inTx, ping) take theirs
// themselves.
type pool struct {
	*sqlx.DB
	seats *seats
}

// poolOf returns db with the seats of its connector, when Open made it.
func poolOf(db *sqlx.DB) pool {
	p := pool{DB: db}
	if c, ok := db.Driver().(*boundConnector); ok {
		p.seats = c.seats
	}
	return p
}

func (p pool) ExecContext(ctx context.Context, query string, args ...any) (res sql.Result, err error) {
	leave, err := p.seats.take(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { leave(err) }()
	return p.DB.ExecContext(ctx, query, args...)
}

func (p pool) GetContext(ctx context.Context, dest any, query string, args ...any) (err error) {
	leave, err := p.seats.take(ctx)
	if err != nil {
		return err
	}
	defer func() { leave(err) }()
	return p.DB.GetContext(ctx, dest, query, args...)
}

func (p pool) SelectContext(ctx context.Context, dest any, query string, args ...any) (err error) {
	leave, err := p.seats.take(ctx)
	if err != nil {
		return err
	}
	defer func() { leave(err) }()
	return p.DB.SelectContext(ctx, dest, query, args...)
}
