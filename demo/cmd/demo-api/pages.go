package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/demo-api/demo-api/demo/internal/room"
)

// pageAddr is the address a person on this machine opens the pages at: a
// server on every interface is reached at localhost too.
func pageAddr(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() {
		return net.JoinHostPort("localhost", strconv.Itoa(a.Port))
	}
	return a.String()
}

// printJoin tells a workshop room how to join a server listening at a: the
// page to open, and the line each participant pastes first in a terminal,
// ending it with a name of their own (the README's blocks read API, DESK
// and ME). The review desk is at providerURL; when that is this machine's
// loopback and the API listens beyond it, participants reach the desk at
// the API's address and the desk's port, where make run's room opens it.
func printJoin(w io.Writer, a *net.TCPAddr, providerURL string, ifs []roomInterface) {
	hosts, left := []string{a.IP.String()}, []string(nil)
	if a.IP.IsUnspecified() {
		hosts, left = roomHosts(ifs)
		if len(hosts) == 0 {
			hosts, left = append(hosts, left...), nil // none plainly reachable: show what there is
		}
		if len(hosts) == 0 {
			hosts = []string{"localhost"}
		}
	}
	desk, _ := url.Parse(providerURL)
	deskLocal := desk != nil && desk.Host != "" && (desk.Hostname() == "localhost" || net.ParseIP(desk.Hostname()).IsLoopback())
	fmt.Fprintf(w, "demo-api room: open the page, or paste the line under it in a terminal and end it with a name of your own "+
		"(lowercase letters, digits, '.', '_' or '-': not $(whoami), nor root, student or ubuntu, which lab machines share: "+
		"two people of one name share its keys):\n")
	if len(hosts) > 1 {
		fmt.Fprintf(w, "demo-api room: give the room the address its machines reach this one by (%d below, one per network)\n", len(hosts))
	}
	for _, h := range hosts {
		api := "http://" + net.JoinHostPort(h, strconv.Itoa(a.Port))
		line := "API=" + api
		switch {
		case desk == nil || desk.Host == "":
		case deskLocal && !loopback(a):
			line += " DESK=http://" + net.JoinHostPort(h, desk.Port())
		default:
			line += " DESK=" + strings.TrimSuffix(providerURL, "/")
		}
		fmt.Fprintf(w, "demo-api room: join at %s/workshop\n%s ME=\n", api, line)
	}
	if deskLocal && !loopback(a) {
		fmt.Fprintf(w, "demo-api room: DESK is the review desk on port %s of the same address: it must listen there too "+
			"(make run's room opens it; else PROVIDER_LISTEN_ADDR=0.0.0.0:%s demo-api provider)\n", desk.Port(), desk.Port())
	}
	if len(left) > 0 {
		fmt.Fprintf(w, "demo-api room: left out, as no room reaches them: %s (container, VM or VPN interfaces)\n", strings.Join(left, ", "))
	}
	fmt.Fprintf(w, "demo-api room: each participant's token is %s<name>: Authorization: Bearer dev-$ME\n", room.TokenPrefix)
	fmt.Fprintf(w, "demo-api room: the blocks' demo-api send lines need ./bin/demo-api: in the demo/ folder of a clone, make build (or go build -o bin/demo-api ./cmd/demo-api), which needs Go 1.26\n")
}
