package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BacklogCounter reports the pending deliveries and the longest one's wait.
type BacklogCounter interface {
	Backlog(ctx context.Context) (n int, oldestDue time.Duration, err error)
}

// Outbox holds the dispatcher's metrics; it implements delivery.Metrics.
type Outbox struct {
	delivered *prometheus.CounterVec
	attempts  prometheus.Histogram
	lookups   *prometheus.CounterVec
	calls     *prometheus.CounterVec
}

// Outbox registers the dispatcher's metrics. Call it once.
func (m *Metrics) Outbox(backlog BacklogCounter, logger *slog.Logger) *Outbox {
	o := &Outbox{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "demo_api_outbox_marks_total",
			Help: "Attempts to hand a demo request to the review desk, by the state they left it in: submitted, failed, unknown, or pending (to retry).",
		}, []string{"state"}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "demo_api_outbox_attempts_per_delivery",
			Help:    "Attempts a delivery took to end submitted, failed or unknown.",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15},
		}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "demo_api_outbox_status_lookups_total",
			Help: "Status lookups at the review desk before a resend, by its answer: accepted (no resend), not_found (sent again), unclear.",
		}, []string{"answer"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "demo_api_outbox_provider_calls_total",
			Help: "Calls to the review desk, by call: the kind of event it sends (submit, cancel, or a service's own), or that kind and _status for a lookup before a resend.",
		}, []string{"call"}),
	}
	// Every label value is exported from the start, at 0: a rate over a
	// series that appears at its first event misses that event.
	for vec, values := range map[*prometheus.CounterVec][]string{
		o.delivered: {"submitted", "failed", "unknown", "pending"},
		o.lookups:   {"accepted", "not_found", "unclear"},
		o.calls:     {"submit", "submit_status", "cancel", "cancel_status"},
	} {
		for _, v := range values {
			vec.WithLabelValues(v)
		}
	}
	backlogGauges := newDBCollector("outbox_backlog", logger, func(ctx context.Context) ([]float64, error) {
		n, oldestDue, err := backlog.Backlog(ctx)
		return []float64{float64(n), oldestDue.Seconds()}, err
	}, prometheus.NewDesc("demo_api_outbox_backlog", "Deliveries pending: due, taken by a dispatcher, or waiting for a retry.", nil, nil),
		prometheus.NewDesc("demo_api_outbox_oldest_due_seconds", "How long the delivery due longest has been due (0 when none is).", nil, nil))
	m.reg.MustRegister(o.delivered, o.attempts, o.lookups, o.calls, backlogGauges)
	return o
}

// Delivered counts a mark; a final one observes its attempts.
func (o *Outbox) Delivered(state string, attempts int) {
	o.delivered.WithLabelValues(state).Inc()
	if state != "pending" {
		o.attempts.Observe(float64(attempts))
	}
}

// LookedUp counts a status lookup before a resend.
func (o *Outbox) LookedUp(answer string) { o.lookups.WithLabelValues(answer).Inc() }

// Called counts a call to the desk.
func (o *Outbox) Called(op string) { o.calls.WithLabelValues(op).Inc() }
