// Package logx holds the one logging helper Muster's components share:
// tagging a logger with the node it speaks for, once.
package logx

import (
	"context"
	"log/slog"
)

// WithNode returns l with the attribute node=id, unless l already carries
// it: a logger returned by WithNode for the same id, or derived from one
// (With, WithGroup), is returned unchanged. Every component of a node adds
// its node this way, so that a line logged through several of them (the
// registry hands its logger to distro, health and raftstore) names the node
// once. A nil l is returned as nil.
func WithNode(l *slog.Logger, id string) *slog.Logger {
	if l == nil {
		return nil
	}
	if h, ok := l.Handler().(nodeHandler); ok && h.id == id {
		return l
	}
	return slog.New(nodeHandler{Handler: l.Handler().WithAttrs([]slog.Attr{slog.String("node", id)}), id: id})
}

// nodeHandler marks a handler that already adds node=id; its derived
// handlers keep the mark.
type nodeHandler struct {
	slog.Handler
	id string
}

func (h nodeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l)
}

func (h nodeHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.Handler.Handle(ctx, r)
}

func (h nodeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return nodeHandler{Handler: h.Handler.WithAttrs(as), id: h.id}
}

func (h nodeHandler) WithGroup(name string) slog.Handler {
	return nodeHandler{Handler: h.Handler.WithGroup(name), id: h.id}
}
