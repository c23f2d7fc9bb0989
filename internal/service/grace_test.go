package service

import (
	"os"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tracing"
)

// TestContainerGraceOutlastsTheShutdown: a container runtime kills the
// process when its grace period after SIGTERM ends. The compose file's
// grace period for the API must outlast what serve takes to stop at the
// default SHUTDOWN_TIMEOUT: the in-flight requests, then the last spans'
// export; otherwise a stop cuts the requests it promised to finish.
func TestContainerGraceOutlastsTheShutdown(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://db/x", "API_TOKENS": "alice:" + auth.Hash("t")}
	cfg, err := loadConfig("serve", nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			StopGracePeriod string `yaml:"stop_grace_period"`
		}
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(compose.Services["demo-api"].StopGracePeriod)
	if err != nil {
		t.Fatalf("docker-compose.yml: the api's stop_grace_period %q: %v (docker's default is 10s)", compose.Services["demo-api"].StopGracePeriod, err)
	}
	if need := cfg.shutdownTimeout + tracing.FlushTimeout; grace <= need {
		t.Fatalf("docker-compose.yml: the api's stop_grace_period is %v; serve may take %v (SHUTDOWN_TIMEOUT %v, then the spans' export %v)",
			grace, need, cfg.shutdownTimeout, tracing.FlushTimeout)
	}
}
