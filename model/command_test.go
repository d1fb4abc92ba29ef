package model

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"testing"
)

// goldenCommands are commands with every field the ops use, and
// goldenEncodings their msgpack encodings as written by raftstore before
// the command model moved to model (commit 50c83dd): the Raft log's format,
// which must never change.
func goldenCommands() []Command {
	w, en := 2.5, false
	return []Command{
		{Op: OpCreateService, Service: Service{Key: ServiceKey{Namespace: "ns", Group: "g", Name: "svc"}, ProtectThreshold: 0.5,
			Metadata: NewMetadata(map[string]string{"a": "1"}),
			Clusters: []Cluster{{Name: "c1", HealthCheck: HealthCheck{Type: CheckHTTP, Port: 8080, Path: "/h", Headers: NewMetadata(map[string]string{"X": "y"}), ExpectedCodes: []int{200, 204}}}}}},
		{Op: OpUpdateService, Upsert: true, Service: Service{Key: ServiceKey{Name: "svc"}, Ephemeral: true}},
		{Op: OpDeleteService, SvcKey: ServiceKey{Namespace: "ns", Group: "g", Name: "svc"}},
		{Op: OpPutInstance, Instance: Instance{ID: "id1", Service: ServiceKey{Name: "svc"}, Cluster: "c1", IP: "10.0.0.1", Port: 8080, Weight: 1, Healthy: true, Enabled: true, Metadata: NewMetadata(map[string]string{"k": "v", "a": "b"})}},
		{Op: OpDeleteInstance, Key: InstanceKey{Service: ServiceKey{Name: "svc"}, Cluster: "c1", IP: "10.0.0.1", Port: 8080}},
		{Op: OpPatchInstance, Patch: InstancePatch{Key: InstanceKey{Service: ServiceKey{Name: "svc"}, IP: "10.0.0.1", Port: 65535}, Weight: &w, Enabled: &en, Metadata: NewMetadata(map[string]string{"p": "q"})}},
		{Op: OpRemovePatch, Key: InstanceKey{Service: ServiceKey{Name: "svc"}, IP: "::1", Port: 1}},
		{Op: OpSetHealth, Key: InstanceKey{Service: ServiceKey{Name: "svc"}, IP: "h.example", Port: 300}, Healthy: true},
	}
}

var goldenEncodings = []string{
	"86a26f70cc01a373766385a36b657983a26e73a26e73a567726f7570a167a46e616d65a3737663a9657068656d6572616cc2a770726f74656374cb3fe0000000000000a26d6481a161a131a8636c7573746572739182a46e616d65a26331a5636865636b85a474797065a448545450a4706f7274cd1f90a470617468a22f68a76865616465727381a158a179a5636f64657392ccc8cccca4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"87a26f70cc02a373766382a36b657981a46e616d65a3737663a9657068656d6572616cc3a27570c3a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"86a26f70cc03a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657983a26e73a26e73a567726f7570a167a46e616d65a3737663a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"86a26f70cc04a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e73748aa26964a3696431a373766381a46e616d65a3737663a7636c7573746572a26331a26970a831302e302e302e31a4706f7274cd1f90a6776569676874cb3ff0000000000000a76865616c746879c3a7656e61626c6564c3a9657068656d6572616cc2a26d6482a161a162a16ba176a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"86a26f70cc05a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657984a373766381a46e616d65a3737663a7636c7573746572a26331a26970a831302e302e302e31a4706f7274cd1f90a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"86a26f70cc06a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636884a36b657983a373766381a46e616d65a3737663a26970a831302e302e302e31a4706f7274cdffffa6776569676874cb4004000000000000a7656e61626c6564c2a26d6481a170a171",
	"86a26f70cc07a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a3737663a26970a33a3a31a4706f727401a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400",
	"87a26f70cc08a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657983a373766381a46e616d65a3737663a26970a9682e6578616d706c65a4706f7274cd012ca5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400a76865616c746879c3",
}

// goldenEntry is a Raft entry of raftstore at 50c83dd (version byte, entry
// ID 1…16, then the array of goldenCommands()[3:5]), kept here so that the
// fast decoder of batches is held to it as well.
const goldenEntry = "010102030405060708090a0b0c0d0e0f109286a26f70cc04a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e73748aa26964a3696431a373766381a46e616d65a3737663a7636c7573746572a26331a26970a831302e302e302e31a4706f7274cd1f90a6776569676874cb3ff0000000000000a76865616c746879c3a7656e61626c6564c3a9657068656d6572616cc2a26d6482a161a162a16ba176a36b657983a373766381a46e616d65a0a26970a0a4706f727400a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f72740086a26f70cc05a373766382a36b657981a46e616d65a0a9657068656d6572616cc2a4736b657981a46e616d65a0a4696e737487a373766381a46e616d65a0a26970a0a4706f727400a6776569676874cb0000000000000000a76865616c746879c2a7656e61626c6564c2a9657068656d6572616cc2a36b657984a373766381a46e616d65a3737663a7636c7573746572a26331a26970a831302e302e302e31a4706f7274cd1f90a5706174636881a36b657983a373766381a46e616d65a0a26970a0a4706f727400"

// TestCommandGolden: today's encoding of every op is byte for byte the one
// written before the move, and those bytes decode to the same commands
// (through Unmarshal and through DecodeCommands).
func TestCommandGolden(t *testing.T) {
	cmds := goldenCommands()
	for i := range cmds {
		want, err := hex.DecodeString(goldenEncodings[i])
		if err != nil {
			t.Fatal(err)
		}
		got, err := cmds[i].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", cmds[i].Op, got, want)
		}
		var dec Command
		if err := Unmarshal(want, &dec); err != nil {
			t.Fatalf("%s: %v", cmds[i].Op, err)
		}
		if !reflect.DeepEqual(dec, cmds[i]) {
			t.Errorf("%s: golden bytes decode to %+v, want %+v", cmds[i].Op, dec, cmds[i])
		}
	}
}

// TestUnmarshalCommandsGolden: the golden bytes take the hand decoder (not
// msgpack's) and decode to the golden commands.
func TestUnmarshalCommandsGolden(t *testing.T) {
	entry, err := hex.DecodeString(goldenEntry)
	if err != nil {
		t.Fatal(err)
	}
	d := cmdDecoder{b: entry[17:]}
	got, ok := d.commands(nil)
	if !ok || d.off != len(entry)-17 {
		t.Fatal("the hand decoder refused the golden entry")
	}
	if want := goldenCommands()[3:5]; !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	var all [][]byte
	for _, h := range goldenEncodings {
		b, _ := hex.DecodeString(h)
		all = append(all, b)
	}
	batch := append([]byte{0x98}, bytes.Join(all, nil)...)
	d = cmdDecoder{b: batch}
	if got, ok := d.commands(nil); !ok || !reflect.DeepEqual(got, goldenCommands()) {
		t.Fatalf("hand decoder: %t, %+v", ok, got)
	}
	got, err = UnmarshalCommands(batch, DecodeOptions{})
	if err != nil || !reflect.DeepEqual(got, goldenCommands()) {
		t.Fatalf("UnmarshalCommands: %v, %+v", err, got)
	}
}
