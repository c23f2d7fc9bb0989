package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/demo-api/demo-api/api/client"
	"github.com/demo-api/demo-api/internal/tools/faultproxy"
)

// The sweeper scenario: keys the demo's trigger keeps (keep_unfinished_runs:
// the key of an unfinished run) expire first, a batch's worth of them,
// beside many expired keys; the replicas sweep every second in small
// batches. Each sweep must go on past the kept keys and delete the others.
const (
	sweepActor    = "chaos-sweep"
	sweepBatch    = 10
	sweepExpired  = 500
	sweepInterval = time.Second
)

// The partition scenario: both links hold every byte while ten times a
// pool's connections (32) of creates are in flight on each replica.
const (
	burstPerReplica = 10 * 32
	burstHold       = time.Second // after the burst's answers, before the heal
)

func init() {
	scenarios = append(scenarios,
		scenario{name: "sweeper-kept-keys",
			what: fmt.Sprintf("both replicas restarted to sweep every %v in batches of %d; %d keys that the demo keeps (unfinished runs) expired first, beside %d expired keys: each sweep passes over the kept ones and deletes the others",
				sweepInterval, sweepBatch, sweepBatch, sweepExpired),
			hold: 4 * sweepInterval, prepare: keptKeys, inject: nothing, heal: nothing, judge: judgeSweep},
		scenario{name: "partition-ten-times-pool",
			what: fmt.Sprintf("both links hold every byte while %d creates (ten times the pool) are in flight on each replica: each is answered 503 with Retry-After, within 3 s on the one-phase replica and 5 s on the two-phase one (its release goes on in the background)", burstPerReplica),
			hold: burstHold, inject: partitionBurst, heal: links(faultproxy.Up), judge: judgeBurst},
	)
}

// keptKeys restarts both replicas with a short sweep, and writes the kept
// and the expired keys; its restore lets the kept keys go and restarts the
// replicas as the campaign runs them.
func keptKeys(ctx context.Context, e *env) (func() error, error) {
	old := [2][]string{}
	restore := func() error {
		_, err := e.db.ExecContext(context.WithoutCancel(ctx), `DELETE FROM runs WHERE actor_id = $1`, sweepActor)
		errs := []error{err}
		if _, err := e.db.ExecContext(context.WithoutCancel(ctx), `DELETE FROM idempotency_keys WHERE actor_id = $1`, sweepActor); err != nil {
			errs = append(errs, err)
		}
		for i, r := range e.replicas {
			r.kill(syscall.SIGTERM)
			r.env = old[i]
			errs = append(errs, e.start(context.WithoutCancel(ctx), r.proc, "/readyz"))
		}
		return errors.Join(errs...)
	}
	// The kept keys: claims past their TTL and their lease, each with a
	// run that needs attention (not done, past its start): the trigger
	// keeps them, and the completer leaves them be.
	if _, err := e.db.ExecContext(ctx, `
WITH k AS (
    INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, lease_until, created_at, expires_at)
    SELECT $1, 'chaos.sweep', 'kept-' || i, 'fp', 'in_progress', gen_random_uuid(),
           now() - interval '2 days', now() - interval '3 days', now() - interval '2 days'
    FROM generate_series(1, $2) i
    RETURNING actor_id, operation, idem_key
)
INSERT INTO runs (actor_id, operation, idem_key, input, point, state, refs, attempts, started_at, updated_at)
SELECT actor_id, operation, idem_key, '{}', 'slot', 'needs_attention', '{}', 1, now() - interval '3 days', now() - interval '3 days'
FROM k`, sweepActor, sweepBatch); err != nil {
		return nil, fmt.Errorf("write the kept keys: %w", err)
	}
	if _, err := e.db.ExecContext(ctx, `
INSERT INTO idempotency_keys (actor_id, operation, idem_key, fingerprint, state, claim_token, status_code, response_body, created_at, completed_at, expires_at)
SELECT $1, 'chaos.sweep', 'expired-' || i, 'fp', 'completed', gen_random_uuid(), 201, '{}',
       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day' + i * interval '1 millisecond'
FROM generate_series(1, $2) i`, sweepActor, sweepExpired); err != nil {
		return nil, errors.Join(fmt.Errorf("write the expired keys: %w", err), restore())
	}
	for i, r := range e.replicas {
		old[i] = r.env
		r.kill(syscall.SIGTERM)
		r.env = withEnv(r.env, "SWEEP_INTERVAL="+sweepInterval.String(), "SWEEP_BATCH="+strconv.Itoa(sweepBatch))
		if err := e.start(ctx, r.proc, "/readyz"); err != nil {
			return nil, errors.Join(err, restore())
		}
	}
	return restore, nil
}

// judgeSweep checks that the sweeps deleted every expired key of the
// scenario, and kept the kept ones.
func judgeSweep(e *env, res *result) {
	var left struct {
		Kept    int `db:"kept"`
		Expired int `db:"expired"`
	}
	if err := e.db.Get(&left, `SELECT count(*) FILTER (WHERE idem_key LIKE 'kept-%') AS kept,
		count(*) FILTER (WHERE idem_key LIKE 'expired-%') AS expired FROM idempotency_keys WHERE actor_id = $1`, sweepActor); err != nil {
		res.fail("sweeper: count the keys left: %v", err)
		return
	}
	e.logf("sweeper-kept-keys: after %v, %d of %d kept keys and %d of %d expired keys are left", 4*sweepInterval, left.Kept, sweepBatch, left.Expired, sweepExpired)
	if left.Expired != 0 {
		res.fail("sweeper: %d of %d expired keys left after %v of sweeps every %v beside %d kept keys", left.Expired, sweepExpired, 4*sweepInterval, sweepInterval, sweepBatch)
	}
	if left.Kept != sweepBatch {
		res.fail("sweeper: %d of the %d keys of unfinished runs left: the trigger keeps them all", left.Kept, sweepBatch)
	}
}

// burstAnswer is one create of the burst: its status (0: none), its
// Retry-After, and how long it took.
type burstAnswer struct {
	status     int
	retryAfter string
	took       time.Duration
}

// partitionBurst blackholes both links, then sends the burst to both
// replicas at once, each create its own key of the flooder, and keeps the
// answers for judgeBurst.
func partitionBurst(ctx context.Context, e *env) error {
	links(faultproxy.Blackhole)(ctx, e)
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var answers [2][burstPerReplica]burstAnswer
	var wg sync.WaitGroup
	start := make(chan struct{})
	for r := range e.replicas {
		for n := range burstPerReplica {
			wg.Go(func() {
				it, _ := client.NewIntent(client.CreateInput{Topic: "chaos partition burst", Note: strconv.Itoa(n)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.replicas[r].url+"/v1/demo-requests", bytes.NewReader(it.Body))
				req.Header.Set("Authorization", "Bearer "+floodToken)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", it.Key)
				<-start
				t0 := time.Now()
				resp, err := hc.Do(req)
				a := burstAnswer{took: time.Since(t0)}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					a.status, a.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
				}
				answers[r][n] = a
			})
		}
	}
	close(start)
	wg.Wait()
	e.burst = &answers
	return nil
}

// judgeBurst checks that every create of the burst was answered 503 with
// Retry-After within its replica's bound.
func judgeBurst(e *env, res *result) {
	if e.burst == nil {
		res.fail("partition: the burst was not sent")
		return
	}
	defer func() { e.burst = nil }()
	for r, answers := range e.burst {
		within := 3 * time.Second
		if paths[r] == "two_phase" {
			within = 5 * time.Second
		}
		counts := map[int]int{}
		var took []time.Duration
		bad := 0
		for _, a := range answers {
			counts[a.status]++
			took = append(took, a.took)
			if a.status != http.StatusServiceUnavailable || a.retryAfter == "" || a.took > within {
				bad++
			}
		}
		slices.Sort(took)
		e.logf("partition-ten-times-pool: replica %d (%s): %d creates in flight: %v; median %v, slowest %v",
			r+1, paths[r], len(answers), counts, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		if bad > 0 {
			res.fail("partition: replica %d (%s): %d of %d creates not answered 503 with Retry-After within %v (answers %v, slowest %v)",
				r+1, paths[r], bad, len(answers), within, counts, took[len(took)-1].Round(time.Millisecond))
		}
	}
}
