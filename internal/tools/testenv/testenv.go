// Package testenv runs the service in tests, in-process (server.go) or as
// its binary (process.go), beside a review desk double (deskdouble.go).
package testenv

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// Clock is a clock a test moves instead of sleeping, in Unix nanoseconds.
type Clock struct{ ns atomic.Int64 }

// NewClock is a clock at the current second.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Now().Truncate(time.Second).UnixNano())
	return c
}

func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Count runs a query that returns one number, failing the test on error.
func Count(t testing.TB, db *sqlx.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Get(&n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Rows counts the demo requests of db.
func Rows(t testing.TB, db *sqlx.DB) int { return Count(t, db, `SELECT count(*) FROM demo_requests`) }

// Eventually reports whether cond becomes true within timeout.
func Eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// PostCreate sends a create with Send.
func PostCreate(ctx context.Context, baseURL, token, key, body string, header ...string) (*http.Response, []byte, error) {
	return Send(ctx, http.MethodPost, baseURL+"/v1/demo-requests", token, key, body, header...)
}

// Send sends method to url with the token, key (if any), body and headers
// as name, value pairs.
func Send(ctx context.Context, method, url, token, key, body string, header ...string) (*http.Response, []byte, error) {
	rq := Req{Method: method, Token: token, Body: body, Header: map[string]string{}}
	if key != "" {
		rq.Keys = []string{key}
	}
	for i := 0; i+1 < len(header); i += 2 {
		rq.Header[header[i]] = header[i+1]
	}
	return send(ctx, http.DefaultClient, url, rq)
}

// Req is one request to send once: with no GetBody, it is never resent.
type Req struct {
	Method, Path, Token, Body string // Method: POST if empty
	Header                    map[string]string
	Keys                      []string // Idempotency-Key values, each a header line
}

// send sends rq to baseURL+rq.Path with c and reads the answer.
func send(ctx context.Context, c *http.Client, baseURL string, rq Req) (*http.Response, []byte, error) {
	r, err := http.NewRequestWithContext(ctx, cmp.Or(rq.Method, http.MethodPost), baseURL+rq.Path, io.NopCloser(strings.NewReader(rq.Body)))
	if err != nil {
		return nil, nil, err
	}
	r.ContentLength = int64(len(rq.Body))
	if rq.Token != "" {
		r.Header.Set("Authorization", "Bearer "+rq.Token)
	}
	if rq.Body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for _, k := range rq.Keys {
		r.Header.Add("Idempotency-Key", k)
	}
	for k, v := range rq.Header {
		r.Header.Set(k, v)
	}
	resp, err := c.Do(r)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// Buffer collects what a server writes (its log) while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CheckRetrySchedule fails t unless attempts to a server that never
// answered keep api/client's retry rule for a budget from start to deadline.
func CheckRetrySchedule(t testing.TB, arrived []time.Time, start, deadline time.Time) {
	t.Helper()
	var times []string
	lastSecond := 0
	for i, at := range arrived {
		times = append(times, at.Sub(start).Round(time.Millisecond).String())
		left := deadline.Sub(at)
		if left <= time.Second {
			lastSecond++
		}
		if left < 250*time.Millisecond {
			t.Errorf("attempt %d started with %v of the budget left, under 250ms", i+1, left)
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

// Context ends with the test or a little before go test's -timeout, so that
// a wait fails with the test's own message.
func Context(t *testing.T) context.Context {
	ctx := t.Context()
	d, ok := t.Deadline()
	if !ok {
		return ctx
	}
	ctx, cancel := context.WithDeadline(ctx, d.Add(-min(30*time.Second, time.Until(d)/10)))
	t.Cleanup(cancel)
	return ctx
}

// Long skips t under -short, saying why.
func Long(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// WarmPool opens n idle connections in db's pool one at a time, retrying
// twice: opened at once on a busy laptop, they could outlast the read bound.
func WarmPool(t testing.TB, db *sqlx.DB, n int) {
	t.Helper()
	conns := make([]*sqlx.Conn, 0, n)
	for failed := 0; len(conns) < n; {
		c, err := db.Connx(context.Background()) // a connection, started
		if err == nil {
			conns = append(conns, c)
		} else if failed++; failed > 2 {
			t.Fatalf("warming the pool: %v", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if idle := db.Stats().Idle; idle < n {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}

// CheckLinks fails t unless each relative link of the Markdown pages names
// a file there, and each #anchor a heading of its page.
func CheckLinks(t *testing.T, pages ...string) {
	t.Helper()
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	drop := regexp.MustCompile("[^a-z0-9 _-]")
	anchors := func(path string) map[string]bool {
		m := map[string]bool{}
		for line := range strings.SplitSeq(read(path), "\n") {
			if h, ok := strings.CutPrefix(line, "#"); ok {
				h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
				m[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
			}
		}
		return m
	}
	for _, page := range pages {
		for _, m := range regexp.MustCompile(`\]\(([^)\s]+)\)`).FindAllStringSubmatch(read(page), -1) {
			if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(m[1], "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which is not there", page, m[1])
			} else if anchor != "" && !anchors(path)[anchor] {
				t.Errorf("%s links to %s, a heading that is not there", page, m[1])
			}
		}
	}
}
