package accesslog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// outageEvery is how often an outage's 503s are summed up in the log.
const outageEvery = 10 * time.Second

// outage logs the 503s answered for one cause (an unavailable database, say)
// at WARN: the first at once, then how many each interval while they go on,
// and the total once an interval passes without one. An outage of a minute
// is a few lines that say what failed and how often, not an ERROR a request.
type outage struct {
	logger *slog.Logger
	every  time.Duration

	mu     sync.Mutex
	causes map[string]*tally
}

// tally is one cause's 503s since its outage began.
type tally struct {
	start, latest time.Time
	total, recent int   // since the start, since the last line
	last          error // the latest, as an example
}

func newOutage(logger *slog.Logger, every time.Duration) *outage {
	return &outage{logger: logger, every: every, causes: map[string]*tally{}}
}

// answered notes a 503 for cause, err its error.
func (o *outage) answered(ctx context.Context, cause string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.causes[cause]; t != nil {
		t.total, t.recent, t.latest, t.last = t.total+1, t.recent+1, time.Now(), err
		return
	}
	o.causes[cause] = &tally{start: time.Now(), latest: time.Now(), total: 1}
	o.logger.WarnContext(ctx, "answering 503", "cause", cause, "err", err,
		"then", "how many every "+o.every.String()+" while it lasts")
	time.AfterFunc(o.every, func() { o.sum(cause) })
}

// sum logs cause's 503s of the last interval, or, when there were none, the outage's end.
func (o *outage) sum(cause string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.causes[cause]
	if t.recent == 0 {
		delete(o.causes, cause)
		o.logger.Warn("no more 503s", "cause", cause, "answered", t.total,
			"over", t.latest.Sub(t.start).Round(time.Millisecond))
		return
	}
	o.logger.Warn("still answering 503", "cause", cause, "answered", t.recent, "within", o.every, "err", t.last)
	t.recent = 0
	time.AfterFunc(o.every, func() { o.sum(cause) })
}
