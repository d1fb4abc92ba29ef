package raftstore

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// A process killed between creating a memtable or value-log file and
// sizing it leaves a 0-byte file that Badger cannot open past
// (dgraph-io/badger#2207). The test makes that state; openBadger must
// open the directory with every committed key intact, and the reopened
// store must keep working across another close and open. (A plain
// badger.Open fails here, and leaks goroutines doing so, which is why the
// test does not show it.)
func TestOpenBadgerAfterCrashLeftEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	put := func(db *badger.DB, k, v string) {
		t.Helper()
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(k), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	get := func(db *badger.DB, k string) string {
		t.Helper()
		var v []byte
		err := db.View(func(txn *badger.Txn) error {
			it, err := txn.Get([]byte(k))
			if err != nil {
				return err
			}
			v, err = it.ValueCopy(nil)
			return err
		})
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		return string(v)
	}
	db, err := openBadger(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	put(db, "a", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"00099.mem", "000099.vlog"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		db, err = openBadger(dir, log)
		if err != nil {
			t.Fatalf("round %d: openBadger: %v", round, err)
		}
		if got := get(db, "a"); got != "1" {
			t.Fatalf("round %d: a = %q, want 1", round, got)
		}
		put(db, "b", "2")
		if got := get(db, "b"); got != "2" {
			t.Fatalf("round %d: b = %q, want 2", round, got)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
