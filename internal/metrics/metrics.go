// Package metrics exposes what an operator watches, in the Prometheus format:
// idempotency outcomes, request latency, in-progress claims and the sweeper.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// ClaimCounter reports the in-progress claims: their number, the claim time
// of the oldest, and the store's time.
type ClaimCounter interface {
	InProgress(ctx context.Context) (n int, oldest, now time.Time, err error)
}

// Metrics holds the collectors of one server.
type Metrics struct {
	reg      *prometheus.Registry
	outcomes *prometheus.CounterVec
	answered *prometheus.HistogramVec
	latency  *prometheus.HistogramVec
	swept    prometheus.Counter
}

// New registers the metrics, the Go runtime's and the process's, and reads
// in-progress claims from claims at each scrape.
func New(claims ClaimCounter, logger *slog.Logger) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "demo_api_idempotency_outcomes_total",
			Help: "What requests did with their idempotency key, by path (one_phase, two_phase): claimed, expired_taken_over, lease_taken_over, replayed, in_progress, mismatch, released, lease_lost, failed, rerun.",
		}, []string{"operation", "path", "outcome"}),
		answered: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "demo_api_client_attempt_answered",
			Help:    "The client's attempt number (X-Client-Attempt) at which an intent got its definite answer.",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20},
		}, []string{"operation"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "demo_api_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "status"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "demo_api_sweeper_deleted_total",
			Help: "Expired idempotency records the sweeper deleted.",
		}),
	}
	m.reg.MustRegister(m.outcomes, m.answered, m.latency, m.swept, &claimCollector{claims: claims, logger: logger},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Outcome counts one idempotency outcome.
func (m *Metrics) Outcome(operation string, p idempotency.Path, o idempotency.Outcome) {
	m.outcomes.WithLabelValues(operation, string(p), string(o)).Inc()
}

// Answered observes the client's attempt number n at which an intent got
// its definite answer.
func (m *Metrics) Answered(operation string, n int) {
	m.answered.WithLabelValues(operation).Observe(float64(n))
}

// Request observes one request; status is its code, or "dropped" when no
// answer was sent.
func (m *Metrics) Request(route, status string, d time.Duration) {
	m.latency.WithLabelValues(route, status).Observe(d.Seconds())
}

// Swept counts records the sweeper deleted.
func (m *Metrics) Swept(n int64) { m.swept.Add(float64(n)) }

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// claimCollector reads the in-progress claims from the database at scrape time.
type claimCollector struct {
	claims ClaimCounter
	logger *slog.Logger
}

var (
	inProgressDesc = prometheus.NewDesc("demo_api_idempotency_in_progress_claims",
		"Claims in progress, including those whose owner died and whose lease passed.", nil, nil)
	oldestDesc = prometheus.NewDesc("demo_api_idempotency_oldest_in_progress_seconds",
		"Age of the oldest claim in progress (0 when there is none).", nil, nil)
)

func (c *claimCollector) Describe(ch chan<- *prometheus.Desc) { ch <- inProgressDesc; ch <- oldestDesc }

func (c *claimCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, oldest, now, err := c.claims.InProgress(ctx)
	if err != nil {
		c.logger.Error("collect in-progress claims", "err", err)
		ch <- prometheus.NewInvalidMetric(inProgressDesc, err)
		return
	}
	age := 0.0
	if n > 0 {
		age = max(now.Sub(oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(inProgressDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
}
