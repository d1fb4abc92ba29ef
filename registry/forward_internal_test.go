package registry

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/muster-io/muster/model"
)

// TestForwardCodes: every error an owner can answer travels as its code and
// comes back matching the same sentinel (ErrClosed becomes ErrUnavailable:
// the owner is closing, not this node), with the owner and its message.
func TestForwardCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code fwdCode
		want error // nil: the response stands for no error
	}{
		{nil, codeOK, nil},
		{errNotOwner, codeNotOwner, errNotOwner},
		{fmt.Errorf("%w: beat instance x", ErrNotFound), codeNotFound, ErrNotFound},
		{fmt.Errorf("%w: svc is persistent", ErrKindMismatch), codeKindMismatch, ErrKindMismatch},
		{&model.ValidationError{Field: "instance.ip", Rule: "must parse"}, codeInvalid, model.ErrInvalid},
		{fmt.Errorf("%w: loading", ErrNotReady), codeNotReady, ErrNotReady},
		{ErrClosed, codeClosed, ErrUnavailable},
		{limitError("MaxInstances", 1, "%d held", 1), codeLimit, ErrLimit},
		{fmt.Errorf("%w: n9", ErrNotMember), codeNotMember, ErrNotMember},
		{fmt.Errorf("%w: x", ErrSessionInstance), codeSessionInstance, ErrSessionInstance},
		{errors.New("disk on fire"), codeOther, nil},
	} {
		name := "nil"
		if tc.err != nil {
			name = tc.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			code := codeOf(tc.err)
			if code != tc.code {
				t.Fatalf("codeOf = %d, want %d", code, tc.code)
			}
			resp := fwdResponse{Code: code}
			if tc.err != nil {
				resp.Msg = tc.err.Error()
			}
			// Through the wire, as a peer answers.
			b, err := model.Marshal(&resp)
			if err != nil {
				t.Fatal(err)
			}
			var back fwdResponse
			if err := model.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			got := back.err("n2")
			switch {
			case tc.err == nil:
				if got != nil {
					t.Fatalf("err = %v, want nil", got)
				}
			case tc.want == nil: // an error without a sentinel: the message, from the owner
				if got == nil || got.Error() != "registry: owner n2: disk on fire" {
					t.Fatalf("err = %v", got)
				}
			default:
				if !errors.Is(got, tc.want) {
					t.Fatalf("err = %v, want one matching %v", got, tc.want)
				}
				if want := fmt.Sprintf("(owner n2: %s)", tc.err.Error()); !strings.Contains(got.Error(), want) {
					t.Fatalf("err = %q, want it to say %q", got, want)
				}
			}
		})
	}
}

// TestForwardEndpoint: the ip:port whose owner serves a forwarded write is
// the instance's for a register and a beat that carries it, the key's
// otherwise.
func TestForwardEndpoint(t *testing.T) {
	inst := model.NewInstance(model.ServiceKey{Name: "svc"}, "10.0.0.1", 80)
	key := model.InstanceKey{Service: inst.Service, IP: "10.0.0.2", Port: 81}
	for _, tc := range []struct {
		op   fwdOp
		ip   string
		port int
	}{
		{fwdRegister, "10.0.0.1", 80},
		{fwdHeartbeatInstance, "10.0.0.1", 80},
		{fwdHeartbeat, "10.0.0.2", 81},
		{fwdDeregister, "10.0.0.2", 81},
	} {
		req := fwdRequest{Op: tc.op, Inst: inst, Key: key}
		if ip, port := req.endpoint(); ip != tc.ip || port != tc.port {
			t.Errorf("op %d: endpoint %s:%d, want %s:%d", tc.op, ip, port, tc.ip, tc.port)
		}
	}
}
