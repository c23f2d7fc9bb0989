package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/demo-api/demo-api/internal/tools/testenv"
	"github.com/demo-api/demo-api/internal/tracing"
)

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want tracing.Config
	}{
		{"nothing set: off", nil, tracing.Config{Protocol: "http/protobuf", ServiceName: "demo-api"}},
		{"the base endpoint gets the traces path",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/", "OTEL_SERVICE_NAME": "orders"},
			tracing.Config{Endpoint: "http://127.0.0.1:4318/v1/traces", Protocol: "http/protobuf", ServiceName: "orders"}},
		{"the traces endpoint is taken as it is",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/otlp/traces"},
			tracing.Config{Endpoint: "https://b/otlp/traces", Protocol: "http/protobuf", ServiceName: "demo-api"}},
		{"the protocol as said",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			tracing.Config{Endpoint: "http://a:4318/v1/traces", Protocol: "grpc", ServiceName: "demo-api"}},
		{"OTEL_SDK_DISABLED turns it off",
			map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"},
			tracing.Config{Protocol: "http/protobuf", ServiceName: "demo-api"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := tracing.FromEnv(func(k string) string { return c.env[k] }); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestSetupRefuses(t *testing.T) {
	for _, c := range []tracing.Config{
		{Endpoint: "http://127.0.0.1:4317/v1/traces", Protocol: "grpc"},
		{Endpoint: "127.0.0.1:4318/v1/traces", Protocol: "http/protobuf"},
		{Endpoint: "ftp://127.0.0.1/v1/traces", Protocol: "http/protobuf"},
	} {
		if _, err := tracing.Setup(context.Background(), c, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%+v: no error", c)
		}
		if tracing.On() {
			t.Fatalf("%+v: refused, yet tracing is on", c)
		}
	}
}

// TestSetupExportsOverOTLPHTTP: with an endpoint, a span is posted to it as
// OTLP/HTTP protobuf, with the service's name, by the shutdown at the
// latest; after it tracing is off.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()

	shutdown, err := tracing.Setup(context.Background(),
		tracing.FromEnv(env{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "svc-under-test"}.get), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !tracing.On() {
		t.Fatal("an endpoint is set, yet tracing is off")
	}
	_, span := tracing.Start(context.Background(), "span-under-test")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if tracing.On() {
		t.Error("tracing is still on after the shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the collector got %d posts, want 1", len(got))
	}
	r, b := got[0], bodies[0]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-protobuf") {
		t.Errorf("got %s %s (%s), want POST /v1/traces as application/x-protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	}
	for _, want := range []string{"span-under-test", "svc-under-test"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the export holds no %q", want)
		}
	}
}

// TestExportErrorsGoThroughTheLogger: a collector that refuses a batch is
// reported in the service's own log, a JSON line like the others, not as
// the plain text OpenTelemetry prints by default.
func TestExportErrorsGoThroughTheLogger(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "refused by the collector under test", http.StatusBadRequest) // not retried
	}))
	defer collector.Close()
	var log testenv.Buffer
	shutdown, err := tracing.Setup(context.Background(), tracing.FromEnv(env{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}.get),
		slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Start(context.Background(), "span-refused")
	span.End()
	shutdown(context.Background()) // exports the batch, which the collector refuses

	var found bool
	for line := range strings.SplitSeq(strings.TrimSpace(log.String()), "\n") {
		var rec struct{ Level, Msg, Err string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		found = found || (rec.Level == "WARN" && strings.Contains(rec.Msg, "tracing") && strings.Contains(rec.Err, "400"))
	}
	if !found {
		t.Fatalf("the refused export is not in the service's log:\n%s", log.String())
	}
}

type env map[string]string

func (e env) get(k string) string { return e[k] }
