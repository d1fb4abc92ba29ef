package registry

// KindLeases is the transport kind of lease handovers, for tests that hold
// them on the network.
const KindLeases = kindLeases
