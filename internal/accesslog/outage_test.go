package accesslog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAnOutageIsAFewLines: 200 503s of one cause are three lines at WARN:
// the first at once, then how many in the interval after it, then the
// total once an interval passes without one; another cause has lines of its own.
func TestAnOutageIsAFewLines(t *testing.T) {
	var buf syncBuffer
	o := newOutage(slog.New(slog.NewTextHandler(&buf, nil)), 200*time.Millisecond)
	down := errors.New("dial tcp: connection refused")
	for range 200 {
		o.answered(context.Background(), "the database is unavailable", down)
	}
	o.answered(context.Background(), "the desk is unavailable", down)
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

// syncBuffer is a bytes.Buffer that several goroutines may write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
