package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText writes a line per check, a summary, and what was not checked
// and why.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance of %s\n", r.Target)
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Check))
	}
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%s  %-*s  %s  [%s]\n", res.Verdict, width, res.Check, res.Why, res.Ref)
	}
	b.WriteString(r.summary() + "\n")
	for _, res := range r.Results {
		if res.Verdict == Skip {
			fmt.Fprintf(&b, "not checked: %s: %s\n", res.Check, res.Why)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summary counts the verdicts that occur, e.g. "11 checks: 10 PASS, 1 SKIP":
// FAIL appears in the report only when a check failed.
func (r Report) summary() string {
	n := map[Verdict]int{}
	for _, res := range r.Results {
		n[res.Verdict]++
	}
	var counts []string
	for _, v := range []Verdict{Pass, Warn, Fail, Skip} {
		if n[v] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n[v], v))
		}
	}
	return fmt.Sprintf("%d checks: %s", len(r.Results), strings.Join(counts, ", "))
}

// WriteJSON writes the report as one JSON object, with its summary line.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Report
		Summary string `json:"summary"`
		Failed  bool   `json:"failed"`
	}{r, r.summary(), r.Failed()})
}
