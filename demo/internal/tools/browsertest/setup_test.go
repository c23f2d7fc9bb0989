package browsertest

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetupInstallsOnlyWhatIsMissing: scripts/setup.sh, asked for
// Chromium where no browser is on PATH, installs it only when no package of
// it is installed; a browser installed off PATH is named, with
// CHROME_PATH to set, and one that dpkg is installing or upgrading right now
// is left to it: apt-get is not run either time. dpkg-query, apt-cache and
// apt-get are stand-ins that answer as Debian's would and record the calls.
func TestSetupInstallsOnlyWhatIsMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, status string // dpkg's status of the package chromium; "" for none
		want         string // part of the script's last line
		installs     bool
	}{
		{"installed off PATH", "install ok installed", "chromium: installed (the package chromium) but not found: set CHROME_PATH to its binary (e.g. CHROME_PATH=", false},
		{"being upgraded", "install ok half-configured", "chromium: the package chromium is being installed or upgraded (dpkg: half-configured)", false},
		{"not installed", "", "chromium was installed but is still not found", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			browser := filepath.Join(dir, "lib", "chromium", "chromium") // the package's binary, off PATH
			for _, d := range []string{bin, filepath.Dir(browser)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, tool := range []string{"bash", "grep", "id", "uname", "env"} {
				p, err := exec.LookPath(tool)
				if err != nil {
					t.Fatalf("the script needs %s: %v", tool, err)
				}
				if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			calls := filepath.Join(dir, "calls")
			script := func(name, body string) {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/bash\necho \""+name+" $*\" >> "+calls+"\n"+body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(browser, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			status := ""
			if tc.status != "" {
				status = "printf '%s' '" + tc.status + "'; exit 0"
			}
			script("dpkg-query", `case "$1" in
-W) [ "$3" = chromium ] && { `+cmp.Or(status, "exit 1")+`; }; exit 1 ;;
-L) [ "$2" = chromium ] && echo /usr/share/doc/chromium && echo `+browser+`; exit 0 ;;
esac
exit 1
`)
			script("apt-cache", `[ "$2" = chromium ]`+"\n")
			script("apt-get", "exit 0\n")
			cmd := exec.Command(filepath.Join(bin, "bash"), "../../../../scripts/setup.sh", "chromium")
			cmd.Env = []string{"PATH=" + bin}
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("setup.sh succeeded with no browser on PATH:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("setup.sh said:\n%s\nwant %q", out, tc.want)
			}
			recorded, _ := os.ReadFile(calls)
			if installed := strings.Contains(string(recorded), "apt-get install"); installed != tc.installs {
				t.Fatalf("apt-get install run: %v, want %v; calls:\n%s", installed, tc.installs, recorded)
			}
			if tc.status == "install ok installed" && !strings.Contains(string(out), "CHROME_PATH="+browser) {
				t.Fatalf("setup.sh did not name the package's binary %s:\n%s", browser, out)
			}
		})
	}
}
