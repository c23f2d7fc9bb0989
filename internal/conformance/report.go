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

// summary counts the verdicts: "11 checks: 9 PASS, 1 WARN, 0 FAIL, 1 SKIP".
func (r Report) summary() string {
	n := map[Verdict]int{}
	for _, res := range r.Results {
		n[res.Verdict]++
	}
	return fmt.Sprintf("%d checks: %d PASS, %d WARN, %d FAIL, %d SKIP", len(r.Results), n[Pass], n[Warn], n[Fail], n[Skip])
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
