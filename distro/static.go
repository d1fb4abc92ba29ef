package distro

import (
	"slices"
	"sync"
)

// Static is a Membership driven by hand: tests and harnesses call Set and Remove. Subscribers are
// notified synchronously, before Set or Remove returns, which makes fake-clock tests
// deterministic. It always includes its own node. Safe for concurrent use.
type Static struct {
	self Member

	notifyMu sync.Mutex // serializes notifications and (un)subscription
	mu       sync.Mutex // guards the fields below
	members  map[string]Member
	subs     map[int]func([]Member)
	nextSub  int
}

// NewStatic returns a Static membership holding only self.
func NewStatic(self Member) *Static {
	return &Static{
		self:    self,
		members: map[string]Member{self.ID: self},
		subs:    map[int]func([]Member){},
	}
}

// Members returns the live members, self included, sorted by ID.
func (s *Static) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked()
}

func (s *Static) listLocked() []Member {
	out := make([]Member, 0, len(s.members))
	for _, m := range s.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Set replaces the member list (self is always kept) and notifies every subscriber before it
// returns, if the list changed.
func (s *Static) Set(members ...Member) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	s.mu.Lock()
	next := map[string]Member{s.self.ID: s.self}
	for _, m := range members {
		if m.ID != s.self.ID && m.ID != "" {
			next[m.ID] = m
		}
	}
	changed := len(next) != len(s.members)
	for id, m := range next {
		if old, ok := s.members[id]; !ok || old != m {
			changed = true
		}
	}
	s.members = next
	s.mu.Unlock()
	if changed {
		s.notifyLocked()
	}
}

// Add adds members (replacing ones with the same ID) and notifies subscribers if that changed
// the list.
func (s *Static) Add(members ...Member) {
	s.mu.Lock()
	all := s.listLocked()
	s.mu.Unlock()
	s.Set(append(all, members...)...)
}

// Remove drops the members with these IDs (never self) and notifies subscribers if that changed
// the list.
func (s *Static) Remove(ids ...string) {
	s.mu.Lock()
	all := s.listLocked()
	s.mu.Unlock()
	all = slices.DeleteFunc(all, func(m Member) bool { return slices.Contains(ids, m.ID) })
	s.Set(all...)
}

// notifyLocked calls every subscriber with the current list; notifyMu is held.
func (s *Static) notifyLocked() {
	s.mu.Lock()
	list := s.listLocked()
	subs := make([]func([]Member), 0, len(s.subs))
	keys := make([]int, 0, len(s.subs))
	for k := range s.subs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		subs = append(subs, s.subs[k])
	}
	s.mu.Unlock()
	for _, fn := range subs {
		fn(slices.Clone(list))
	}
}

// Subscribe registers fn; see Membership.
func (s *Static) Subscribe(fn func([]Member)) (cancel func()) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.notifyMu.Lock()
			defer s.notifyMu.Unlock()
			s.mu.Lock()
			delete(s.subs, id)
			s.mu.Unlock()
		})
	}
}
