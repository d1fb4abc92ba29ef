package model

import (
	"fmt"
	"time"
)

// Mirrors of the wire types other packages decode with Unmarshal (model may
// not import them). They copy the Go types and msgpack tags field for field,
// so that the decoding bound is tested on the shapes the project uses.

// distro/wire.go
type mWireRecord struct {
	_        struct{} `msgpack:",as_array"`
	Key      string
	Kind     uint8
	Owner    string
	Revision uint64
	Deleted  bool
	Payload  []byte
}

type mVersion struct {
	_       struct{} `msgpack:",as_array"`
	Key     string
	Rev     uint64
	Deleted bool
	Owner   string
}

type mSyncMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records []mWireRecord
}

type mVerifyReq struct {
	_      struct{} `msgpack:",as_array"`
	Digest []byte
}

type mVerifyResp struct {
	_        struct{} `msgpack:",as_array"`
	Buckets  []uint32
	Versions []mVersion
}

type mRepairMsg struct {
	_       struct{} `msgpack:",as_array"`
	Records []mWireRecord
	Drop    []mVersion
}

type mSnapReq struct {
	_    struct{} `msgpack:",as_array"`
	From uint32
	Max  uint32
}

type mSnapResp struct {
	_       struct{} `msgpack:",as_array"`
	Records []mWireRecord
	Next    uint32
	Done    bool
}

// registry/forward.go (registry/replicate.go's payload is model's
// InstanceList)
type mFwdRequest struct {
	Op   uint8       `msgpack:"op"`
	Inst Instance    `msgpack:"inst,omitempty"`
	Key  InstanceKey `msgpack:"key,omitempty"`
}

type mFwdResponse struct {
	Code     uint8         `msgpack:"c"`
	Msg      string        `msgpack:"m,omitempty"`
	Interval time.Duration `msgpack:"iv,omitempty"`
}

// transport/handshake.go
type mHello struct {
	Magic   string `msgpack:"m,omitempty"`
	Version uint8  `msgpack:"v,omitempty"`
	Node    string `msgpack:"n,omitempty"`
	To      string `msgpack:"t,omitempty"`
	Nonce   []byte `msgpack:"c,omitempty"`
	Proof   []byte `msgpack:"p,omitempty"`
	Status  uint8  `msgpack:"s,omitempty"`
}

// raftstore/command.go and sm.go
type mCommand struct {
	Op       uint8         `msgpack:"op"`
	Service  Service       `msgpack:"svc,omitempty"`
	Upsert   bool          `msgpack:"up,omitempty"`
	SvcKey   ServiceKey    `msgpack:"skey,omitempty"`
	Instance Instance      `msgpack:"inst,omitempty"`
	Key      InstanceKey   `msgpack:"key,omitempty"`
	Patch    InstancePatch `msgpack:"patch,omitempty"`
	Healthy  bool          `msgpack:"healthy,omitempty"`
}

type mSnapRecord struct {
	K []byte `msgpack:"k"`
	V []byte `msgpack:"v"`
}

// wireTargets returns a fresh pointer to every destination type decoded from
// untrusted bytes in the project, model's own and the mirrors.
func wireTargets() []any {
	return []any{
		&Instance{}, &Service{}, &InstancePatch{}, &Query{}, &ServiceView{}, &Delta{}, &Metadata{}, &InstanceKey{}, &ServiceKey{},
		&mSyncMsg{}, &mVerifyReq{}, &mVerifyResp{}, &mRepairMsg{}, &mSnapReq{}, &mSnapResp{},
		&InstanceList{}, &mFwdRequest{}, &mFwdResponse{}, &mHello{},
		&mCommand{}, &[]mCommand{}, &mSnapRecord{},
	}
}

// benchInstances returns n realistic instances of one service.
func benchInstances(n int) []Instance {
	insts := make([]Instance, n)
	for i := range insts {
		inst := NewInstance(ServiceKey{Namespace: "prod", Group: "payments", Name: "com.example.payments.Gateway"}, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), 8080)
		inst.Cluster = "eu-west-1a"
		inst.Metadata = NewMetadata(map[string]string{"version": "2.14.3", "zone": "eu-west-1a", "protocol": "grpc", "preserved.register.source": "SPRING_CLOUD"})
		insts[i] = inst
	}
	return insts
}
