// Package mysqlcheck is the MySQL health checker: a health.Checker that runs a command on a
// MySQL or MariaDB server (Nacos's MYSQL check).
//
// # Usage
//
//	c, err := mysqlcheck.New(mysqlcheck.Config{}) // zero fields: defaults; opens no connection
//	hc := health.DefaultConfig()
//	hc.Checkers = map[model.CheckType]health.Checker{model.CheckMySQL: c}
//	s, err := health.NewScheduler(hc)
//	...
//	s.Close()
//	c.Close() // after the scheduler: it closes the cached connections
//
// # Rules
//
// It is a package of its own so that a registry that does not check MySQL does not link the
// driver. registry/node puts one in the scheduler's config.
//
// With the default command (model.DefaultMySQLCommand) only a writable primary is healthy: a
// replica fails with "read_only=ON", an ordinary failure. With another command the instance is
// healthy iff the command runs without error.
//
// An error the server reports (SQL syntax, access denied) is definite, as is a refused
// connection. A timeout is not.
//
// One *sql.DB with one connection is cached per (address, user, password), at most MaxDBs, the
// least recently used evicted, so that checks reuse their connection.
package mysqlcheck
