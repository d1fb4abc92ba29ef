package raftstore

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/lni/dragonboat/v4/logger"
)

// dragonboatLoggerOnce guards the one process-wide setting this package
// makes: Dragonboat's logger factory is global (logger.SetLoggerFactory,
// which panics when called twice), so the first Node started in a process
// installs a factory that discards Dragonboat's logs. If the host program
// installed its own factory first, that one is kept.
var dragonboatLoggerOnce sync.Once

func setDragonboatLogger() {
	dragonboatLoggerOnce.Do(func() {
		defer func() { _ = recover() }() // the host program set a factory first: keep it
		logger.SetLoggerFactory(func(string) logger.ILogger { return discardLogger{} })
	})
}

// discardLogger drops Dragonboat's messages; Panicf still panics, as
// Dragonboat expects.
type discardLogger struct{}

func (discardLogger) SetLevel(logger.LogLevel)  {}
func (discardLogger) Debugf(string, ...any)     {}
func (discardLogger) Infof(string, ...any)      {}
func (discardLogger) Warningf(string, ...any)   {}
func (discardLogger) Errorf(string, ...any)     {}
func (discardLogger) Panicf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// badgerLogger routes Badger's logs into the node's slog logger, one level
// down (Badger is chatty at INFO).
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(string, ...any)       {}
