package accesslog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/accesslog"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestAnOutageIsAFewLines: 200 503s of one cause are three lines at WARN:
// the first at once, then how many in the interval after it, then the
// total once an interval passes without one; another cause has lines of its own.
func TestAnOutageIsAFewLines(t *testing.T) {
	var buf testenv.Buffer
	answered := accesslog.NewOutage(slog.New(slog.NewTextHandler(&buf, nil)), 200*time.Millisecond)
	down := errors.New("dial tcp: connection refused")
	for range 200 {
		answered(context.Background(), "the database is unavailable", down)
	}
	answered(context.Background(), "the desk is unavailable", down)
	time.Sleep(700 * time.Millisecond)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	t.Logf("the log:\n%s", buf.String())
	want := []string{
		`level=WARN msg="answering 503" cause="the database is unavailable" err="dial tcp: connection refused"`,
		`level=WARN msg="answering 503" cause="the desk is unavailable"`,
		`level=WARN msg="still answering 503" cause="the database is unavailable" answered=199 within=200ms`,
		`level=WARN msg="no more 503s" cause="the desk is unavailable" answered=1`,
		`level=WARN msg="no more 503s" cause="the database is unavailable" answered=200`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.Contains(l, w)
		}
		if !found {
			t.Errorf("no line says %s", w)
		}
	}
}
