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

	"github.com/demo-api/demo-api/demo/internal/expedite"
	"github.com/demo-api/demo-api/demo/internal/web"
	"github.com/demo-api/demo-api/demo/migrations"
	"github.com/demo-api/demo-api/internal/demo"
	"github.com/demo-api/demo-api/internal/httpapi"
	"github.com/demo-api/demo-api/internal/service"
)

func main() { service.Exit(extension()) }

// extension is what the full demo adds to the template's program.
func extension() *service.Extension {
	var completeInterval time.Duration
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
		},
		Migrations: &service.Migrations{FS: migrations.FS, Table: migrations.Table},
		Serve: func(ctx context.Context, s *service.Serving) error {
			if s.Deps != nil {
				serveDemo(s)
			}
			if s.Desk == nil {
				return nil
			}
			chores := expedite.NewStore(s.Chores)
			svc := &demo.Service{Store: chores, RefusedTopics: s.Config.Refused(), CancelRule: expedite.CancelRule(chores)}
			runner, ops, err := completer(s.Config, chores, svc, s.Desk, s.Metrics.Outcome)
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
// the desk is there, and the pages.
func serveDemo(s *service.Serving) {
	store := expedite.NewStore(s.Store)
	svc := &demo.Service{Store: store, RefusedTopics: s.Config.Refused(), CancelRule: expedite.CancelRule(store)}
	s.Deps.Demo = svc
	deskFaults := s.Config.Workshop && s.Desk != nil
	if s.Desk != nil {
		s.Deps.Routes = func(srv *httpapi.Server) ([]httpapi.Route, error) {
			routes, err := expedite.Routes(srv, svc, store, s.Desk, store)
			if deskFaults {
				routes = append(routes, httpapi.Route{Method: http.MethodPut, Pattern: "/workshop/desk-faults",
					Handler: web.DeskFaults(s.Logger, web.SetDeskFaults(s.Desk))})
			}
			return routes, err
		}
	}
	pages := web.Handler(web.Config{Workshop: s.Config.Workshop, Room: s.Config.Room, TTL: s.Config.TTL, Lease: s.Config.Lease,
		DeskFaults: deskFaults, Expedite: s.Desk != nil})
	for _, p := range []string{"/", "/workshop", "/ui/*"} {
		s.Deps.Public = append(s.Deps.Public, httpapi.Route{Method: http.MethodGet, Pattern: p, Handler: pages})
	}
	s.Listening = func(addr *net.TCPAddr) {
		page := pageAddr(addr)
		fmt.Fprintf(s.Stdout, "demo-api in a browser: http://%s/ (create) and http://%s/workshop\n", page, page)
		if s.Config.Room {
			printJoin(s.Stdout, addr, s.Config.ProviderURL, localInterfaces())
		}
	}
}
