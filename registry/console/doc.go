// Package console is Muster's web console: an http.Handler that shows a
// registry (its namespaces and services, a service's instances, an
// instance's history across the nodes, the cluster and a few charts) and
// lets an authorised operator patch instances, edit a persistent service's
// protection threshold and health checks, and deregister persistent
// instances.
//
//	c, err := console.New(console.Config{ // or DefaultConfig, then set Nodes
//		Nodes:     func() []console.Node { return []console.Node{{Registry: n.Registry(), Raft: n.Raft()}} },
//		Authorize: auth, // nil: no authentication, loopback only
//	})
//	err = c.Start(ctx) // the charts' sampler
//	defer c.Close()    // ends the event streams, stops the sampler
//	mux.Handle("/console/", http.StripPrefix("/console", c))
//
// # What it shows, and how it stays live
//
//   - Services (the page "/"): the namespaces, then a page of a namespace's
//     services (Registry.ListServices: search by name substring, or
//     group@@name, and paging), each with its kind, its instance count, how
//     many are really healthy, whether protection is on and its threshold.
//   - A service ("/service"): its instances by cluster, with their served
//     and real health (under protection every instance is served healthy),
//     weight, enabled flag, metadata, whether an operator's patch is laid
//     over them, and who publishes each: a session (of which node), client
//     beats (and which node runs their lease), or the persistent store.
//   - An instance ("/instance"): its history from Registry.Explain on every
//     node given, drawn as a timeline with a lane per node (registered,
//     beats missed, checks flipped, patched, removed and why) and listed,
//     with the active check's status and the countdown of a patch whose
//     instance is gone.
//   - The cluster ("/cluster"): the members and their state, the Raft
//     leader, each node's readiness, Distro records and pending syncs, Raft
//     applied and last index; a consistency check between two nodes on
//     demand (distro.Replicator.Compare); charts of the writes per second,
//     the 99th percentile of the watch delivery and the instance count per
//     node, sampled every SampleInterval into a ring of Samples points and
//     drawn as inline SVG.
//
// Every page opens an event stream (server-sent events, api/events) that
// sends the page's live part again, rendered by the server, when what it
// shows changes: the registry's watches drive it (Watch of the service shown,
// WatchServices and a Watch per service listed on the services page; the
// cluster page follows the sampler). No page reloads. A stream holds its
// watchers only while it is open; MaxStreams bounds how many are.
//
// The console reads and writes through the first node of Config.Nodes; the
// others add their views to the cluster page, the charts and the timelines
// (a process that runs several nodes, as examples/cluster does, passes all;
// one that runs one node passes it).
//
// # Why server-rendered HTML
//
// The pages are html/template pages embedded with go:embed, refreshed by
// HTML fragments the server renders for the event streams; about 250 lines
// of plain JavaScript (static/console.js) keep the token on requests, swap
// the fragments in, and run the confirmation dialogs. There is no framework,
// no bundler, no CDN and no build step: nothing to fetch, on a machine that
// reaches no network, and nothing a user must run. Escaping is
// html/template's, on the server, for every value (metadata holding markup
// shows as text), and the Content-Security-Policy allows no script but the
// console's own file. The charts and the timeline are SVG the server
// computes.
//
// # Writes
//
// A patch of an instance's weight and enabled flag (Registry.PatchInstance:
// it lays over what the publisher registered on every node, survives a
// re-registration, and is dropped PatchTTL after the instance is gone, which
// the instance page counts down), removing a patch, an edit of a persistent
// service's protection threshold and per-cluster health checks
// (Registry.UpdateService; a MySQL check's password is never shown, and is
// kept unless a new one is typed), and the deregistration of a persistent
// instance. Each is confirmed in a dialog first, is a POST with a JSON body
// (Content-Type application/json: another site's form cannot send one
// without a CORS preflight, which the console never grants; a request marked
// Sec-Fetch-Site cross-site is refused too) and is authorized by the server
// whatever the page showed.
//
// # Authentication and authorization
//
// Config.Authorize is asked for every request with the namespace concerned
// ("" for the cluster page, the charts and the consistency check) and
// whether it writes; ErrUnauthenticated answers 401 and shows the login
// form, ErrForbidden or any other error 403. A page asks the hook whether
// the user may also write, and leaves the buttons out when not (api/me tells
// the page's script too). The browser carries the token it got from
// Config.LoginURL as the accessToken query parameter on every request, the
// event streams' included (EventSource sends no headers), as Nacos's console
// does; the console sends Referrer-Policy no-referrer so that the token does
// not leak to links.
//
// With a nil Authorize anyone who reaches the handler reads and writes
// everything: mount it then on a loopback listener only. The console then
// refuses requests whose Host is not a loopback address or localhost, so a
// page of another site that rebinds its name to 127.0.0.1 cannot use it.
// Exposed beyond loopback, give it an Authorize and serve it over TLS (the
// token is a credential).
//
// # Cost
//
// A services page costs one ListServices and two cached Queries per service
// shown (no allocation for an unchanged service), so it stays fast at
// 10,000 services and more (BenchmarkServicesPage); a service page calls
// Explain for each instance shown (PageSize per page), which scans the
// node's journal; each chart sample calls Registry.Stats on every node,
// which walks the index.
//
// # Concurrency
//
// ServeHTTP may be called concurrently, before Start too. Close ends the
// open event streams and waits for them and the sampler.
//
// All calls into the registry, distro and raftstore are in backend.go,
// behind the engine interface.
package console
