// Package testkit holds the small pieces the test suites share: a clock a
// test moves, a row count, waiting for a condition, and posting a create.
// Only tests import it.
package testenv

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// Clock is a clock a test moves instead of sleeping. The store reads it
// in place of the database clock (postgres.Store.Clock = c.Now).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at the current second.
func NewClock() *Clock { return &Clock{now: time.Now().UTC().Truncate(time.Second)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Count runs a query that returns one number, failing the test on error.
func Count(t testing.TB, db *sqlx.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Get(&n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Eventually reports whether cond becomes true within timeout, asking every
// few milliseconds. A server logs a request after it answered it, so a test
// that has its answer may still wait for the log.
func Eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// PostCreate sends a create to baseURL with the bearer token, the key (none
// if empty), the JSON body and extra headers given as name, value pairs.
func PostCreate(ctx context.Context, baseURL, token, key, body string, header ...string) (*http.Response, []byte, error) {
	return Send(ctx, http.MethodPost, baseURL+"/v1/demo-requests", token, key, body, append([]string{"Content-Type", "application/json"}, header...)...)
}

// Send sends method to url with the bearer token, the key (none if empty),
// the body and extra headers given as name, value pairs, and reads the
// answer. It is sent once: the transport does not resend a keyed request
// on its own when a reused connection closes without an answer, so a test
// sees each attempt it makes, and only those.
func Send(ctx context.Context, method, url, token, key, body string, header ...string) (*http.Response, []byte, error) {
	r, err := http.NewRequestWithContext(ctx, method, url, io.NopCloser(strings.NewReader(body)))
	if err != nil {
		return nil, nil, err
	}
	r.GetBody = nil
	r.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// Buffer collects what a server writes (its log, say) while a test reads
// it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CheckRetrySchedule fails t unless the attempts that arrived at a server
// that never answered, the first of them at start, keep the clients' retry
// rule for a budget ending at deadline (api/client and the page's
// client.js alike): each wait at least the backoff's floor (half its
// interval: 100 ms doubling to 1 s), none with less than 250 ms of the
// budget left, and at most two attempts in its last second.
func CheckRetrySchedule(t testing.TB, arrived []time.Time, start, deadline time.Time) {
	t.Helper()
	const minAttempt = 250 * time.Millisecond
	var times []string
	lastSecond := 0
	for i, at := range arrived {
		times = append(times, at.Sub(start).Round(time.Millisecond).String())
		if deadline.Sub(at) <= time.Second {
			lastSecond++
		}
		if left := deadline.Sub(at); left < minAttempt {
			t.Errorf("attempt %d started with %v of the budget left, under %v", i+1, left, minAttempt)
		}
		if i > 0 {
			floor := min(100*time.Millisecond<<(i-1), time.Second) / 2
			if gap := at.Sub(arrived[i-1]); gap < floor {
				t.Errorf("attempt %d came %v after attempt %d, under the backoff's floor of %v", i+1, gap, i, floor)
			}
		}
	}
	t.Logf("%d attempts at %v; %d in the budget's last second", len(arrived), times, lastSecond)
	if lastSecond > 2 {
		t.Errorf("%d attempts in the budget's last second, want at most 2", lastSecond)
	}
}

// Context returns a context that ends when the test ends or a little before
// the test binary's deadline (go test -timeout), whichever comes first: a
// wait on it that would outlast the run fails the test with the test's own
// message, not the binary's panic that names no test.
func Context(t *testing.T) context.Context {
	ctx := t.Context()
	d, ok := t.Deadline()
	if !ok {
		return ctx
	}
	margin := min(30*time.Second, time.Until(d)/10)
	ctx, cancel := context.WithDeadline(ctx, d.Add(-margin))
	t.Cleanup(cancel)
	return ctx
}

// Long marks t as a test of the whole suite only (make test): under
// go test -short, the fast tier (make test-short), it is skipped, saying
// why. The contract's branches are no such test.
func Long(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// WarmPool opens n connections of db's pool, one at a time, and hands
// them back idle, for a test that floods the database: a pool that opens
// all its connections at once, on a busy laptop or through a slow link
// (docker-proxy), can see a start outlast the per-read bound and answer
// 503, which is the contract's answer to a database that does not answer,
// not what a flood test is about. A start that fails is tried again, twice.
func WarmPool(t testing.TB, db *sqlx.DB, n int) {
	t.Helper()
	conns := make([]*sqlx.Conn, 0, n)
	for failed := 0; len(conns) < n; {
		c, err := db.Connx(context.Background())
		if err == nil {
			if err = c.PingContext(context.Background()); err != nil {
				c.Close()
			}
		}
		if err != nil {
			if failed++; failed > 2 {
				t.Fatalf("warming the pool: %v", err)
			}
			continue
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	if idle := db.Stats().Idle; idle < n {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}
