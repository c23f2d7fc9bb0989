// Command demo-api is the full worked example: the template's program
// (package service) with the stand-in review desk, the expedite (an
// operation of several steps) and its completer, the pages and the
// workshop. Its commands are the template's and these:
//
//	demo-api provider         run the review desk, the external service
//	demo-api workshop         walk through every branch against a running server
//	demo-api resume-run       resume a run of several steps that needs attention
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/demo-api/demo-api/demo/internal/deskclient"
	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/profiler"
	"github.com/demo-api/demo-api/demo/internal/room"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/auth"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/service"
)

func main() { service.Exit(extension()) }

// extension is what the full demo adds to the template's program.
func extension() *service.Extension {
	var completeInterval time.Duration
	var inRoom bool // WORKSHOP_ROOM
	var pprofAddr string
	return &service.Extension{
		Commands: []service.Command{
			{Name: "provider", Usage: "run the review desk, the external service requests are handed to", Run: providerCmd},
			{Name: "workshop", Usage: "walk through every branch of the contract against a running server",
				Run: func(ctx context.Context, args []string, _ func(string) string, stdout, _ io.Writer) error {
					return workshopCmd(ctx, args, stdout)
				}},
			{Name: "resume-run", Usage: "resume a run of several steps that needs attention (--actor, --operation, --key)", Run: resumeRunCmd},
		},
		Settings: func(s *service.Settings) {
			s.Duration(&completeInterval, "COMPLETE_INTERVAL", "complete-interval", "1s",
				"how often the completer looks for expedites whose runner died or gave up")
			s.Bool(&inRoom, "WORKSHOP_ROOM", "workshop-room", false, "a workshop room: any bearer token dev-<name> is the participant dev-<name>, "+
				"and API_TOKENS may be empty (with WORKSHOP only; unsafe for anything but a workshop)")
			s.String(&pprofAddr, "PPROF_ADDR", "pprof-listen", "", "serve net/http/pprof on this address of this machine only, e.g. 127.0.0.1:6060 (serve only); empty: no profiler")
		},
		// A workshop room authenticates its participants beside API_TOKENS.
		Authenticate: func(c service.Config, tokens auth.Tokens) (func(string) (string, error), error) {
			if !inRoom {
				return nil, nil
			}
			return room.Open(c.Workshop, tokens)
		},
		Migrations: &service.Migrations{FS: migrations.FS, Table: migrations.Table},
		Serve: func(ctx context.Context, s *service.Serving) error {
			if s.Deps != nil {
				serveDemo(s, inRoom)
				if err := profile(s, pprofAddr); err != nil {
					return err
				}
			}
			desk := deskOf(s)
			if desk == nil {
				return nil
			}
			chores := expedite.NewStore(s.Chores)
			svc := &demo.Service{Store: chores, RefusedTopics: s.Config.Refused()}
			runner, ops, err := completer(s.Config, chores, svc, desk, s.Metrics.Outcome)
			if err != nil {
				return err
			}
			s.Chore(func(ctx context.Context) { complete(ctx, s.Logger, runner, ops, completeInterval) })
			return nil
		},
	}
}

// serveDemo adds the demo's parts to serve's API: the rule between a cancel
// and an expedite, the expedite's routes and the desk's fault knobs when
// the desk is there, and the pages; inRoom says a workshop room is open.
func serveDemo(s *service.Serving, inRoom bool) {
	store := expedite.NewStore(s.Store)
	svc := &demo.Service{Store: store, RefusedTopics: s.Config.Refused()}
	s.Deps.Demo = expedite.Service{Service: svc, Expedites: store}
	desk := deskOf(s)
	deskFaults := s.Config.Workshop && desk != nil
	if desk != nil {
		s.Deps.Routes = func(srv *httpapi.Server) ([]httpapi.Route, error) {
			routes, err := expedite.Routes(srv, svc, store, desk, store)
			if deskFaults {
				routes = append(routes, httpapi.Route{Method: http.MethodPut, Pattern: "/workshop/desk-faults",
					Handler: web.DeskFaults(s.Logger, web.SetDeskFaults(desk))})
			}
			return routes, err
		}
	}
	pages := web.Handler(web.Config{Workshop: s.Config.Workshop, Room: inRoom, TTL: s.Config.TTL, Lease: s.Config.Lease,
		DeskFaults: deskFaults, Expedite: desk != nil})
	for _, p := range []string{"/", "/workshop", "/ui/*"} {
		s.Deps.Public = append(s.Deps.Public, httpapi.Route{Method: http.MethodGet, Pattern: p, Handler: pages})
	}
	s.Listening = func(addr *net.TCPAddr) {
		page := pageAddr(addr)
		fmt.Fprintf(s.Stdout, "demo-api in a browser: http://%s/ (create) and http://%s/workshop\n", page, page)
		if inRoom {
			s.Logger.Warn("WORKSHOP_ROOM is on: any bearer token dev-<name> is accepted as the participant dev-<name>, "+
				"with no secret; anyone who reaches the server may act as any participant. Only for a workshop", "addr", addr.String())
			printJoin(s.Stdout, addr, s.Config.ProviderURL, localInterfaces())
		}
	}
}

// profile serves the profiler on addr (none if empty) beside serve until it
// stops, and prints where right after serve's address line.
func profile(s *service.Serving, addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := profiler.Listen(addr)
	if err != nil {
		return err
	}
	s.Chore(func(ctx context.Context) {
		if err := profiler.Serve(ctx, s.Logger, ln); err != nil {
			s.Logger.Warn("pprof server stopped", "err", err)
		}
	})
	listening := s.Listening
	s.Listening = func(addr *net.TCPAddr) {
		profiler.Announce(s.Stdout, "demo-api", ln)
		listening(addr)
	}
	return nil
}

// deskOf is the demo's client of the review desk that serve hands requests
// to (PROVIDER_URL), for the expedite's calls and the desk's fault knobs;
// nil without a desk. Like the dispatcher's, it keeps a connection per call
// in flight.
func deskOf(s *service.Serving) *deskclient.Client {
	if s.Desk == nil {
		return nil
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return deskclient.New(s.Config.ProviderURL, &http.Client{Transport: t})
}
