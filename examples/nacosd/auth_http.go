package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// Nacos's auth OpenAPI (/nacos/v1/auth): login, and the users, roles and
// permissions that a global admin manages. Answers are Nacos's RestResult
// ({"code":200,"message":null,"data":…}) and pages
// ({"totalCount","pageNumber","pagesAvailable","pageItems"}).

func writeJSONBody(w http.ResponseWriter, v any) { _ = json.NewEncoder(w).Encode(v) }

func restOK(w http.ResponseWriter, data any) {
	writeJSON(w, map[string]any{"code": 200, "message": nil, "data": data})
}

// hLogin serves /nacos/v1/auth/login and /nacos/v1/auth/users/login.
func (s *Server) hLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ttl := int64(s.auth.cfg.TokenTTL.Seconds())
	if !s.auth.Enabled() {
		// Open mode: a client configured with a username still starts.
		writeJSON(w, map[string]any{"accessToken": "", "tokenTtl": ttl, "globalAdmin": true, "username": r.FormValue("username")})
		return
	}
	user := r.FormValue("username")
	tok, admin, err := s.auth.login(r.Context(), user, r.FormValue("password"))
	if err != nil {
		s.denied(w, r, err)
		return
	}
	writeJSON(w, map[string]any{"accessToken": tok, "tokenTtl": ttl, "globalAdmin": admin, "username": user})
}

// admin checks that the request comes from a global admin, and answers the
// refusal; with authentication off the user APIs are closed (there is no
// one to say who is admin).
func (s *Server) admin(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !s.auth.Enabled() {
		http.Error(w, "caused: authentication is off (-auth): there are no users to manage", http.StatusBadRequest)
		return "", false
	}
	user, err := s.auth.authorizeAdmin(r.Context(), httpIdentity(r))
	if err != nil {
		s.denied(w, r, err)
		return user, false
	}
	return user, true
}

type page[T any] struct {
	TotalCount     int `json:"totalCount"`
	PageNumber     int `json:"pageNumber"`
	PagesAvailable int `json:"pagesAvailable"`
	PageItems      []T `json:"pageItems"`
}

// writePage answers the page of all that the pageNo and pageSize
// parameters ask for (Nacos's defaults 1 and 100; at most 1000).
func writePage[T any](s *Server, w http.ResponseWriter, r *http.Request, p params, all []T) {
	no, err := p.integer("pageNo", 1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	size, err := p.integer("pageSize", 100)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	no, size = max(no, 1), min(max(size, 1), 1000)
	out := page[T]{TotalCount: len(all), PageNumber: no, PagesAvailable: (len(all) + size - 1) / size, PageItems: []T{}}
	if lo := (no - 1) * size; lo < len(all) {
		out.PageItems = all[lo:min(lo+size, len(all))]
	}
	writeJSON(w, out)
}

// hUsers serves /nacos/v1/auth/users: POST creates (username, password),
// PUT changes a password (username, newPassword; a user may change its
// own), DELETE removes (username), GET lists.
func (s *Server) hUsers(w http.ResponseWriter, r *http.Request) {
	p := params{r}
	ctx := r.Context()
	if r.Method == http.MethodPut && s.auth.Enabled() {
		// A user may change its own password; an admin anyone's.
		user, _, err := s.auth.authenticate(ctx, httpIdentity(r))
		if err != nil {
			s.denied(w, r, err)
			return
		}
		target := p.str("username")
		if target != user {
			if _, ok := s.admin(w, r); !ok {
				return
			}
		}
		if err := s.auth.setPassword(ctx, target, r.FormValue("newPassword")); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "update user ok!")
		return
	}
	if _, ok := s.admin(w, r); !ok {
		return
	}
	switch r.Method {
	case http.MethodPost:
		if err := s.auth.createUser(ctx, p.str("username"), r.FormValue("password")); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "create user ok!")
	case http.MethodDelete:
		if err := s.auth.deleteUser(ctx, p.str("username")); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "delete user ok!")
	case http.MethodGet:
		snap, err := s.auth.load(ctx)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		type user struct {
			Username string `json:"username"`
			Password string `json:"password"` // never the hash: Nacos sends it, nacosd does not
		}
		var all []user
		for _, u := range sortedKeys(snap.users) {
			if q := p.str("username"); q == "" || strings.Contains(u, q) {
				all = append(all, user{Username: u})
			}
		}
		writePage(s, w, r, p, all)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// hRoles serves /nacos/v1/auth/roles: POST binds (role, username), DELETE
// unbinds (role, and username or every user), GET lists (username and role
// filters).
func (s *Server) hRoles(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.admin(w, r); !ok {
		return
	}
	p := params{r}
	ctx := r.Context()
	role, user := p.str("role"), p.str("username")
	switch r.Method {
	case http.MethodPost:
		if err := s.auth.bindRole(ctx, role, user, false); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "add role ok!")
	case http.MethodDelete:
		if err := s.auth.unbindRole(ctx, role, user); err != nil {
			s.fail(w, r, err)
			return
		}
		if user == "" {
			restOK(w, "delete role "+role+" ok!")
		} else {
			restOK(w, "delete role of user "+user+" ok!")
		}
	case http.MethodGet:
		snap, err := s.auth.load(ctx)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		type binding struct {
			Role     string `json:"role"`
			Username string `json:"username"`
		}
		var all []binding
		for _, u := range sortedKeys(snap.roles) {
			for _, ro := range snap.roles[u] {
				if (user == "" || u == user) && (role == "" || ro == role) {
					all = append(all, binding{ro, u})
				}
			}
		}
		writePage(s, w, r, p, all)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// hPermissions serves /nacos/v1/auth/permissions: POST and DELETE (role,
// resource, action), GET lists (role filter).
func (s *Server) hPermissions(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.admin(w, r); !ok {
		return
	}
	p := params{r}
	ctx := r.Context()
	role, res, action := p.str("role"), p.str("resource"), p.str("action")
	switch r.Method {
	case http.MethodPost:
		if err := s.auth.addPermission(ctx, role, res, action); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "add permission ok!")
	case http.MethodDelete:
		if err := s.auth.deletePermission(ctx, role, res, action); err != nil {
			s.fail(w, r, err)
			return
		}
		restOK(w, "delete permission ok!")
	case http.MethodGet:
		snap, err := s.auth.load(ctx)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		type perm struct {
			Role     string `json:"role"`
			Resource string `json:"resource"`
			Action   string `json:"action"`
		}
		var all []perm
		for _, ro := range sortedKeys(snap.perms) {
			if role != "" && ro != role {
				continue
			}
			ps := slices.Clone(snap.perms[ro])
			slices.SortFunc(ps, func(a, b permission) int { return strings.Compare(a.Resource+a.Action, b.Resource+b.Action) })
			for _, x := range ps {
				all = append(all, perm{x.Role, x.Resource, x.Action})
			}
		}
		writePage(s, w, r, p, all)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
