package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/internal/reviewdesk"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestProviderRefusesItsOptionsOutOfRange: a slot hold or a credit that
// does not parse, or is out of range, stops the desk before it starts,
// naming the variable.
func TestProviderRefusesItsOptionsOutOfRange(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"PROVIDER_SLOT_HOLD": "soon"}, nil, "PROVIDER_SLOT_HOLD"},
		{map[string]string{"PROVIDER_SLOT_HOLD": "0s"}, nil, "PROVIDER_SLOT_HOLD"},
		{map[string]string{"PROVIDER_SLOT_HOLD": "-1s"}, nil, "PROVIDER_SLOT_HOLD"},
		{nil, []string{"-slot-hold", "25h"}, "-slot-hold"},
		{map[string]string{"PROVIDER_CREDIT": "lots"}, nil, "PROVIDER_CREDIT"},
		{map[string]string{"PROVIDER_CREDIT": "-1"}, nil, "PROVIDER_CREDIT"},
		{nil, []string{"-credit", "1000000001"}, "-credit"},
	} {
		env := map[string]string{"PROVIDER_DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "PROVIDER_LISTEN_ADDR": "127.0.0.1:0"}
		for k, v := range tt.env {
			env[k] = v
		}
		var stdout, stderr strings.Builder
		err := run(context.Background(), append([]string{"provider"}, tt.args...), func(k string) string { return env[k] }, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("provider with %v %v: %v, want an error naming %s", tt.env, tt.args, err, tt.want)
		}
	}
}

// TestProviderReleasesExpiredHolds: the provider command takes its slot
// hold and credit from the environment, sweeps the holds that end, and
// stops its sweep with the server.
func TestProviderReleasesExpiredHolds(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PROVIDER_DATABASE_URL": pgtest.NewURL(t), "PROVIDER_LISTEN_ADDR": "127.0.0.1:0",
		"PROVIDER_SLOT_HOLD": "200ms", "PROVIDER_CREDIT": "10"}
	ctx := context.Background()
	addr, stderr, stop := runProvider(t, env)
	desk := deskclient.New("http://"+addr, nil)
	slot := deskclient.Slot{RequestID: "r", Account: "alice"}
	for _, key := range []string{"expedite:1:slot", "expedite:2:slot"} {
		if _, err := desk.ReserveSlot(ctx, key, slot); err != nil {
			t.Fatal(err)
		}
	}
	_, err := desk.Charge(ctx, "expedite:2:charge", deskclient.Charge{RequestID: "r", Account: "alice", Amount: 11, SlotKey: "expedite:2:slot"})
	if refused, ok := errors.AsType[*reviewdesk.RefusedError](err); !ok || refused.Code != "insufficient_credit" {
		t.Fatalf("a charge above PROVIDER_CREDIT: %v, want insufficient_credit", err)
	}
	if !testenv.Eventually(5*time.Second, func() bool {
		r, err := desk.SlotStatus(ctx, "expedite:1:slot")
		return err == nil && r.State == "released"
	}) {
		t.Fatalf("the hold of 200ms was not released within 5s; the desk's log:\n%s", stderr)
	}
	// The sweep stops with the server: run returns only once it has.
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("the desk stopped with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the desk did not stop")
	}
}

// runProvider runs demo-api provider with env, as a person runs it, and
// returns its address once it listens, its log, and stop, which ends it
// and returns run's error once it has stopped (the same to every call).
// The test's end stops it too.
func runProvider(t *testing.T, env map[string]string) (addr string, log *testenv.Buffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout testenv.Buffer
	log = &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"provider"}, func(k string) string { return env[k] }, &stdout, log) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { stop() })
	for end := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if line, ok := strings.CutPrefix(stdout.String(), "review desk listening on http://"); ok {
			addr = strings.TrimSpace(line)
		}
	}
	if addr == "" {
		t.Fatalf("the desk printed no address:\n%s", log.String())
	}
	return addr, log, stop
}

// TestProviderClosesSlowBody: the review desk has the API's read timeout
// (HTTP_READ_TIMEOUT, here 1 s): a connection that sends its body slowly is
// closed, not held for as long as the sender likes.
func TestProviderClosesSlowBody(t *testing.T) {
	testenv.Long(t, "fault: a slow body")
	t.Parallel()
	env := map[string]string{"PROVIDER_DATABASE_URL": pgtest.NewURL(t), "PROVIDER_LISTEN_ADDR": "127.0.0.1:0",
		"HTTP_READ_TIMEOUT": "1s"}
	addr, _, _ := runProvider(t, env)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/submissions HTTP/1.1\r\nHost: desk\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: slow\r\nContent-Length: 1000\r\n\r\n{")
	go func() { // a byte every 100 ms: the body would take 100 s
		for range 1000 {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	conn.SetReadDeadline(start.Add(5 * time.Second))
	// The desk closes the connection: cleanly (EOF), or with a reset when
	// the trickle's next byte reaches the closed socket. Only the deadline
	// means it still holds it.
	if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the desk still holds the slow connection after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("the desk closed the slow connection after %v", time.Since(start).Round(time.Millisecond))
}
