package mysqlcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/model"
	"go.uber.org/goleak"
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
		msg := "health/mysqlcheck: MySQL checker tests skipped: " + why + "\n"
		fmt.Print(msg) // with -v, and in the output of a failed run
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			_, _ = tty.WriteString(msg)
			_ = tty.Close()
		}
	}
	os.Exit(m.Run())
}

func tcpTarget(t *testing.T, addr string) health.Target {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return health.Target{IP: host, Port: p}
}

// mysqlTarget returns the MariaDB of MUSTER_TEST_MYSQL_DSN (a go-sql-driver DSN of a user
// allowed to SET GLOBAL read_only; .ci/run makes one) as a target with the default command,
// and an admin connection. It skips the test when the variable is unset.
func mysqlTarget(t *testing.T) (health.Target, *sql.DB) {
	t.Helper()
	dsn := os.Getenv("MUSTER_TEST_MYSQL_DSN")
	if why := mysqlSkipReason(); why != "" {
		t.Skip(why)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("MUSTER_TEST_MYSQL_DSN: %v", err)
	}
	tg := tcpTarget(t, cfg.Addr)
	tg.Check = model.HealthCheck{Type: model.CheckMySQL, User: cfg.User, Password: cfg.Passwd}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	return tg, admin
}

func TestMySQLChecker(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after mysqlTarget's cleanup
	tg, admin := mysqlTarget(t)
	ctx := context.Background()
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("primary is healthy", func(t *testing.T) {
		r := c.Check(ctx, tg)
		if !r.Healthy || r.Reason != "read_only=OFF" {
			t.Fatalf("%+v, want healthy, read_only=OFF", r)
		}
	})

	t.Run("read_only replica is unhealthy", func(t *testing.T) {
		if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only=ON"); err != nil {
			t.Fatalf("SET GLOBAL read_only=ON: %v", err)
		}
		t.Cleanup(func() {
			if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only=OFF"); err != nil {
				t.Errorf("restoring read_only: %v", err)
			}
		})
		r := c.Check(ctx, tg)
		if r.Healthy || r.Definite || r.Reason != "read_only=ON" {
			t.Fatalf("%+v, want an ordinary failure, read_only=ON", r)
		}
		// A custom command only needs to run.
		custom := tg
		custom.Check.Command = "SELECT 1"
		if r := c.Check(ctx, custom); !r.Healthy || r.Reason != "ok" {
			t.Fatalf("custom command on the replica: %+v, want healthy", r)
		}
	})

	t.Run("default command spelled differently", func(t *testing.T) {
		alt := tg
		alt.Check.Command = "  SHOW GLOBAL VARIABLES WHERE variable_name='read_only';"
		if r := c.Check(ctx, alt); !r.Healthy || r.Reason != "read_only=OFF" {
			t.Fatalf("%+v, want healthy, read_only=OFF", r)
		}
	})

	t.Run("wrong password is definite", func(t *testing.T) {
		bad := tg
		bad.Check.Password = tg.Check.Password + "-wrong"
		r := c.Check(ctx, bad)
		if r.Healthy || !r.Definite || !strings.Contains(r.Reason, "1045") {
			t.Fatalf("%+v, want a definite failure, error 1045 (access denied)", r)
		}
	})

	t.Run("SQL error is definite", func(t *testing.T) {
		bad := tg
		bad.Check.Command = "SELEC 1"
		r := c.Check(ctx, bad)
		if r.Healthy || !r.Definite || !strings.Contains(r.Reason, "mysql error") {
			t.Fatalf("%+v, want a definite failure, SQL error", r)
		}
	})

	t.Run("connections are reused", func(t *testing.T) {
		// One pool per (address, user, password): tg's and the wrong password's.
		if n := c.cached(); n != 2 {
			t.Fatalf("%d pools cached, want 2", n)
		}
		var before int
		if err := admin.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='CONNECTIONS'").Scan(&before); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if r := c.Check(ctx, tg); !r.Healthy {
				t.Fatalf("%+v", r)
			}
		}
		var after int
		if err := admin.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='CONNECTIONS'").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Fatalf("5 checks opened %d connections, want 0", after-before)
		}
	})
}

func TestMySQLCheckerCacheBounded(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after mysqlTarget's cleanup
	tg, _ := mysqlTarget(t)
	c, _ := New(Config{MaxDBs: 2})
	defer c.Close()
	for _, pw := range []string{"a", "b", "c", tg.Check.Password} {
		x := tg
		x.Check.Password = pw
		c.Check(context.Background(), x)
		if n := c.cached(); n > 2 {
			t.Fatalf("%d pools cached, want <= 2", n)
		}
	}
	if r := c.Check(context.Background(), tg); !r.Healthy {
		t.Fatalf("after evictions: %+v", r)
	}
}

// Without a server: a refused connection is definite, and a closed checker fails.
func TestMySQLCheckerRefusedAndClosed(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := tcpTarget(t, ln.Addr().String())
	_ = ln.Close()
	tg.Check = model.HealthCheck{Type: model.CheckMySQL, User: "u", Password: "p"}
	c, _ := New(Config{})
	r := c.Check(context.Background(), tg)
	if r.Healthy || !r.Definite || r.Reason != "connection refused" {
		t.Fatalf("%+v, want a definite failure, connection refused", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if r := c.Check(context.Background(), tg); r.Healthy || r.Reason != "checker closed" {
		t.Fatalf("after Close: %+v", r)
	}
}

func TestNewMySQLCheckerRejectsNegatives(t *testing.T) {
	for _, cfg := range []Config{{Timeout: -1}, {MaxDBs: -1}, {IdleTimeout: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// End to end on MariaDB, with the real clock and short intervals: read_only=ON turns the
// primary unhealthy after 3 checks, OFF turns it back after 3.
func TestSchedulerMySQLReadOnly(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after mysqlTarget's cleanup
	tg, admin := mysqlTarget(t)
	ctx := context.Background()
	flips := make(chan bool, 4)
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := health.DefaultConfig()
	cfg.Checkers = map[model.CheckType]health.Checker{model.CheckMySQL: c}
	cfg.FirstIntervalMin, cfg.FirstIntervalMax = 10*time.Millisecond, 20*time.Millisecond
	cfg.MySQLInterval = health.Interval{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Factor: 0.5}
	cfg.OnTransition = func(_ model.InstanceKey, healthy bool, _ health.Status) { flips <- healthy }
	s, err := health.NewScheduler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := model.InstanceKey{Service: model.ServiceKey{Name: "db"}, IP: tg.IP, Port: tg.Port}
	s.Set(k, tg, true)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	next := func() bool {
		select {
		case h := <-flips:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("no flip in 10s")
			return false
		}
	}
	if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only=ON"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "SET GLOBAL read_only=OFF") })
	if next() {
		t.Fatal("flip to healthy on read_only=ON")
	}
	if st, _ := s.Status(k); st.Last.Reason != "read_only=ON" || st.ConsecutiveFail < 3 {
		t.Fatalf("%+v", st)
	}
	if _, err := admin.ExecContext(ctx, "SET GLOBAL read_only=OFF"); err != nil {
		t.Fatal(err)
	}
	if !next() {
		t.Fatal("flip to unhealthy on read_only=OFF")
	}
}

// TestNewReportsEvery: New names every negative field, in one error (no server needed).
func TestNewReportsEvery(t *testing.T) {
	_, err := New(Config{Timeout: -1, IdleTimeout: -1})
	if !errors.Is(err, health.ErrInvalidConfig) || !strings.Contains(err.Error(), "Config.Timeout") || !strings.Contains(err.Error(), "Config.IdleTimeout") {
		t.Fatalf("New = %v, want ErrInvalidConfig naming Timeout and IdleTimeout", err)
	}
}
