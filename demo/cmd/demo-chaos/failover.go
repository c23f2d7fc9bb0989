//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/demo-api/demo-api/demo/internal/tools/formation"
	"github.com/demo-api/demo-api/internal/postgres"
)

// The failover scenarios run the replicas on a pg_auto_failover formation
// (package formation: a monitor, a primary and a standby, started for
// the scenario) instead of the campaign's PostgreSQL, and crash its primary
// under the load: every process of the node at once, as a machine dies.
// The monitor promotes the standby; the replicas' DATABASE_URL is the
// formation's multi-host URL, as `pg_autoctl show uri` prints it, and
// their next connections find the new primary.
//
// Two nodes, not three: the acknowledgements at stake are the old
// primary's, made before the crash, and one synchronous standby is what
// keeps them; a third node would only keep the new primary synchronous
// after the failover, on a machine of two cores that the load already
// fills.
//
// Each scenario has its own formation and its own review desk (a fresh
// database on the campaign's PostgreSQL), so that its checks of the desk's
// account see only its own charges.
func init() {
	scenarios = append(scenarios,
		scenario{name: "failover-sync", what: "a pg_auto_failover formation (monitor, primary, standby) with its synchronous replication (synchronous_commit on, the standby in synchronous_standby_names): " +
			"its WAL sender paused 500ms (a slower link), then its primary crashed (SIGSTOP then SIGKILL of the keeper, the postmaster and every backend); the monitor promotes the standby",
			hold: failoverHold, after: failoverAfter, prepare: onFormation(true), inject: crashPrimary, heal: awaitPrimary, judge: judgeFailover},
		scenario{name: "failover-async", what: "the same with asynchronous replication (the standby's replication-quorum false: synchronous_standby_names ''): " +
			"acknowledged creates the standby had not received are lost, and counted",
			hold: failoverHold, after: failoverAfter, prepare: onFormation(false), inject: crashPrimary, heal: awaitPrimary, judge: judgeFailover,
			lossReported: true},
	)
}

// failoverHold is how long the load runs after the crash before the heal
// (which waits for the new primary if it is not there yet); failoverAfter
// how long it goes on after.
const (
	failoverHold  = 14 * time.Second
	failoverAfter = 4 * time.Second
)

// replicationLag is how long the primary's WAL sender is paused before it
// crashes: on one machine's loopback a standby is never more
// than microseconds behind, and across machines it is a network round trip
// or more; the pause stands for such a link (or a standby busy replaying).
// Synchronous replication's commits wait it out; asynchronous
// replication's are acknowledged, and the crash loses them.
const replicationLag = 500 * time.Millisecond

// failoverState is a failover scenario's formation and what happened to it.
type failoverState struct {
	f          *formation.Formation
	sync       bool
	syncNames  string // the primary's synchronous_standby_names before the crash
	old        *formation.Node
	killedAt   time.Time
	promoted   chan *formation.Node // the new primary, once the monitor has one
	promotedAt time.Time
	newPrimary *formation.Node
	watchErr   error
}

// onFormation starts a formation, synchronous or not, and a desk of its
// own, and moves the replicas and the checks onto both; the restore it
// returns moves them back and stops both.
func onFormation(sync bool) func(ctx context.Context, e *env) (func() error, error) {
	return func(ctx context.Context, e *env) (func() error, error) {
		e.logf("starting a pg_auto_failover formation (a monitor and two nodes)")
		start := time.Now()
		f, err := formation.Start(ctx, formation.Options{Nodes: 2, Database: "chaos", Monitor: formation.FastFailover,
			PartitionTimeout: 3 * time.Second, Settings: map[string]string{"max_connections": "300"}})
		if err != nil {
			return nil, fmt.Errorf("the formation (make chaos installs pg_autoctl: scripts/setup.sh pg_autoctl): %w", err)
		}
		fo := &failoverState{f: f, sync: sync, promoted: make(chan *formation.Node, 1)}
		deskDB := "chaos_desk_" + map[bool]string{true: "sync", false: "async"}[sync]
		var restores []func() error
		restore := func() error {
			var errs []error
			for _, r := range slices.Backward(restores) {
				errs = append(errs, r())
			}
			e.fo = nil
			return errors.Join(errs...)
		}
		fail := func(err error) (func() error, error) {
			return nil, errors.Join(err, restore())
		}
		restores = append(restores, func() error {
			for name, log := range f.Logs() { // kept with the processes' logs
				if b, err := os.ReadFile(log); err == nil {
					os.WriteFile(filepath.Join(e.tmp, fmt.Sprintf("formation-%s-%s.log", deskDB, name)), b, 0o644)
				}
			}
			return f.Stop()
		})
		if !sync {
			if err := f.SetReplicationQuorum(ctx, f.Nodes[1], false); err != nil {
				return fail(err)
			}
		}
		if fo.syncNames, err = f.SyncStandbyNames(ctx); err != nil {
			return fail(fmt.Errorf("the primary's synchronous_standby_names: %w", err))
		}
		e.logf("formation up in %s: %s; synchronous_standby_names %q", time.Since(start).Round(100*time.Millisecond), f.URL, fo.syncNames)

		// A desk of its own.
		admin, err := sqlx.Open("postgres", e.pg.URL("postgres"))
		if err != nil {
			return fail(err)
		}
		for _, q := range []string{"DROP DATABASE IF EXISTS " + deskDB + " WITH (FORCE)", "CREATE DATABASE " + deskDB} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				admin.Close()
				return fail(err)
			}
		}
		admin.Close()
		desk, err := e.startDesk(ctx, "desk-"+deskDB, e.pg.URL(deskDB))
		if err != nil {
			return fail(err)
		}
		oldDesk, oldDeskDB := e.desk, e.deskDB
		if e.deskDB, err = sqlx.Open("postgres", e.pg.URL(deskDB)); err != nil {
			desk.kill(syscall.SIGKILL)
			return fail(err)
		}
		e.desk = desk
		restores = append(restores, func() error {
			e.desk.kill(syscall.SIGKILL)
			e.deskDB.Close()
			e.desk, e.deskDB = oldDesk, oldDeskDB
			return nil
		})

		// The checks read the formation, through its URL: the primary.
		url := strings.Replace(f.URL, "postgres://", "postgres://postgres@", 1)
		dsn, err := postgres.ParseURL(url)
		if err != nil {
			return fail(err)
		}
		oldDB := e.db
		if e.db, err = sqlx.Open("postgres", dsn); err != nil {
			e.db = oldDB
			return fail(err)
		}
		restores = append(restores, func() error {
			e.db.Close()
			e.db = oldDB
			return nil
		})

		// The replicas, onto the formation and the desk.
		oldEnvs := [2][]string{}
		for i, r := range e.replicas {
			oldEnvs[i] = r.env
			r.kill(syscall.SIGTERM)
			r.env = withEnv(r.env, "DATABASE_URL="+url, "PROVIDER_URL="+e.desk.url)
		}
		restores = append(restores, func() error {
			var errs []error
			for i, r := range e.replicas {
				r.kill(syscall.SIGTERM)
				r.env = oldEnvs[i]
				errs = append(errs, e.start(context.WithoutCancel(ctx), r.proc, "/readyz"))
			}
			return errors.Join(errs...)
		})
		for _, r := range e.replicas {
			if err := e.start(ctx, r.proc, "/readyz"); err != nil {
				return fail(err)
			}
		}
		e.fo = fo
		return restore, nil
	}
}

// crashPrimary crashes the formation's primary, and watches the monitor
// for the node it promotes.
func crashPrimary(ctx context.Context, e *env) error {
	fo := e.fo
	old, err := fo.f.Primary(ctx)
	if err != nil || old == nil {
		return fmt.Errorf("no primary to crash (%v)", err)
	}
	fo.old = old
	resume, err := fo.f.PauseWALSenders(ctx, old)
	if err != nil {
		return err
	}
	defer resume() // matters only if the crash fails: a crashed node has no process left
	sleepCtx(ctx, replicationLag)
	if fo.killedAt, err = fo.f.Crash(old); err != nil {
		return fmt.Errorf("crash %s: %w", old.Name, err)
	}
	e.logf("crashed %s, the primary, %s after its WAL sender paused", old.Name, replicationLag)
	go func() {
		p, err := fo.f.WaitPrimary(context.WithoutCancel(ctx), old, 90*time.Second)
		fo.promotedAt, fo.watchErr = time.Now(), err
		fo.promoted <- p
	}()
	return nil
}

// awaitPrimary waits until the monitor has promoted a node.
func awaitPrimary(ctx context.Context, e *env) error {
	fo := e.fo
	select {
	case fo.newPrimary = <-fo.promoted:
	case <-ctx.Done():
		return ctx.Err()
	}
	if fo.watchErr != nil {
		return fo.watchErr
	}
	e.logf("%s is the primary, %s after the crash", fo.newPrimary.Name, fo.promotedAt.Sub(fo.killedAt).Round(100*time.Millisecond))
	return nil
}

// judgeFailover measures the failover of res (after its load) and checks
// that the formation replicated as the scenario says, that the service
// answered 201 again after it, and that /readyz was honest: not 200 while
// no primary took writes (from the crash to the first 201 after it), and
// 200 again once one did.
func judgeFailover(e *env, res *result) {
	fo := e.fo
	fig := &failoverFigures{sync: fo.sync, syncNames: fo.syncNames, oldPrimary: fo.old.Name, newPrimary: fo.newPrimary.Name,
		promoted: fo.promotedAt.Sub(fo.killedAt), source: fo.f.Source}
	res.fo = fig
	if fo.sync && fo.syncNames == "" {
		res.fail("the formation was to replicate synchronously, and its primary's synchronous_standby_names is empty")
	}
	if !fo.sync && fo.syncNames != "" {
		res.fail("the formation was to replicate asynchronously, and its primary's synchronous_standby_names is %q", fo.syncNames)
	}
	writable := res.timeline.firstSuccessAfter(fo.killedAt)
	if writable.IsZero() {
		res.fail("no create sent after the crash was answered 201: the service did not come back on the new primary")
		return
	}
	fig.firstSuccess = writable.Sub(fo.killedAt)
	res.readyz.mu.Lock()
	samples := slices.Clone(res.readyz.samples)
	res.readyz.mu.Unlock()
	// An answer speaks of a moment between its ask and its end: a 200 lies
	// if it was asked after the crash and ended before the new primary
	// answered, a 503 if it was asked after the new primary answered.
	for _, s := range samples {
		switch {
		case s.at.After(fo.killedAt.Add(readyGrace)) && s.end.Before(writable.Add(-readyGrace)):
			if s.status == 200 {
				fig.readyWhileDown++
			} else {
				fig.notReadyWhileDown++
			}
		case s.at.After(writable.Add(3 * time.Second)):
			if s.status != 200 {
				fig.notReadyAfter++
			}
		}
		if s.at.After(fo.killedAt) && s.status == 200 && (fig.firstReady == 0 || s.end.Sub(fo.killedAt) < fig.firstReady) {
			fig.firstReady = s.end.Sub(fo.killedAt)
		}
	}
	if fig.readyWhileDown > 0 {
		res.fail("/readyz answered 200 %d times while no primary took writes (from %s after the crash to %s before the first 201)",
			fig.readyWhileDown, readyGrace, readyGrace)
	}
	if fig.notReadyAfter > 0 {
		res.fail("/readyz answered other than 200 %d times from 3 s after the first 201 on the new primary", fig.notReadyAfter)
	}
}
