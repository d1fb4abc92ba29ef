// Package xds serves a Muster registry's services over xDS, so that
// proxyless gRPC clients (grpc.NewClient("xds:///orders")) and Envoy take
// their endpoints, weights and health from Muster. It is a module of its
// own: gRPC and go-control-plane stay out of the library's graph.
//
// The server is go-control-plane's (v0.14): one LinearCache per resource
// type behind the Aggregated Discovery Service, state of the world and
// incremental (delta) alike. It is driven by Muster's watches, never by
// polling: the first client to name a service opens one registry watcher
// for it, shared by every client; the last one to drop it closes it.
//
//	srv, err := xds.New(xds.Config{Source: reg, ...}) // from DefaultConfig
//	gs := grpc.NewServer(grpc.Creds(tlsCreds))       // the host's server
//	srv.Register(gs)
//	go gs.Serve(lis)
//	defer gs.Stop(); defer srv.Close()
//
// # Resources
//
// A service has one resource of each type, all with the service's name
// (see Names): an API Listener whose route configuration (over ADS) has
// one virtual host for any authority and one route, every path to the
// Cluster of the same name; that Cluster, of type EDS over ADS; and its
// ClusterLoadAssignment. The Listener, RouteConfiguration and Cluster
// never change; a change of the service publishes its
// ClusterLoadAssignment alone, and the LinearCache wakes the clients
// subscribed to that name alone.
//
// # What maps to what
//
//   - Instance → LbEndpoint, address IP:Port. Disabled instances are not in
//     the view, and instances of weight 0 ("never selected" in Muster) are
//     left out.
//   - Weight → load_balancing_weight, ×100 (Muster's 0.01 is 1; at least
//     1). A locality's weight is the sum of its endpoints'. The Cluster asks
//     for RING_HASH (Config.Policy, the default RingHash) with no hash
//     policy on the route, so every RPC gets a random hash and lands on an
//     endpoint in proportion to its weight, as with Nacos's clients
//     (TestGRPCCallsFollowWeights: χ² over 2,400 calls). RoundRobin asks for
//     ROUND_ROBIN: gRPC then weighs localities but not endpoints.
//   - Health → health_status: the health Muster serves (Instance.Healthy)
//     as HEALTHY or UNHEALTHY. gRPC sends no new calls to UNHEALTHY
//     endpoints.
//   - Protection → a protected view (fewer healthy instances than the
//     service's ProtectThreshold) serves every instance as healthy, as
//     Muster's own queries do; so does the assignment: every endpoint is
//     HEALTHY, so that clients keep spreading calls instead of piling them
//     on the few healthy ones, which is what protection is for. The really
//     unhealthy ones carry {"real_healthy": false} in the endpoint
//     metadata under MetadataNamespace ("muster"), for a client or a filter
//     that wants to know.
//   - Locality → zone: the instance's Muster cluster name, or the value of
//     its metadata key Config.LocalityKey when set; region: Config.Region.
//     Every locality is at priority 0.
//   - A service Muster does not hold has an assignment with no endpoints.
//
// # Names
//
// Name gives a service's resource name, the shortest form that names it:
// "orders" (public namespace, DEFAULT_GROUP), "group@@orders",
// "ns@@group@@orders". ParseName accepts that canonical form only (so that
// one service has one set of resources); a name it refuses, or one past
// Config.MaxServices, is not served (the client sees no such resource) and
// counts in Stats.Refused. xdstp:// names are not served.
//
// # Wildcard
//
// A request that names nothing (Envoy's legacy wildcard) or "*" gets the
// resources currently served, that is the services other clients have
// named, never the registry's catalogue, and makes the server watch
// nothing more. gRPC's client always names its resources.
//
// # Flow control and errors
//
// A stream holds at most one response per type in flight: go-control-plane
// sends the next only after the client's request (its ACK), and computes it
// then from the newest state, so a client that stops reading or ACKing
// holds one response per type whatever the rate of changes, and never slows
// other clients or the registry down (TestStalledClientHoldsOneResponse).
// Muster's watcher skips to the newest view when the publisher falls
// behind. A stream may name at most Config.MaxNamesPerStream names; past
// it, it is ended with codes.ResourceExhausted (ErrTooManyNames).
//
// A NACK (a request with error_detail) is logged at Warn with the stream,
// the client's node ID, the type, the version it kept and its error, and
// counted in Stats.NACKs by type URL.
//
// # Versions, restarts and clusters
//
// Versions carry a random prefix per Server, so a client that reconnects to
// a restarted server, or to another node, is sent everything again. Run a
// Server on every node of a Muster cluster: each serves its node's view,
// which holds every node's registrations (TestGRPCClusterClientOnOneNode…);
// a client may connect to any. While no server answers, gRPC's client goes
// on from its last resources (TestGRPCServerRestart).
//
// # Security
//
// The package listens nowhere: Register adds the ADS service to a
// grpc.Server the host owns, with its listener and its credentials. The
// ADS port discloses the endpoints of every service a client names, in
// every namespace, and each named service costs a registry watcher (up to
// MaxServices in all). So listen on loopback, or serve it over TLS with
// client certificates (grpc.Creds with tls.RequireAndVerifyClientCert;
// gRPC's bootstrap takes "channel_creds": [{"type": "tls", ...}]) to the
// clients of the mesh only. The package adds no authentication of its own.
//
// # Performance
//
// BenchmarkFanout (go test -run '^$' -bench Fanout -benchtime 2000x):
// services of 10 endpoints, as many ADS clients as services, each watching
// 10, so that every service has 10 subscribers. With 1,000 services and
// 1,000 clients on the quiet 2-core development VM, a Muster write reached
// all its subscribers in a p50 of 0.47 ms (delta) and 0.40 ms (SotW), a p99
// of 2.7 and 2.3 ms, for about 1 ms of CPU per change; 5,570 bytes (delta)
// and 4,801 (SotW) were sent per change, against 5,498 and 4,729 with 100
// services: the bytes of a change do not grow with the number of
// services. Heap per client, both ends counted: about 42 KB. Under a load
// average of 25–30 the p99 grows to 100–143 ms (waiting for a core). The
// README's xDS section has the table.
package xds
