package registry

import (
	"time"

	"github.com/muster-io/muster/model"
)

// KindLeases is the transport kind of lease handovers, for tests that hold
// them on the network.
const KindLeases = kindLeases

// Hooks for the external tests: the forwarding wire, as a peer speaks it.

// KindForward is the transport kind of forwarded writes.
const KindForward = kindForward

// ForwardRegister returns the body of a forwarded register of inst.
func ForwardRegister(inst model.Instance) []byte {
	b, err := model.Marshal(&fwdRequest{Op: fwdRegister, Inst: inst})
	if err != nil {
		panic(err)
	}
	return b
}

// ForwardDeregister returns the body of a forwarded deregister of key.
func ForwardDeregister(key model.InstanceKey) []byte {
	b, err := model.Marshal(&fwdRequest{Op: fwdDeregister, Key: key})
	if err != nil {
		panic(err)
	}
	return b
}

// ForwardResult decodes a forwarded write's answer into the error it stands
// for.
func ForwardResult(owner string, body []byte) error {
	var resp fwdResponse
	if err := model.Unmarshal(body, &resp); err != nil {
		return err
	}
	return resp.err(owner)
}

// LeaseHandoff returns the body of a lease handover of inst, last beaten
// age ago.
func LeaseHandoff(inst model.Instance, age time.Duration) []byte {
	b, err := model.Marshal(&leaseHandoff{Leases: []handedLease{{Inst: inst, Age: age}}})
	if err != nil {
		panic(err)
	}
	return b
}
