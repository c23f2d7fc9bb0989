package main

import (
	"cmp"
	"context"
	"crypto/md5"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// fillSQL adds numbered copies of a real completed key to the key table.
//
//go:embed scale_fill.sql
var fillSQL string

// fillChunk is how many rows one fill statement adds: each is a
// transaction of its own, so a fill shows its progress and stops on Ctrl-C
// within one chunk.
const fillChunk = 500_000

// fillers is how many fill statements run at once: the two cores of a
// small machine.
const fillers = 2

// scaleKey is the Idempotency-Key of row i of the fill with seed (as
// scale_fill.sql makes it): the md5 of "seed:i" as a version 4 UUID.
func scaleKey(seed string, i int) string {
	sum := md5.Sum([]byte(seed + ":" + strconv.Itoa(i)))
	h := []byte(hex.EncodeToString(sum[:]))
	h[12], h[16] = '4', '8'
	return string(h[0:8]) + "-" + string(h[8:12]) + "-" + string(h[12:16]) + "-" + string(h[16:20]) + "-" + string(h[20:32])
}

// keyTemplate is the real completed key a fill copies.
type keyTemplate struct{ actor, operation, key string }

// fill is the rows of one key table: the template they copy, how they
// are spread in time, and how many there are so far.
type fill struct {
	db       *sqlx.DB
	seed     string
	tpl      keyTemplate
	total    int           // rows of the largest fill: row total would be now
	ttl      time.Duration // the rows' TTL
	margin   time.Duration // how long before row 0 expires
	rows     int           // rows 0 … rows-1 were filled
	ends     []int         // the row after each statement's last, in order
	swept    int           // the oldest rows swept since
	chunk    int           // rows per statement (0: fillChunk)
	parallel int           // statements at a time (0: fillers)
	progress func(rows int, took time.Duration)
}

// to adds rows until the table holds n of them (n ≤ total), a chunk per
// statement, fillers statements at a time. The rows of one statement are
// created in a span of time of their own and written in that order; two
// statements side by side mostly write heap pages of their own, but a few
// pages of the same extension may hold rows of both.
func (f *fill) to(ctx context.Context, n int) error {
	began := time.Now()
	var spans [][2]int
	for start := f.rows; start < n; start += cmp.Or(f.chunk, fillChunk) {
		spans = append(spans, [2]int{start, min(start+cmp.Or(f.chunk, fillChunk), n)})
	}
	var (
		next atomic.Int64
		errs = make([]error, len(spans))
		wg   sync.WaitGroup
		mu   sync.Mutex // done, and the calls of progress
		done int
	)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range cmp.Or(f.parallel, fillers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(spans) && fctx.Err() == nil; i = int(next.Add(1) - 1) {
				sp := spans[i]
				if errs[i] = f.insert(fctx, sp[0], sp[1]); errs[i] != nil {
					errs[i] = fmt.Errorf("fill rows %d to %d: %w", sp[0], sp[1], errs[i])
					cancel()
					return
				}
				mu.Lock()
				done += sp[1] - sp[0]
				if f.progress != nil {
					f.progress(f.rows+done, time.Since(began))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, sp := range spans {
		f.ends = append(f.ends, sp[1])
	}
	f.rows = max(f.rows, n)
	return nil
}

// insert adds rows start … end-1 in one transaction, with the memory to
// sort their keys.
func (f *fill) insert(ctx context.Context, start, end int) error {
	tx, err := f.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL work_mem = '128MB'`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fillSQL, f.seed, start, end, f.total,
		f.ttl.Microseconds(), f.margin.Microseconds(), f.tpl.actor, f.tpl.operation, f.tpl.key); err != nil {
		return err
	}
	return tx.Commit()
}

// replayable is the first row a replay may name: a statement's rows are
// created in the order of their keys, not of their numbers, so the oldest
// rows swept are somewhere in the statements up to the one where the sweep
// stopped, and none after.
func (f *fill) replayable() int {
	if f.swept == 0 {
		return 0
	}
	for _, end := range f.ends {
		if end >= f.swept {
			return end
		}
	}
	return f.rows
}
