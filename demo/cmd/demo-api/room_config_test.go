package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestRoomSettings: WORKSHOP_ROOM is a boolean, needs the workshop knobs,
// and refuses a configured actor named as a participant (dev-…), before
// serve opens its database.
func TestRoomSettings(t *testing.T) {
	t.Parallel()
	tokens := "alice:" + auth.Hash("t")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"WORKSHOP_ROOM needs the knobs", map[string]string{"WORKSHOP_ROOM": "true"}, "WORKSHOP_ROOM needs WORKSHOP=true"},
		{"WORKSHOP_ROOM=yes is refused", map[string]string{"WORKSHOP": "true", "WORKSHOP_ROOM": "yes"}, `WORKSHOP_ROOM: "yes" is not a boolean`},
		{"a room refuses an actor named as a participant", map[string]string{"WORKSHOP": "true", "WORKSHOP_ROOM": "true",
			"API_TOKENS": tokens + ",dev-ana:" + auth.Hash("s3cret")}, `API_TOKENS with WORKSHOP_ROOM: the actor "dev-ana"`},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://db/x", "API_TOKENS": tokens}
		for k, v := range tc.env {
			env[k] = v
		}
		err := run(context.Background(), []string{"serve"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: serve = %v, want an error with %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestRoomNeedsNoTokens: a room with no API_TOKENS serves its
// participants.
func TestRoomNeedsNoTokens(t *testing.T) {
	t.Parallel()
	base, _ := testenv.ServeInProcess(t, run, "WORKSHOP_ROOM=true", "API_TOKENS=")
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/demo-requests", strings.NewReader(`{"topic":"billing"}`))
	req.Header.Set("Authorization", "Bearer dev-ana")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("dev-ana's create in a room without API_TOKENS: %d, want 201", resp.StatusCode)
	}
}

// TestRoomWarnsWherever: serve warns of a workshop room wherever it
// listens, loopback too; without a room it does not, and an actor may then
// be named dev-….
func TestRoomWarnsWherever(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, tt := range []struct {
		addr, room, tokens string
		roomWarn           bool
	}{
		{"0.0.0.0:0", "true", "alice:" + auth.Hash("tok"), true},
		{"127.0.0.1:0", "true", "alice:" + auth.Hash("tok"), true},
		{"127.0.0.1:0", "false", "dev-ana:" + auth.Hash("s3cret"), false},
	} {
		env := map[string]string{"DATABASE_URL": url, "API_TOKENS": tt.tokens, "LISTEN_ADDR": tt.addr, "WORKSHOP": "true", "WORKSHOP_ROOM": tt.room}
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr testenv.Buffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr) }()
		for end := time.Now().Add(10 * time.Second); !strings.Contains(stdout.String(), "listening") && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel() // serve returns after the callback that warns, which runs once it listens
		if err := <-done; err != nil {
			t.Fatalf("serve on %s with WORKSHOP_ROOM=%s: %v\n%s", tt.addr, tt.room, err, stderr.String())
		}
		if warned := strings.Contains(stderr.String(), "WORKSHOP_ROOM is on"); warned != tt.roomWarn {
			t.Errorf("serve on %s with WORKSHOP_ROOM=%s: warned of the room %v, want %v; its log:\n%s", tt.addr, tt.room, warned, tt.roomWarn, stderr.String())
		}
	}
}
