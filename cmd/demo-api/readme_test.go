package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestReadmeWalkthrough runs the README's "Try every branch" blocks in
// order, in one shell, as a person pastes them, against demo-api serve set
// up as make run sets it up, and checks every status a comment names. A
// block that restarts the server (make run) is the person's to run.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("the walkthrough needs bash and curl on PATH")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the walkthrough needs curl on PATH (apt-get install curl)")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, string(readme))

	desk := testkit.StartDesk(t, nil)
	base, _ := serveInProcess(t, "API_TOKENS=alice:"+auth.Hash("dev-alice")+",bob:"+auth.Hash("dev-bob"),
		"PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=4")
	dir := t.TempDir() // a checkout after make run: ./bin/demo-api
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, "bin", "demo-api")); err != nil {
		t.Fatal(err)
	}

	var script strings.Builder
	for i, b := range blocks {
		script.WriteString("echo '@@ block " + string(rune('a'+i)) + "'\n" + b + "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-O", "expand_aliases", "-s")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "API="+base, "DESK="+desk.URL)
	cmd.Stdin = strings.NewReader(script.String())
	out, _ := cmd.CombinedOutput()
	outs := regexp.MustCompile(`(?m)^@@ block [a-z]\n`).Split(string(out), -1)[1:]
	if len(outs) != len(blocks) {
		t.Fatalf("%d of %d blocks ran:\n%s", len(outs), len(blocks), out)
	}

	status := regexp.MustCompile(`#\s+(\d{3})\b`)
	exit := regexp.MustCompile(`#.*exit (\d)\b`)
	got := regexp.MustCompile(`(?m)^HTTP/1\.1 (\d{3})`)
	for i, b := range blocks {
		var want, seen []string
		for line := range strings.SplitSeq(b, "\n") {
			if m := status.FindStringSubmatch(line); m != nil {
				want = append(want, m[1])
			}
			if m := exit.FindStringSubmatch(line); m != nil && !strings.Contains(outs[i], "exit "+m[1]) {
				t.Errorf("block %d: want exit %s:\n%s\n---\n%s", i+1, m[1], b, outs[i])
			}
		}
		for _, m := range got.FindAllStringSubmatch(outs[i], -1) {
			seen = append(seen, m[1])
		}
		if strings.Join(seen, " ") != strings.Join(want, " ") {
			t.Errorf("block %d answered %v, its comments say %v:\n%s\n---\n%s", i+1, seen, want, b, outs[i])
		}
		if strings.Contains(b, " workshop ") && (!strings.Contains(outs[i], "PASS") || strings.Contains(outs[i], "FAIL")) {
			t.Errorf("block %d: the workshop step did not pass:\n%s", i+1, outs[i])
		}
	}
}

// walkthroughBlocks returns the sh blocks of the README's walkthrough, but
// those that restart the server.
func walkthroughBlocks(t *testing.T, readme string) []string {
	start := strings.Index(readme, "## Try every branch")
	if start < 0 {
		t.Fatal("the README has no walkthrough (## Try every branch)")
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		if !strings.Contains(m[1], "make run") {
			blocks = append(blocks, m[1])
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("%d blocks in the walkthrough", len(blocks))
	}
	return blocks
}
