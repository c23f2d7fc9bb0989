// Package metrics exposes what an operator watches, in the Prometheus format
// (docs/observability.md lists it).
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/demo-api/demo-api/internal/idempotency"
)

// ClaimCounter reports the claims in progress, the oldest's claim time, and now.
type ClaimCounter interface {
	InProgress(ctx context.Context) (n int, oldest, now time.Time, err error)
}

// Metrics holds the collectors of one server.
type Metrics struct {
	reg               *prometheus.Registry
	outcomes          *prometheus.CounterVec
	answered, latency *prometheus.HistogramVec
	swept             prometheus.Counter
	waits             prometheus.Gauge
	waitsOn           sync.Once // registers waits at its first reading
}

// New registers the metrics, the Go runtime's and the process's.
func New(claims ClaimCounter, logger *slog.Logger) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "demo_api_idempotency_outcomes_total",
			Help: "What requests did with their idempotency key, by path: completed (one phase), claimed (two phase), expired_taken_over, lease_taken_over, replayed, in_progress, mismatch, released, lease_lost, failed, rerun, rate_limited (a new key over the actor's bound: nothing stored).",
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
		waits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "demo_api_commit_waits_for_standby",
			Help: "1 when a commit waits for a synchronous standby before it is acknowledged, 0 when it does not (asynchronous: a failover can lose acknowledged keys); absent until read.",
		}),
	}
	claimGauges := newDBCollector("idempotency_claims", logger, func(ctx context.Context) ([]float64, error) {
		n, oldest, now, err := claims.InProgress(ctx)
		oldestAge := 0.0
		if n > 0 {
			oldestAge = max(now.Sub(oldest).Seconds(), 0)
		}
		return []float64{float64(n), oldestAge}, err
	}, prometheus.NewDesc("demo_api_idempotency_in_progress_claims",
		"Claims in progress, including those whose owner died and whose lease passed.", nil, nil),
		prometheus.NewDesc("demo_api_idempotency_oldest_in_progress_seconds",
			"Age of the oldest claim in progress (0 when there is none).", nil, nil))
	m.reg.MustRegister(m.outcomes, m.answered, m.latency, m.swept, claimGauges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Outcome counts one idempotency outcome.
func (m *Metrics) Outcome(operation string, p idempotency.Path, o idempotency.Outcome) {
	m.outcomes.WithLabelValues(operation, string(p), string(o)).Inc()
}

// Answered observes the attempt n at which an intent got its definite answer.
func (m *Metrics) Answered(operation string, n int) {
	m.answered.WithLabelValues(operation).Observe(float64(n))
}

// Request observes one request; status is its code, or why there is none.
func (m *Metrics) Request(route, status string, d time.Duration) {
	m.latency.WithLabelValues(route, status).Observe(d.Seconds())
}

// CommitWaits sets whether a commit waits for a synchronous standby.
func (m *Metrics) CommitWaits(waits bool) {
	m.waitsOn.Do(func() { m.reg.MustRegister(m.waits) })
	v := 0.0
	if waits {
		v = 1
	}
	m.waits.Set(v)
}

// Swept counts records the sweeper deleted.
func (m *Metrics) Swept(n int64) { m.swept.Add(float64(n)) }

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// dbCollector serves gauges read from the database at scrape time, or after
// readTimeout the last good values. One read runs at a time: in a partition
// lib/pq waits past its deadline.
type dbCollector struct {
	name      string
	logger    *slog.Logger
	read      func(context.Context) ([]float64, error) // one value per gauge, in order
	gauges    []*prometheus.Desc
	errs, age *prometheus.Desc

	mu       sync.Mutex
	value    []float64
	readAt   time.Time     // of value; zero until a read succeeds
	failed   int           // scrapes that got no fresh value
	inFlight chan struct{} // closed when the read in flight returns; nil when none runs
	deadline time.Time     // of the read in flight
	err      error         // of the last read that returned
}

// readTimeout is how long a scrape waits for a database read.
const readTimeout = time.Second

func newDBCollector(name string, logger *slog.Logger, read func(context.Context) ([]float64, error), gauges ...*prometheus.Desc) *dbCollector {
	labels := prometheus.Labels{"collector": name}
	return &dbCollector{name: name, logger: logger, read: read, gauges: gauges,
		errs: prometheus.NewDesc("demo_api_metrics_collect_errors_total",
			"Scrapes at which a collector could not read the database in time and served its last good values.", nil, labels),
		age: prometheus.NewDesc("demo_api_metrics_read_age_seconds",
			"Seconds since a collector last read its values from the database: how old the values it serves are.", nil, labels)}
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append(c.gauges, c.errs, c.age) {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.inFlight == nil {
		c.inFlight, c.deadline = make(chan struct{}), time.Now().Add(readTimeout)
		go c.readOnce(c.inFlight)
	}
	done, wait := c.inFlight, time.Until(c.deadline)
	c.mu.Unlock()
	select {
	case <-done:
	case <-time.After(max(wait, 0)):
	}
	c.mu.Lock()
	err := c.err
	if c.inFlight == done { // still reading
		err = fmt.Errorf("the database did not answer within %v", readTimeout)
	}
	if err != nil {
		c.failed++
	}
	value, readAt, failed := c.value, c.readAt, c.failed
	c.mu.Unlock()
	if err != nil {
		c.logger.Error("collect metrics from the database", "collector", c.name, "err", err, "last_good_read_at", readAt)
	}
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(failed))
	if readAt.IsZero() {
		return // never read: no value rather than a made-up 0
	}
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, time.Since(readAt).Seconds())
	for i, v := range value {
		ch <- prometheus.MustNewConstMetric(c.gauges[i], prometheus.GaugeValue, v)
	}
}

// readOnce reads once and keeps what it read, if it could.
func (c *dbCollector) readOnce(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	v, err := c.read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.value, c.readAt = v, time.Now()
	}
	c.err, c.inFlight = err, nil
	close(done)
}
