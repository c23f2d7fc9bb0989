package main

import (
	"cmp"
	"context"
	"crypto/md5"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
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
	progress func(rows int, took time.Duration)
}

// to adds rows until the table holds n of them (n ≤ total), a chunk per
// statement.
func (f *fill) to(ctx context.Context, n int) error {
	began := time.Now()
	for f.rows < n {
		end := min(f.rows+cmp.Or(f.chunk, fillChunk), n)
		if err := f.insert(ctx, end); err != nil {
			return fmt.Errorf("fill rows %d to %d: %w", f.rows, end, err)
		}
		f.rows = end
		f.ends = append(f.ends, end)
		if f.progress != nil {
			f.progress(f.rows, time.Since(began))
		}
	}
	return nil
}

// insert adds rows f.rows … end-1 in one transaction, with the memory to
// sort their keys.
func (f *fill) insert(ctx context.Context, end int) error {
	tx, err := f.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SET LOCAL work_mem = '128MB'`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, fillSQL, f.seed, f.rows, end, f.total,
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
