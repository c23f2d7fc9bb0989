package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/idempotency"
	"github.com/demo-api/demo-api/internal/postgres"
)

// floorResult is a loop of one kind of SQL work, straight from Go through
// the store (no HTTP): what the database alone allows.
type floorResult struct {
	name      string
	conc      int
	syncOff   bool
	ops       int
	rps       float64
	p50, p99  time.Duration
	errors    int
	firstErr  string
	perOpNote string
}

// floorDB is what a floor loop runs its statements on: the store, and the
// baseline's prepared INSERT, both on one postgres.Open pool.
type floorDB struct {
	store  *postgres.Store
	insert *sqlx.Stmt // baselineInsertSQL
}

// floorWork is one operation of a floor loop.
type floorWork struct {
	name string
	note string
	op   func(ctx context.Context, db floorDB, seq int64) error
}

// floorWorks are the statements a create, a replay and the baseline run.
func floorWorks() []floorWork {
	const lease, ttl = 30 * time.Second, 24 * time.Hour
	in := demo.CreateInput{Topic: "bench-floor", Note: "a demo request filed by the load generator"}
	fp, _ := idempotency.Fingerprint(in.Significant())
	tag := randHex(4)
	scope := func(seq int64) idempotency.Scope {
		return idempotency.Scope{Actor: "floor", Operation: "demo-requests.create", Key: fmt.Sprintf("floor-%s-%d", tag, seq)}
	}
	var mu sync.Mutex
	var completed []int64 // the keys "claim + finish" completed
	return []floorWork{
		{"claim (new key)", "the claim statement alone: one durable commit", func(ctx context.Context, db floorDB, seq int64) error {
			_, err := db.store.Claim(ctx, idempotency.Claim{Scope: scope(-seq), Token: uuid.NewString()}, fp, lease, ttl)
			return err
		}},
		{"claim + finish", "a create's SQL on the two-phase path: the claim, then the finish with the business row (two durable commits)", func(ctx context.Context, db floorDB, seq int64) error {
			c := idempotency.Claim{Scope: scope(seq), Token: uuid.NewString()}
			cr, err := db.store.Claim(ctx, c, fp, lease, ttl)
			if err != nil {
				return err
			}
			if !cr.Wrote {
				return fmt.Errorf("key %d not claimed", seq)
			}
			r := demo.Request{ID: uuid.NewString(), Actor: "floor", State: demo.StateAccepted, Topic: in.Topic, Note: in.Note, CreatedAt: cr.Now}
			body, _ := json.Marshal(r)
			resp := idempotency.Response{Status: http.StatusCreated, Body: body, ResultID: r.ID,
				Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/demo-requests/" + r.ID}}
			if err := db.store.FinishClaimAtomically(ctx, c, idempotency.Answer{Response: resp, Effect: db.store.CreateDemoRequest(r)}); err != nil {
				return err
			}
			mu.Lock()
			completed = append(completed, seq)
			mu.Unlock()
			return nil
		}},
		{"replay claim", "the claim statement on a completed key (what a replay runs)", func(ctx context.Context, db floorDB, seq int64) error {
			mu.Lock()
			n := int64(len(completed))
			var key int64
			if n > 0 {
				key = completed[seq%n]
			}
			mu.Unlock()
			if n == 0 {
				return fmt.Errorf("no completed key to replay")
			}
			cr, err := db.store.Claim(ctx, idempotency.Claim{Scope: scope(key), Token: uuid.NewString()}, fp, lease, ttl)
			if err == nil && (cr.Wrote || cr.Prev == nil || cr.Prev.State != idempotency.StateCompleted) {
				err = fmt.Errorf("replay claim of key %d: not a completed record", key)
			}
			return err
		}},
		{"one-phase create", "a create's SQL on the one-phase path: the key born completed and the business row, one statement, one durable commit", func(ctx context.Context, db floorDB, seq int64) error {
			r := demo.Request{ID: uuid.NewString(), Actor: "floor", State: demo.StateAccepted, Topic: in.Topic, Note: in.Note, CreatedAt: time.Now().UTC()}
			body, _ := json.Marshal(r)
			resp := idempotency.Response{Status: http.StatusCreated, Body: body, ResultID: r.ID,
				Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/demo-requests/" + r.ID}}
			cr, err := db.store.CompleteAtomically(ctx, idempotency.Claim{Scope: scope(1<<40 + seq), Token: uuid.NewString()}, fp, ttl, idempotency.Answer{Response: resp, Effect: db.store.CreateDemoRequest(r)})
			if err == nil && !cr.Wrote {
				err = fmt.Errorf("one-phase key %d not written", seq)
			}
			return err
		}},
		{"plain insert", "the baseline's SQL: one INSERT, one durable commit", func(ctx context.Context, db floorDB, seq int64) error {
			_, err := db.insert.ExecContext(ctx, uuid.NewString(), "floor", demo.StateAccepted, "bench-floor", in.Note, time.Now())
			return err
		}},
	}
}

// runFloor runs work at conc goroutines for d.
func runFloor(ctx context.Context, db floorDB, w floorWork, conc int, d time.Duration, seq *atomic.Int64) floorResult {
	res := floorResult{name: w.name, conc: conc, perOpNote: w.note}
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			var mine []time.Duration
			errs, first := 0, ""
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				err := w.op(ctx, db, seq.Add(1))
				mine = append(mine, time.Since(t0))
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			res.errors += errs
			if res.firstErr == "" {
				res.firstErr = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	lr := loadResult{latencies: lat}
	res.ops = len(lat)
	res.rps = float64(len(lat)) / elapsed.Seconds()
	res.p50, res.p99 = lr.quantile(0.5), lr.quantile(0.99)
	return res
}
