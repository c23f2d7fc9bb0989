package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Exit is the command's exit code for the report: ExitFailed when a check
// failed; else ExitInconclusive when a core check saw nothing, unless
// InconclusiveAllowed; else ExitConforms.
func (r Report) Exit() int {
	switch {
	case r.Failed():
		return ExitFailed
	case r.Unseen() && !r.InconclusiveAllowed:
		return ExitInconclusive
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
	if r.Unseen() {
		if r.InconclusiveAllowed {
			b.WriteString("a core check is INCONCLUSIVE, allowed by --allow-inconclusive: this exit says nothing of what it could not see\n")
		} else {
			fmt.Fprintf(&b, "a core check is INCONCLUSIVE: exit %d, not %d (give --count-cmd, or --allow-inconclusive)\n", ExitInconclusive, ExitConforms)
		}
	}
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

// WriteTranscripts writes the transcript of each check that did not PASS
// (and was not skipped) to dir/<check>.txt: its line, then every exchange
// and count, stamped, in order. It returns the files it wrote.
func (r Report) WriteTranscripts(dir string) ([]string, error) {
	var files []string
	for _, res := range r.Results {
		if res.Verdict == Pass || res.Verdict == Skip {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return files, err
		}
		name := filepath.Join(dir, res.Check+".txt")
		if err := os.WriteFile(name, []byte(res.transcriptText()), 0o644); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

func (res Result) transcriptText() string {
	return fmt.Sprintf("%s: %s [%s %s] %s\n\n%s", res.Check, res.Verdict, res.Section, res.Level, res.Why, strings.Join(res.transcript, "\n"))
}

// WriteJUnit writes the report as a JUnit XML test suite, a test case per
// check: FAIL is a failure, a core check INCONCLUSIVE an error (unless
// InconclusiveAllowed), SKIP skipped; the transcript of each case that did
// not PASS is its system-out.
func (r Report) WriteJUnit(w io.Writer) error {
	type message struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr,omitempty"`
	}
	type testCase struct {
		Name      string   `xml:"name,attr"`
		ClassName string   `xml:"classname,attr"`
		Failure   *message `xml:"failure,omitempty"`
		Error     *message `xml:"error,omitempty"`
		Skipped   *message `xml:"skipped,omitempty"`
		SystemOut string   `xml:"system-out,omitempty"`
	}
	type testSuite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Errors   int        `xml:"errors,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Cases    []testCase `xml:"testcase"`
	}
	suite := testSuite{Name: fmt.Sprintf("%s %s (profile %s): %s", r.Suite, r.Version, r.Profile, r.Target), Tests: len(r.Results)}
	for _, res := range r.Results {
		m := &message{Message: fmt.Sprintf("%s [%s %s] %s", res.Verdict, res.Section, res.Level, res.Why), Type: string(res.Verdict)}
		c := testCase{Name: res.Check, ClassName: r.Suite}
		switch {
		case res.Verdict == Fail:
			c.Failure = m
			suite.Failures++
		case res.Verdict == Inconclusive && res.Core && !r.InconclusiveAllowed:
			c.Error = m
			suite.Errors++
		case res.Verdict == Skip:
			c.Skipped = m
			suite.Skipped++
		}
		if res.Verdict != Pass && res.Verdict != Skip {
			c.SystemOut = res.transcriptText()
		} else if res.Verdict == Pass {
			c.SystemOut = res.Why
		}
		suite.Cases = append(suite.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(suite); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
