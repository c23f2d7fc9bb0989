package main

import (
	"context"
	"errors" // demo-only
	"fmt"    // demo-only
	"io"     // demo-only
	"net"
	"strings"
	"syscall" // demo-only
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestWorkshopBeyondLoopbackWarns: serve logs a warning when the workshop
// knobs are on and it listens on an address other machines can reach; not
// on loopback, and not with the knobs off. A workshop room warns wherever
// it listens, and prints how to join it.
func TestWorkshopBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, tt := range []struct {
		addr, workshop, room string
		warn, roomWarn       bool
	}{
		{"0.0.0.0:0", "true", "", true, false},
		{"127.0.0.1:0", "true", "", false, false},
		{"0.0.0.0:0", "false", "", false, false},
		{"0.0.0.0:0", "true", "true", true, true},
		{"127.0.0.1:0", "true", "true", false, true},
	} {
		env := map[string]string{"DATABASE_URL": url, "API_TOKENS": "alice:" + auth.Hash("tok"),
			"LISTEN_ADDR": tt.addr, "WORKSHOP": tt.workshop, "WORKSHOP_ROOM": tt.room}
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr testkit.Buffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr) }()
		for end := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "listening") && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve on %s: %v\n%s", tt.addr, err, stderr.String())
		}
		if warned := strings.Contains(stderr.String(), "workshop knobs are on"); warned != tt.warn {
			t.Errorf("serve on %s with WORKSHOP=%s: warned %v, want %v; its log:\n%s", tt.addr, tt.workshop, warned, tt.warn, stderr.String())
		}
		if warned := strings.Contains(stderr.String(), "WORKSHOP_ROOM is on"); warned != tt.roomWarn {
			t.Errorf("serve on %s with WORKSHOP_ROOM=%s: warned of the room %v, want %v; its log:\n%s", tt.addr, tt.room, warned, tt.roomWarn, stderr.String())
		}
		if joins := strings.Contains(stdout.String(), "join at http://") && strings.Contains(stdout.String(), "\nAPI=http://"); joins != tt.roomWarn {
			t.Errorf("serve on %s with WORKSHOP_ROOM=%s: printed how to join %v, want %v:\n%s", tt.addr, tt.room, joins, tt.roomWarn, stdout.String())
		}
	}
}

// TestJoinLine: a room's banner prints the line a participant pastes first,
// with the addresses other machines reach: the review desk on the API's
// address when it is this machine's loopback desk and the API listens
// beyond this machine (make run's room opens it there), the desk's own URL
// otherwise, and no DESK without one.
func TestJoinLine(t *testing.T) {
	t.Parallel()
	lan := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	for _, tt := range []struct {
		addr     *net.TCPAddr
		provider string
		want     string
		deskNote bool
	}{
		{lan, "http://127.0.0.1:8090", "\nAPI=http://192.0.2.7:8080 DESK=http://192.0.2.7:8090 ME=\n", true},
		{lan, "http://localhost:8090/", "\nAPI=http://192.0.2.7:8080 DESK=http://192.0.2.7:8090 ME=\n", true},
		{lan, "http://desk.example:8090/", "\nAPI=http://192.0.2.7:8080 DESK=http://desk.example:8090 ME=\n", false},
		{local, "http://127.0.0.1:8090", "\nAPI=http://127.0.0.1:8080 DESK=http://127.0.0.1:8090 ME=\n", false},
		{lan, "", "\nAPI=http://192.0.2.7:8080 ME=\n", false},
	} {
		var out strings.Builder
		printJoin(&out, tt.addr, tt.provider)
		if !strings.Contains(out.String(), tt.want) || !strings.Contains(out.String(), "join at http://"+tt.addr.String()+"/workshop") {
			t.Errorf("printJoin(%s, %q) printed\n%s\nwant the line %q", tt.addr, tt.provider, out.String(), tt.want)
		}
		if note := strings.Contains(out.String(), "it must listen there too"); note != tt.deskNote {
			t.Errorf("printJoin(%s, %q): said where the desk must listen %v, want %v:\n%s", tt.addr, tt.provider, note, tt.deskNote, out.String())
		}
		if !strings.Contains(out.String(), "not $(whoami)") {
			t.Errorf("printJoin(%s, %q) does not ask for a name of one's own:\n%s", tt.addr, tt.provider, out.String())
		}
	}
}

// demo-only{ the stand-in desk

// TestProviderClosesSlowBody: the review desk has the API's read timeout
// (HTTP_READ_TIMEOUT, here 1 s): a connection that sends its body slowly is
// closed, not held for as long as the sender likes.
func TestProviderClosesSlowBody(t *testing.T) {
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

// }demo-only

// TestDispatchServesMetrics: demo-api dispatch, a process of its own,
// serves /metrics on the address METRICS_ADDR names, with the outbox's
// metrics.
func TestDispatchServesMetrics(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewURL(t), "PROVIDER_URL": "http://127.0.0.1:1",
		"METRICS_ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testkit.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dispatch"}, func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	defer func() { cancel(); <-done }()
	var url string
	for end := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if line, ok := strings.CutPrefix(stdout.String(), "dispatcher metrics on "); ok {
			url = strings.TrimSpace(line)
		}
	}
	if url == "" {
		t.Fatalf("dispatch printed no metrics address:\n%s", stderr.String())
	}
	// A scrape waits a second for the database; a read that takes longer
	// serves the next scrape, so a busy machine may need a few.
	var body string
	if !testkit.Eventually(10*time.Second, func() bool {
		body = get(t, url)
		return strings.Contains(body, "\ndemo_api_outbox_backlog 0\n")
	}) {
		t.Fatalf("the dispatcher's /metrics has no outbox backlog:\n%s", body)
	}
}
