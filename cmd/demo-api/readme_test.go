package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/tools/testkit"
)

// TestReadmeWalkthrough runs the README's "Try every branch" blocks in
// order, in one shell, as a person pastes them, against demo-api serve set
// up as make run sets up a room (WORKSHOP_ROOM=true), and checks every
// status a comment names. Two participants paste them at the same moment
// (ME=ana and ME=ben), and every comment must come true for both. A block
// that restarts the server (make run) is the person's to run.
func TestReadmeWalkthrough(t *testing.T) {
	testkit.Long(t, "a long end-to-end walk (the README's curl blocks, two participants)")
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
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("the README has %d lines; keep it to 250 (link to docs/ for the rest)", n)
	}
	blocks := walkthroughBlocks(t, string(readme))

	desk := testkit.StartDesk(t, nil)
	base, _ := serveInProcess(t, "API_TOKENS=alice:"+auth.Hash("dev-alice")+",bob:"+auth.Hash("dev-bob"),
		"WORKSHOP_ROOM=true", "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=4")
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
	participants := []string{"ana", "ben"}
	outs := make([][]byte, len(participants))
	var wg sync.WaitGroup
	for i, me := range participants {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, bash, "-O", "expand_aliases", "-s")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "API="+base, "DESK="+desk.URL, "ME="+me)
			cmd.Stdin = strings.NewReader(script.String())
			outs[i], _ = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, me := range participants {
		checkWalkthrough(t, me, blocks, string(outs[i]))
	}
}

// checkWalkthrough checks out, what the blocks printed for participant me,
// against every status and exit code their comments name.
func checkWalkthrough(t *testing.T, me string, blocks []string, out string) {
	t.Helper()
	outs := regexp.MustCompile(`(?m)^@@ block [a-z]\n`).Split(out, -1)[1:]
	if len(outs) != len(blocks) {
		t.Fatalf("ME=%s: %d of %d blocks ran:\n%s", me, len(outs), len(blocks), out)
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
				t.Errorf("ME=%s, block %d: want exit %s:\n%s\n---\n%s", me, i+1, m[1], b, outs[i])
			}
		}
		for _, m := range got.FindAllStringSubmatch(outs[i], -1) {
			seen = append(seen, m[1])
		}
		if strings.Join(seen, " ") != strings.Join(want, " ") {
			t.Errorf("ME=%s, block %d answered %v, its comments say %v:\n%s\n---\n%s", me, i+1, seen, want, b, outs[i])
		}
		if strings.Contains(b, " workshop ") && (!strings.Contains(outs[i], "PASS") || strings.Contains(outs[i], "FAIL")) {
			t.Errorf("ME=%s, block %d: the workshop step did not pass:\n%s", me, i+1, outs[i])
		}
		if strings.Contains(b, "201, replayed") && strings.Count(outs[i], "Idempotent-Replayed: true") != strings.Count(b, "replayed") {
			t.Errorf("ME=%s, block %d: %d replays, its comments say %d:\n%s", me, i+1,
				strings.Count(outs[i], "Idempotent-Replayed: true"), strings.Count(b, "replayed"), outs[i])
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
