package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/demo/internal/tools/statusmix"
)

// sampleReport is a report with every part filled in: two rounds of every
// scenario, storms, the floor, the counted round trips and a drain, and
// one phase with errors.
func sampleReport() *report {
	r := &report{
		opts:    options{rounds: 2, duration: 3 * time.Second, warmup: 500 * time.Millisecond, storms: 2, stormSize: 500, floorDuration: 1500 * time.Millisecond, countRequests: 200},
		command: "make bench", started: time.Date(2026, 12, 3, 16, 0, 0, 0, time.UTC), elapsed: 150 * time.Second,
		env: environment{GoVersion: "go1.26", OS: "linux", CPUModel: "Some CPU", Kernel: "6.1", PGVersion: "PostgreSQL 17", PGSource: "local binaries",
			Code: "commit abc", CPUs: 2, MemBytes: 8 << 30, Settings: []string{"fsync=on", "synchronous_commit=on"}},
		peakRSS: 40 << 20, rssAfter: 30 << 20,
		rowsCreate: 10, sentCreate: 10, rowsBaseline: 20, sentBaseline: 20, rowsOutbox: 30, sentOutbox: 29, rowsKeyRow: 5, sentKeyRow: 5,
		drain: &drainRun{rows: 1000, took: 2 * time.Second, submitted: 1000, submissions: 1000, submitCalls: 1000, statusCalls: 3,
			cpuDispatcher: time.Millisecond, cpuDesk: 2 * time.Millisecond, cpuPostgres: 3 * time.Millisecond, cpuMachine: 7 * time.Millisecond,
			statements: []statement{{Query: "-- outbox_take_due.sql: take", Calls: 40, Rows: 1000, Buffers: 24000, Dirtied: 100, WALRecords: 5000, WALBytes: 400000, TotalExec: 40},
				{Query: "SELECT rare", Calls: 5}},
			deskStatements: []statement{{Query: "INSERT INTO submissions", Calls: 1000, Rows: 1000, Buffers: 9000, WALRecords: 4000, WALBytes: 500000, TotalExec: 100}}},
	}
	r.expedite = &expediteRun{answered: 500, confirmed: 500, slots: 500, charges: 500,
		calls: map[string]int{"POST /v1/slots": 500, "POST /v1/charges": 500, "GET /v1/slots/{key}": 3}}
	for round := 1; round <= 2; round++ {
		for _, c := range expediteConcurrencies {
			r.expedite.phases = append(r.expedite.phases, expeditePhase{round: round, conc: c,
				load: loadResult{n: 100, elapsed: time.Second, latencies: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}},
				cpu:  cpuTimes{server: 10 * time.Millisecond, postgres: 10 * time.Millisecond}, statements: 1200, deskStatements: 600, xids: 700})
		}
	}
	for round := 1; round <= 2; round++ {
		for i, sc := range scenarios {
			for _, c := range concurrencies {
				n := 1000 * (i + 1) * round
				lat := []time.Duration{time.Millisecond, 2 * time.Millisecond, time.Duration(c) * time.Millisecond}
				p := phase{round: round, scenario: sc, conc: c,
					load: loadResult{n: n, elapsed: time.Second, latencies: lat, statuses: statusmix.Mix{201: n}},
					db: phaseCounters{calls: int64(n), xids: int64(n), walBytes: int64(300 * n), statements: []statement{
						{QueryID: 1, Query: "INSERT INTO demo_requests (id) VALUES ($1)", Calls: int64(n), TotalExec: float64(n) / 10, MaxExec: 3}}},
					cpu: cpuTimes{server: time.Second, postgres: time.Second, client: time.Second / 2, machine: 2 * time.Second}}
				if sc == scReplay && c == 32 && round == 2 {
					p.load.errors, p.load.firstErr, p.load.statuses = 2, "status 503", statusmix.Mix{201: n - 2, 0: 1, 503: 1}
				}
				r.phases = append(r.phases, p)
			}
		}
	}
	r.storms = []stormRun{
		{round: 1, stormResult: stormResult{first: 1, replayed: 499, rows: 1, elapsed: 30 * time.Millisecond, p50: 10 * time.Millisecond, p99: 20 * time.Millisecond}},
		{round: 2, stormResult: stormResult{first: 1, replayed: 497, conflict: 1, other: 1, rows: 1, elapsed: 31 * time.Millisecond, firstOther: "status 418"}},
	}
	for _, name := range []string{"claim (new key)", "claim + finish", "plain insert"} {
		for _, c := range []int{1, 8} {
			r.floor = append(r.floor, floorResult{name: name, conc: c, rps: float64(1000 * c), p50: time.Millisecond, p99: 2 * time.Millisecond})
		}
	}
	r.floor = append(r.floor, floorResult{name: "claim (new key)", conc: 1, syncOff: true, rps: 5000, p50: time.Millisecond / 5, errors: 1, firstErr: "boom"})
	for _, sc := range scenarios {
		rc := roundTripCount{scenario: sc, requests: 200, roundTrips: 200, statements: 200, db: phaseCounters{statements: []statement{
			{QueryID: 2, Query: "INSERT INTO demo_requests (id) VALUES ($1)", Calls: 200, TotalExec: 20, TotalPlan: 4, MaxExec: 1}}}}
		if sc == scCreate2P {
			rc.roundTrips, rc.errors, rc.firstErr = 402, 1, "status 500"
		}
		r.counts = append(r.counts, rc)
	}
	return r
}

// TestReportRenders: the report renders every section from the template,
// with the figures it was given.
func TestReportRenders(t *testing.T) {
	md := sampleReport().markdown()
	expediteCPU := "– | –"
	if cpuMeasured {
		expediteCPU = "**200** | 100 / 0 / 100"
	}
	for _, want := range []string{
		"| expedite: desk calls per step (two steps each, nothing failing) | 1.00 (1003 calls for 500 expedites) | 1.0 | **MISSED** |\n",
		"| expedite: 201s = confirmed orders = the desk's charged slots = its charges; errors | 500 = 500 = 500 = 500; 0 | equal; 0 | met |\n",
		"### The expedite\n",
		"| 8 | " + expediteCPU + " | 100 | 2.00 ms | 3.00 ms | 0 | 12.00 / 6.00 | 7.00 | 100, 100 |\n",
		"slot 503 (500 reserve, 3 lookups), charge 500 (500 charge, 0 lookups), release 0: **1.00 calls per step**",
		"## Latest run\n\nCommand: make bench, 2026-12-03 16:00 UTC, 2m30s in all.\n",
		"| business rows = 201s (create, baseline, baseline+outbox, baseline+key) | 10 = 10, 20 = 20, 30 = 29, 5 = 5 | equal | **FAILED** |\n",
		"| replay | 32 | ",
		"- replay @32: 2 errors, first: status 503; statuses: none×1 201×17998 503×1\n",
		"### The outbox drained\n",
		"| 1000 | 2s | **500** | 1000 | 3 | 1.00 | 1000 | 1000 |\n",
		"| serve's | `-- outbox_take_due.sql: take` | 0.040 | 25.0 | 24.0 | 0.10 | 5.00 | 400 | 1.000 ms |\n",
		"| the desk's | `INSERT INTO submissions` | 1.000 | 1.0 | 9.0 | 0.00 | 4.00 | 500 | 0.100 ms |\n",
		"### Ratios\n",
		"| create-2p | 1.00 | 2.01 (1 errors: status 500) |",
		"### Same-key storms\n",
		"| | first unexpected: status 418 | | | | | | | | |\n",
		"### SQL floor\n",
		"| claim (new key) | 1 | off | 5000 | ",
		"### CPU per request\n",
		"### Server memory\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(md, "SELECT rare") {
		t.Error("the drain's table shows a statement run less than once per hundred deliveries")
	}
	if strings.Contains(md, "<no value>") || strings.Contains(md, "%!") {
		t.Errorf("the report has an unfilled or misformatted value:\n%s", md)
	}
}

// TestDeskCallsCountsTheDesksLog: the desk's calls are its request log's
// lines after the mark, by method and route; other lines are not calls.
func TestDeskCallsCountsTheDesksLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "desk.log")
	before := `{"time":"t","level":"INFO","msg":"request","method":"POST","route":"/v1/submissions","status":201}` + "\n"
	after := `{"time":"t","level":"INFO","msg":"request","method":"POST","route":"/v1/slots","status":201}
{"time":"t","level":"INFO","msg":"request","method":"GET","route":"/v1/slots/{key}","status":404}
{"time":"t","level":"INFO","msg":"request","method":"POST","route":"/v1/slots","status":201}
{"time":"t","level":"INFO","msg":"swept holds","released":0}
not json
`
	if err := os.WriteFile(path, []byte(before+after), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, err := deskCalls(path, int64(len(before)))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls["POST /v1/slots"] != 2 || calls["GET /v1/slots/{key}"] != 1 {
		t.Fatalf("calls %v, want 2 POST /v1/slots and 1 GET /v1/slots/{key}", calls)
	}
}

// TestChartsRender: the report's charts are well-formed SVG documents
// with a line or bar for what they show.
func TestChartsRender(t *testing.T) {
	dir := t.TempDir()
	if err := sampleReport().writeCharts(dir); err != nil {
		t.Fatal(err)
	}
	charts := []string{throughputChart}
	if cpuMeasured {
		charts = append(charts, cpuChart)
	}
	for _, name := range charts {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		checkSVG(t, name, b, "create-2p")
	}
}

// checkSVG fails t unless b is a well-formed XML document whose root is an
// svg element, with paths drawn and the text want written.
func checkSVG(t *testing.T, name string, b []byte, want string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var root string
	paths := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "path" {
				paths++
			}
		}
	}
	if root != "svg" || paths < 10 {
		t.Errorf("%s: root element %q, %d paths; want an svg with its lines drawn", name, root, paths)
	}
	if !bytes.Contains(b, []byte(want)) {
		t.Errorf("%s lacks the text %q", name, want)
	}
}
