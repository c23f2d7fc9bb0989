//go:build unix

package main

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/provider"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestExpeditePausedRunnerIsFencedOut: a serve paused (SIGSTOP) inside its
// slot call as the call arrives, the desk holding the slot, outlives its lease, and the
// completer of another replica takes the run over. Woken (SIGCONT) while
// that one is inside the charge, the paused runner finds its call's budget
// spent, and its write is fenced out by the claim token (the key is still
// in progress): it answers 409 and leaves the run where the other runner
// put it, which then finishes it.
func TestExpeditePausedRunnerIsFencedOut(t *testing.T) {
	testenv.Long(t, "pauses a server process")
	t.Parallel()
	x := newExpediteRig(t)
	holdSlot := killPoints[1]
	paused := testenv.Start(t, x.url, x.env(time.Hour)...)
	other := testenv.Start(t, x.url, x.env(100*time.Millisecond)...)
	x.create(paused)
	x.desk.Faults(t, holdSlot.faults)
	// The runner is stopped the moment its slot call reaches the desk: its
	// step's budget (half the lease) cannot run out between the desk taking
	// the slot and a test that looks for it.
	var stop sync.Once
	stopped := make(chan error, 1)
	x.desk.OnArrival("POST /v1/slots", func() {
		stop.Do(func() { stopped <- stopProcess(paused.Cmd.Process) })
	})
	answered := make(chan string, 1)
	go func() {
		resp, body, err := x.expedite(paused, expediteKey, 1)
		if err != nil {
			answered <- err.Error()
			return
		}
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	if !testenv.Eventually(10*time.Second, func() bool {
		slots, _ := x.holds()
		return slots == 1
	}) {
		t.Fatalf("the desk never took the slot: %v", x.desk.AllCalls())
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if r, _ := x.run(expediteKey); r.Point != holdSlot.point || r.LastError.Valid {
		t.Fatalf("paused late: the run is %+v, want at %s inside its call", r, holdSlot.point)
	}
	// The other replica's completer takes the run over once the lease
	// passes, finds the slot, and is held inside its charge.
	x.desk.Faults(t, provider.Faults{HoldAnswer: "30s", Only: []string{"charges"}})
	if !testenv.Eventually(6*expediteLease, func() bool {
		_, charges := x.holds()
		return x.desk.Calls("POST /v1/charges") == 1 && charges == 1
	}) {
		t.Fatalf("the other replica never took the run over: %v", x.desk.AllCalls())
	}
	if err := paused.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answered:
		if !strings.HasPrefix(a, "409 ") || !strings.Contains(a, "operation_in_progress") {
			t.Fatalf("the paused runner answered %s, want 409 operation_in_progress", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the paused runner did not answer once woken")
	}
	if n := expediteOutcomes(t, paused, "lease_lost"); n != 1 {
		t.Errorf("the paused runner counts %d expedites lease_lost, want 1", n)
	}
	if r, _ := x.run(expediteKey); r.Point != "slot_reserved" || r.State != "running" {
		t.Fatalf("after the paused runner woke the run is %+v, want it running at slot_reserved, as the other runner left it", r)
	}
	// The held charge outlives its budget and the run parks; the faults
	// cleared, the completer's next turn asks the desk and finds the
	// charge.
	if !testenv.Eventually(6*expediteLease, func() bool {
		r, _ := x.run(expediteKey)
		return strings.HasPrefix(r.LastError.String, "charged: ")
	}) {
		r, _ := x.run(expediteKey)
		t.Fatalf("the other runner's held charge did not park the run: %+v", r)
	}
	x.desk.Faults(t, provider.Faults{})
	var o expediteOutcome
	if !testenv.Eventually(6*expediteLease, func() bool {
		o = x.outcome(other, expediteKey)
		return o.State == "completed"
	}) {
		t.Fatalf("the other replica did not finish the run: %+v", o)
	}
	var body []byte
	if err := x.db.Get(&body, `SELECT response_body FROM idempotency_keys WHERE operation = $1 AND idem_key = $2`,
		expedite.ExpediteOperation, expediteKey); err != nil {
		t.Fatal(err)
	}
	x.checkReplay(other, expediteKey, body)
	x.checkExpedited(expediteKey, body, 3, map[string]int{"POST /v1/slots": 1, "GET /v1/slots/{key}": 1,
		"POST /v1/charges": 1, "GET /v1/charges/{key}": 1})
}
