package raftstore

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// A process killed between creating a memtable or value-log file and
// sizing it leaves a 0-byte file that Badger cannot open past
// (dgraph-io/badger#2207). The test makes that state from a copy of a
// live DB's directory, as a crash leaves it: writes still only in its
// memtable's file (not empty, which must stay), and the empty files.
// openBadger must open it with every write intact, and the store must
// keep working across another close and open. (A plain badger.Open fails
// here, and leaks goroutines doing so, which is why the test does not
// show it.)
func TestOpenBadgerAfterCrashLeftEmptyFiles(t *testing.T) {
	live, crashed := t.TempDir(), t.TempDir()
	log := slog.New(slog.DiscardHandler)
	db, err := openBadger(live, log)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		badgerPut(t, db, k, "v-"+k)
	}
	// The crash: the files as they are now (the writes are in the
	// memtable's file, mapped), and the empty ones of a half-made file.
	mems := 0
	copyDir(t, live, crashed, func(name string, size int64) {
		if filepath.Ext(name) == ".mem" && size > 0 {
			mems++
		}
	})
	if mems == 0 {
		t.Fatal("no memtable file with data to keep: the test does not show that only empty files go")
	}
	for _, name := range []string{"00099.mem", "000099.vlog"} {
		if err := os.WriteFile(filepath.Join(crashed, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 2 {
		db, err := openBadger(crashed, log)
		if err != nil {
			t.Fatalf("round %d: openBadger: %v", round, err)
		}
		for _, k := range keys {
			if got := badgerGet(t, db, k); got != "v-"+k {
				t.Fatalf("round %d: %s = %q, want v-%s", round, k, got, k)
			}
		}
		badgerPut(t, db, "d", "v-d")
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, "d")
	}
}

// The clean-up never touches the directory of a live DB: a Node started
// on a Dir that another one has open leaves that one's files alone (here
// an empty file standing for one the live DB is creating), and
// badger.Open refuses the directory.
func TestOpenBadgerLeavesALiveDirectory(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	db, err := openBadger(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	making := filepath.Join(dir, "00077.mem")
	if err := os.WriteFile(making, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeCrashLeftovers(dir, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(making); err != nil {
		t.Fatalf("the live DB's file: %v", err)
	}
	if err := os.Remove(making); err != nil { // before db.Close flushes
		t.Fatal(err)
	}
}

func badgerPut(t *testing.T, db *badger.DB, k, v string) {
	t.Helper()
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(k), []byte(v)) }); err != nil {
		t.Fatal(err)
	}
}

func badgerGet(t *testing.T, db *badger.DB, k string) string {
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

// copyDir copies the regular files of from into to, telling saw each
// file's name and size.
func copyDir(t *testing.T, from, to string, saw func(name string, size int64)) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(dst, src)
		_ = src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		saw(e.Name(), n)
	}
}
