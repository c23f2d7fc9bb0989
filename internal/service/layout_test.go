package service

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRootImportsNothingOfTheDemo: the dependency points one way. No
// package of this module, its tests' included, imports anything under
// demo/, and its go.mod requires none of the modules only the demo needs
// (the browser's and the charts'), so the template is whole with demo/
// deleted.
func TestRootImportsNothingOfTheDemo(t *testing.T) {
	self, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatal(err)
	}
	module := strings.TrimSpace(string(self))
	out, err := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for pkg := range strings.SplitSeq(string(out), "\n") {
		if pkg == module+"/demo" || strings.HasPrefix(pkg, module+"/demo/") {
			t.Errorf("this module uses %s, a package of the demo", pkg)
		}
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, only := range []string{"github.com/chromedp/", "gonum.org/v1/plot"} {
		if strings.Contains(string(gomod), only) {
			t.Errorf("go.mod requires %s…, which only the demo uses", only)
		}
	}
}
