package idempotency

import (
	"strings"
	"testing"
	"time"
)

// Benchmarks of the pure functions every request runs: go test -run '^$'
// -bench . ./internal/idempotency

var sinkString string

func BenchmarkParseKey(b *testing.B) {
	for _, bc := range []struct{ name, header string }{
		{"uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"quoted", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{"quoted-escapes", `"a\"b\\c-8e03978e-40d5-43e8-bc93"`},
		{"255", strings.Repeat("k", MaxKeyLen)},
	} {
		values := []string{bc.header}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				key, err := ParseKey(values)
				if err != nil {
					b.Fatal(err)
				}
				sinkString = key
			}
		})
	}
}

// significant is what demo.CreateInput.Significant returns.
func significant(note string) map[string]any {
	return map[string]any{"topic": "billing", "note": note}
}

func BenchmarkFingerprint(b *testing.B) {
	for _, bc := range []struct{ name, note string }{
		{"short", "a demo request filed by the load generator"},
		{"4000", strings.Repeat("é", 4000)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// The map is built per request too (CreateInput.Significant).
				fp, err := Fingerprint(significant(bc.note))
				if err != nil {
					b.Fatal(err)
				}
				sinkString = fp
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	fp, _ := Fingerprint(significant("n"))
	rec := &Record{Fingerprint: fp, State: StateCompleted, CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)}
	b.ReportAllocs()
	for b.Loop() {
		if d := Decide(rec, fp, now); d.Kind != Replay {
			b.Fatal(d)
		}
	}
}
