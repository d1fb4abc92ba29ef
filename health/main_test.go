package health

import (
	"fmt"
	"os"
	"testing"
)

// mysqlSkipReason is why the MySQL checker's tests skip, or "".
func mysqlSkipReason() string {
	if os.Getenv("MUSTER_TEST_MYSQL_DSN") != "" {
		return ""
	}
	return "MUSTER_TEST_MYSQL_DSN is not set: no MariaDB to check (.ci/run starts one)"
}

// TestMain says once why the MySQL tests skip. go test shows nothing of a
// passing package but its "ok" line (t.Skip messages only with -v), so the
// note also goes to the terminal, when there is one: a plain `go test ./...`
// at a shell shows it. CI, which has no terminal, sets the variable.
func TestMain(m *testing.M) {
	if why := mysqlSkipReason(); why != "" {
		msg := "health: MySQL checker tests skipped: " + why + "\n"
		fmt.Print(msg) // with -v, and in the output of a failed run
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			_, _ = tty.WriteString(msg)
			_ = tty.Close()
		}
	}
	os.Exit(m.Run())
}
