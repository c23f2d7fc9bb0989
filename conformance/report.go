package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Exit is the command's exit code for the report: ExitFailed when a check
// failed, else ExitConforms.
func (r Report) Exit() int {
	if r.Failed() {
		return ExitFailed
	}
	return ExitConforms
}

// WriteText writes a line per check, a summary, and what was not checked
// or not seen, and why.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s, profile %s (%s)\n", r.Suite, r.Version, r.Target, r.Profile, r.Draft)
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Check))
	}
	for _, res := range r.Results {
		if res.Verdict == Skip {
			continue
		}
		fmt.Fprintf(&b, "%-12s  %-*s  %s  [%s %s]\n", res.Verdict, width, res.Check, res.Why, res.Section, res.Level)
	}
	fmt.Fprintf(&b, "%s; exit %d\n", r.summary(), r.Exit())
	for _, res := range r.Results {
		if res.Verdict == Skip {
			fmt.Fprintf(&b, "not checked: %s: %s\n", res.Check, res.Why)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summary counts the verdicts that occur, e.g. "12 checks: 10 PASS, 2 SKIP".
func (r Report) summary() string {
	n := map[Verdict]int{}
	for _, res := range r.Results {
		n[res.Verdict]++
	}
	var counts []string
	for _, v := range []Verdict{Pass, Fail, Warn, Info, Inconclusive, Skip} {
		if n[v] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n[v], v))
		}
	}
	return fmt.Sprintf("%d checks: %s", len(r.Results), strings.Join(counts, ", "))
}

// WriteJSON writes the report as one JSON object, with its summary and
// exit code.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Report
		Summary string `json:"summary"`
		Exit    int    `json:"exit"`
	}{r, r.summary(), r.Exit()})
}

// WriteTranscripts writes the exchanges of each failing check to
// dir/<check>.txt, and returns the files it wrote.
func (r Report) WriteTranscripts(dir string) ([]string, error) {
	var files []string
	for _, res := range r.Results {
		if res.Verdict != Fail {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return files, err
		}
		name := filepath.Join(dir, res.Check+".txt")
		text := fmt.Sprintf("%s: %s %s\n\n%s", res.Check, res.Verdict, res.Why, strings.Join(res.exchanges, "\n"))
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}
