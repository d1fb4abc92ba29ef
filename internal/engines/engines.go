//go:build tools

// Package engines pins the storage and membership engines in go.mod before
// the packages that use them exist. It is never compiled into a build.
package engines

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/dgraph-io/badger/v4"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/lni/dragonboat/v4"
	_ "github.com/vmihailenco/msgpack/v5"
)
