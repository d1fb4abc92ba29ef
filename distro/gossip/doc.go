// Package gossip is a distro membership over hashicorp/memberlist: SWIM failure detection and
// gossip, this node's transport address carried in its node meta, and a periodic re-join of the
// seeds, which heals long partitions that memberlist does not heal by itself.
//
// # Usage
//
//	cfg := gossip.DefaultConfig()
//	cfg.NodeID = "n1"
//	cfg.SecretKey = key                     // 16, 24 or 32 bytes, the same on every node
//	cfg.TransportAddr = tcp.AdvertiseAddr() // what peers dial for this node's transport
//	cfg.Seeds = []string{"10.0.0.2:7946"}
//	m, err := gossip.New(cfg) // validates, starts nothing
//	err = m.Start(ctx)        // binds, joins the seeds
//	dc.Membership = m         // a distro.Config's
//	addr, err := m.Addr("n2") // a member's transport address (for transport.TCPConfig.Resolve)
//	err = m.Close()           // leaves the cluster, then shuts down (Kill skips the leave)
//
// # Rules
//
// It is a package of its own so that distro, and a registry built on it, do not link
// memberlist (and its init) unless the host uses it. distro.Static is the membership driven by
// hand.
//
// Gossip is authenticated and encrypted with a key. Validate refuses a config without one
// unless Insecure is set. Keys rotate on a running cluster: AddKey everywhere, then UseKey
// everywhere, then RemoveKey everywhere.
//
// It binds 127.0.0.1 unless BindAddr says otherwise; it never binds a wildcard unless asked.
//
// Members are sorted by ID. Subscribers are called from one notifier goroutine, with the latest
// list after each change.
//
// Memberlist always runs on real time; Config.Clock times only the re-join loop.
package gossip
