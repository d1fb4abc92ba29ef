package distro

import "github.com/muster-io/muster/distro/membership"

// Member is one live node of the cluster (see package distro/membership).
type Member = membership.Member

// Membership tells which nodes are alive: Static here, or a gossip membership over
// hashicorp/memberlist (package distro/gossip). Its concurrency contract is on
// membership.Membership.
type Membership = membership.Membership
