package service

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/tools/pgtest"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestEveryDocumentedMetricIsExported: every metric docs/observability.md
// lists is on the /metrics of a running server (after one create, and once
// the gauges read from the database are read), and every demo_api_ metric
// there is listed in the docs.
func TestEveryDocumentedMetricIsExported(t *testing.T) {
	documented := documentedMetrics(t, "../../docs/observability.md")
	p := testenv.Start(t, pgtest.NewURL(t))
	if resp, body, err := p.Post("key-metrics-docs", "X-Client-Attempt", "1"); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %s", err, body)
	}
	var exported []string
	testenv.Eventually(10*time.Second, func() bool {
		exported = exportedMetrics(testenv.Get(t, p.URL+"/metrics"))
		for _, name := range documented {
			if !slices.Contains(exported, name) {
				return false
			}
		}
		return true
	})
	for _, name := range documented {
		if !slices.Contains(exported, name) {
			t.Errorf("docs/observability.md lists %s; /metrics does not export it", name)
		}
	}
	for _, name := range exported {
		if strings.HasPrefix(name, "demo_api_") && !slices.Contains(documented, name) {
			t.Errorf("/metrics exports %s; docs/observability.md does not list it", name)
		}
	}
}

// documentedMetrics are the names in the first column of the metrics table
// of the doc at path, without their labels.
func documentedMetrics(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "### Metrics")
	section, _, _ = strings.Cut(section, "\n### ")
	name := regexp.MustCompile("`(demo_api_[a-z_]+)(\\{[^}]*\\})?`")
	var names []string
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("%s: found %d metrics in its table (%v): has its layout changed?", path, len(names), names)
	}
	return names
}

// exportedMetrics are the metric families of a scrape, by their TYPE lines.
func exportedMetrics(scrape string) []string {
	var names []string
	for line := range strings.SplitSeq(scrape, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, _, _ := strings.Cut(rest, " ")
			names = append(names, name)
		}
	}
	return names
}
