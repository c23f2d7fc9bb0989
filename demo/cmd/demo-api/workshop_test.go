package main

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/demo-api/demo-api/demo/internal/tools/desktest"
	"github.com/demo-api/demo-api/internal/service"
	"github.com/demo-api/demo-api/internal/tools/testenv"
)

// TestWorkshopAll runs demo-api workshop --all against a real server with
// the knobs on and the default TTL and lease (the expiry step gives its key
// a TTL of its own): every step passes, none is skipped.
func TestWorkshopAll(t *testing.T) {
	testenv.Long(t, "a long end-to-end walk (every workshop step against a server)")
	t.Parallel()
	desk := desktest.StartDesk(t, nil)
	base, _ := testenv.ServeInProcess(t, run, "PROVIDER_URL="+desk.URL, "DISPATCH_MAX_ATTEMPTS=3", "DISPATCH_FIRST_RETRY=200ms")
	var out strings.Builder
	err := run(testenv.Context(t), []string{"workshop", "--base", base, "--token", testenv.TokenAlice, "--all", "--delay", "1200ms",
		"--provider", desk.URL},
		func(string) string { return "" }, &out, io.Discard)
	if err != nil || strings.Contains(out.String(), "FAIL") || strings.Contains(out.String(), "SKIP") {
		t.Fatalf("workshop --all: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "PASS"); n != len(workshopSteps) {
		t.Fatalf("%d steps passed, want %d:\n%s", n, len(workshopSteps), out.String())
	}
}

// TestWorkshopFailsOnAServerWithoutKnobs: a step that cannot get the
// contract's answer (here, for want of the knobs) fails the run.
func TestWorkshopFailsOnAServerWithoutKnobs(t *testing.T) {
	t.Parallel()
	base, _ := testenv.ServeInProcess(t, run, "WORKSHOP=false")
	var out strings.Builder
	err := run(context.Background(), []string{"workshop", "--base", base, "--token", testenv.TokenAlice, "--step", "transient"},
		func(string) string { return "" }, &out, io.Discard)
	if e, ok := errors.AsType[*service.ExitError](err); !ok || e.Code != service.ExitRefused || !strings.Contains(out.String(), "WORKSHOP=true") {
		t.Fatalf("workshop against a server without knobs: %v\n%s", err, out.String())
	}
}

// TestJoinLine: a room's banner prints the line a participant pastes first,
// with the addresses other machines reach: the review desk on the API's
// address when it is this machine's loopback desk and the API listens
// beyond this machine (make run's room opens it there), the desk's own URL
// otherwise, and no DESK without one.
func TestJoinLine(t *testing.T) {
	t.Parallel()
	lan := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	for _, tt := range []struct {
		addr     *net.TCPAddr
		provider string
		want     string
		deskNote bool
	}{
		{lan, "http://127.0.0.1:8090", "\nAPI=http://192.0.2.7:8080 DESK=http://192.0.2.7:8090 ME=\n", true},
		{lan, "http://localhost:8090/", "\nAPI=http://192.0.2.7:8080 DESK=http://192.0.2.7:8090 ME=\n", true},
		{lan, "http://desk.example:8090/", "\nAPI=http://192.0.2.7:8080 DESK=http://desk.example:8090 ME=\n", false},
		{local, "http://127.0.0.1:8090", "\nAPI=http://127.0.0.1:8080 DESK=http://127.0.0.1:8090 ME=\n", false},
		{lan, "", "\nAPI=http://192.0.2.7:8080 ME=\n", false},
	} {
		var out strings.Builder
		printJoin(&out, tt.addr, tt.provider, nil)
		if !strings.Contains(out.String(), tt.want) || !strings.Contains(out.String(), "join at http://"+tt.addr.String()+"/workshop") {
			t.Errorf("printJoin(%s, %q) printed\n%s\nwant the line %q", tt.addr, tt.provider, out.String(), tt.want)
		}
		if note := strings.Contains(out.String(), "it must listen there too"); note != tt.deskNote {
			t.Errorf("printJoin(%s, %q): said where the desk must listen %v, want %v:\n%s", tt.addr, tt.provider, note, tt.deskNote, out.String())
		}
		if !strings.Contains(out.String(), "not $(whoami)") {
			t.Errorf("printJoin(%s, %q) does not ask for a name of one's own:\n%s", tt.addr, tt.provider, out.String())
		}
	}
}

// TestJoinLineGivesReachableHosts: a room's banner on every interface
// gives the addresses other machines reach (not a container bridge, a VPN,
// loopback or a link-local address), says which it left out, warns of the
// names lab machines share and says how to get ./bin/demo-api.
func TestJoinLineGivesReachableHosts(t *testing.T) {
	t.Parallel()
	ip := net.ParseIP
	ifs := []roomInterface{
		{Name: "lo", Up: true, Loopback: true, IPs: []net.IP{ip("127.0.0.1")}},
		{Name: "eth0", Up: true, IPs: []net.IP{ip("192.0.2.7"), ip("169.254.3.4"), ip("2001:db8::7")}},
		{Name: "docker0", Up: true, IPs: []net.IP{ip("172.17.0.1")}},
		{Name: "utun3", Up: true, IPs: []net.IP{ip("10.8.0.2")}},
		{Name: "wlan0", IPs: []net.IP{ip("198.51.100.9")}}, // down
	}
	var out strings.Builder
	printJoin(&out, &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "", ifs)
	joins := regexp.MustCompile(`join at (\S+)/workshop`).FindAllStringSubmatch(out.String(), -1)
	if len(joins) != 1 || joins[0][1] != "http://192.0.2.7:8080" {
		t.Fatalf("the banner offers %v, want only http://192.0.2.7:8080:\n%s", joins, out.String())
	}
	for _, want := range []string{"left out, as no room reaches them: 172.17.0.1 (docker0), 10.8.0.2 (utun3)",
		"nor root, student or ubuntu", "make build", "needs Go"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the banner does not say %q:\n%s", want, out.String())
		}
	}
}
