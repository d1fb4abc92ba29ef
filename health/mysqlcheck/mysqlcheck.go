package mysqlcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jonboulle/clockwork"
	"github.com/muster-io/muster/health"
	"github.com/muster-io/muster/internal/cfgerr"
	"github.com/muster-io/muster/model"
)

// Config configures a [Checker].
type Config struct {
	// Timeout bounds a whole check, and is also the driver's dial, read and write timeout
	// (the DSN's timeout, readTimeout and writeTimeout). 0 means health.DefaultCheckTimeout
	// (500 ms).
	Timeout time.Duration
	// MaxDBs bounds the cached connection pools (one per address, user and password).
	// When it is reached the least recently used pool is closed. 0 means 256.
	MaxDBs int
	// IdleTimeout closes a cached connection that has not been used for this long. 0 means
	// 30 s.
	IdleTimeout time.Duration
	// Clock measures latency; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives the driver's logs at debug level; nil discards them.
	Logger *slog.Logger
}

// Checker checks a target by running the check's Command (DefaultMySQLCommand when
// empty) as the check's User with its Password.
//
// With the default command, "show global variables where variable_name='read_only'", the
// instance is healthy iff read_only is OFF: only a writable primary is healthy, a replica
// fails with reason "read_only=ON" (an ordinary, counted failure). With any other command it
// is healthy iff the command runs without error; its rows are read and discarded.
//
// An error the server reports (an SQL error, an access-denied error for a wrong password) is
// a definite failure, as is a refused connection; a timeout or another network error is an
// ordinary one.
//
// Connections are reused: a *sql.DB holding at most one connection is cached per (address,
// user, password), at most MaxDBs of them, and the cache is closed by Close. It is safe for
// concurrent use.
type Checker struct {
	cfg    Config
	logger mysql.Logger

	mu     sync.Mutex
	dbs    map[dbKey]*dbEntry
	tick   uint64 // use counter, for least-recently-used eviction
	closed bool
}

type dbKey struct{ addr, user, password string }

type dbEntry struct {
	db      *sql.DB
	lastUse uint64
	refs    int  // checks using db
	evicted bool // out of the cache; closed when refs drops to 0
}

// New returns a Checker. It opens no connection. It reports every
// negative field, joined in one error wrapping [health.ErrInvalidConfig].
func New(cfg Config) (*Checker, error) {
	var errs []error
	if cfg.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Config.Timeout must be >= 0 (0: %v), got %v", health.DefaultCheckTimeout, cfg.Timeout))
	}
	if cfg.MaxDBs < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxDBs must be >= 0 (0: 256), got %d", cfg.MaxDBs))
	}
	if cfg.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.IdleTimeout must be >= 0 (0: 30s), got %v", cfg.IdleTimeout))
	}
	if err := cfgerr.Join(health.ErrInvalidConfig, errs...); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = health.DefaultCheckTimeout
	}
	if cfg.MaxDBs == 0 {
		cfg.MaxDBs = 256
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	var logger mysql.Logger = &mysql.NopLogger{}
	if cfg.Logger != nil {
		logger = driverLogger{cfg.Logger}
	}
	return &Checker{cfg: cfg, logger: logger, dbs: make(map[dbKey]*dbEntry)}, nil
}

// driverLogger passes the driver's logs (it logs, for example, connections it finds broken)
// to slog at debug level, instead of the driver's global logger.
type driverLogger struct{ l *slog.Logger }

func (d driverLogger) Print(v ...any) { d.l.Debug("mysql driver", "msg", fmt.Sprint(v...)) }

// Check runs the command. It never returns an error: every failure is a health.Result.
func (c *Checker) Check(ctx context.Context, t health.Target) health.Result {
	start := c.clock().Now()
	// The deadline bounds socket I/O: context's real-time timer is the documented exception
	// to the injected clock.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	key := dbKey{addr: t.Addr(), user: t.Check.User, password: t.Check.Password}
	e, err := c.acquire(key)
	if err != nil {
		return health.Result{Latency: c.clock().Since(start), Reason: err.Error()}
	}
	defer c.release(e)

	cmd := t.Check.Command
	if cmd == "" {
		cmd = model.DefaultMySQLCommand
	}
	healthy, reason, err := runCommand(ctx, e.db, cmd)
	lat := c.clock().Since(start)
	if err != nil {
		return mysqlFailure(err, lat)
	}
	return health.Result{Healthy: healthy, Latency: lat, Reason: reason}
}

func (c *Checker) clock() clockwork.Clock { return c.cfg.Clock }

// runCommand runs cmd on db and judges it.
func runCommand(ctx context.Context, db *sql.DB, cmd string) (healthy bool, reason string, err error) {
	rows, err := db.QueryContext(ctx, cmd)
	if err != nil {
		return false, "", err
	}
	defer rows.Close()
	if !isDefaultCommand(cmd) {
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			return false, "", err
		}
		return true, "ok", nil
	}
	// SHOW GLOBAL VARIABLES yields (Variable_name, Value).
	var name, value sql.NullString
	found := false
	for rows.Next() {
		if found {
			continue // drain
		}
		if err := rows.Scan(&name, &value); err != nil {
			return false, "", err
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		return false, "", err
	}
	switch {
	case !found:
		return false, "read_only not reported", nil
	case strings.EqualFold(value.String, "ON") || value.String == "1":
		return false, "read_only=ON", nil
	}
	return true, "read_only=OFF", nil
}

// isDefaultCommand reports whether cmd is DefaultMySQLCommand, ignoring case, surrounding
// space and a trailing semicolon.
func isDefaultCommand(cmd string) bool {
	cmd = strings.TrimSuffix(strings.TrimSpace(cmd), ";")
	return strings.EqualFold(strings.TrimSpace(cmd), model.DefaultMySQLCommand)
}

// mysqlFailure maps an error to a result: an error reported by the server (SQL, access
// denied) and a refused connection are definite, the rest is not.
func mysqlFailure(err error, lat time.Duration) health.Result {
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		return health.Result{Definite: true, Latency: lat, Reason: fmt.Sprintf("mysql error %d: %s", me.Number, me.Message)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return health.Result{Definite: true, Latency: lat, Reason: "connection refused"}
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return health.Result{Latency: lat, Reason: "timeout"}
	}
	return health.Result{Latency: lat, Reason: err.Error()}
}

// acquire returns the cached pool for key, opening it if needed, with a reference that the
// caller gives back with release.
func (c *Checker) acquire(key dbKey) (*dbEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("checker closed")
	}
	c.tick++
	if e, ok := c.dbs[key]; ok {
		e.refs++
		e.lastUse = c.tick
		return e, nil
	}
	if len(c.dbs) >= c.cfg.MaxDBs {
		c.evictLocked()
	}
	mc := mysql.NewConfig()
	mc.Net = "tcp"
	mc.Addr = key.addr
	mc.User = key.user
	mc.Passwd = key.password
	mc.Timeout = c.cfg.Timeout
	mc.ReadTimeout = c.cfg.Timeout
	mc.WriteTimeout = c.cfg.Timeout
	mc.Logger = c.logger
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql config: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	// database/sql's idle timer uses real time; it only frees sockets.
	db.SetConnMaxIdleTime(c.cfg.IdleTimeout)
	e := &dbEntry{db: db, lastUse: c.tick, refs: 1}
	c.dbs[key] = e
	return e, nil
}

// evictLocked drops the least recently used pool from the cache; it is closed now or, if a
// check is using it, when that check releases it. O(MaxDBs), only on a miss of a full cache.
func (c *Checker) evictLocked() {
	var (
		oldest *dbEntry
		okey   dbKey
	)
	for k, e := range c.dbs {
		if oldest == nil || e.lastUse < oldest.lastUse {
			oldest, okey = e, k
		}
	}
	if oldest == nil {
		return
	}
	delete(c.dbs, okey)
	oldest.evicted = true
	if oldest.refs == 0 {
		_ = oldest.db.Close()
	}
}

func (c *Checker) release(e *dbEntry) {
	c.mu.Lock()
	e.refs--
	closeIt := e.evicted && e.refs == 0
	c.mu.Unlock()
	if closeIt {
		_ = e.db.Close()
	}
}

// Close closes every cached pool (those in use when their check returns) and makes later
// checks fail. It is idempotent.
func (c *Checker) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	var toClose []*sql.DB
	for k, e := range c.dbs {
		delete(c.dbs, k)
		e.evicted = true
		if e.refs == 0 {
			toClose = append(toClose, e.db)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, db := range toClose {
		errs = append(errs, db.Close())
	}
	return errors.Join(errs...)
}

// cached returns the number of cached pools (tests).
func (c *Checker) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dbs)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
