package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/model"
	"github.com/muster-io/muster/registry"
	"golang.org/x/crypto/bcrypt"
)

// Authentication and authorization compatible with Nacos's default auth
// plugin (nacos.core.auth.enabled=true, nacos.core.auth.system.type=nacos):
//
//   - users with bcrypt-hashed passwords (cost 10, as Nacos: hashes move
//     between the two unchanged), roles bound to users, and permissions of
//     roles on resources "namespaceId:group:naming/service" ('*' matches any
//     run of characters) with the actions r, w or rw; the role ROLE_ADMIN is
//     the global admin;
//   - /nacos/v1/auth/login and /nacos/v1/auth/users/login answer
//     {"accessToken","tokenTtl","globalAdmin","username"}; the token is
//     Nacos's JWT: the fixed header {"alg":"HS256"}, the payload
//     {"sub":user,"exp":seconds}, HMAC-SHA256 with the secret key (given in
//     base64, at least 32 bytes, as nacos.core.auth.plugin.nacos.token.secret.key),
//     so a token of a Nacos with the same key is valid here and back;
//   - a request identifies itself with "Authorization: Bearer <token>", the
//     accessToken header or parameter (what the SDKs send over HTTP), the
//     accessToken header of a gRPC request (what the 2.x SDK sends), or
//     username and password parameters (what the Node.js client sends on
//     every call; each verified once, then cached);
//   - a refusal is Nacos's 403 (HTTP) or errorCode 403 (gRPC).
//
// Users, roles and permissions are service definitions in a namespace of
// their own, authNamespace, which no client API reaches: they are stored
// where the registry stores definitions (Raft when clustered or durable, so
// every node agrees), with no new kind of record. Each node reads them into
// a snapshot it refreshes at most authRefresh after a change elsewhere, and
// at once after a change through it.

// authNamespace holds nacosd's users (group authUsers), role bindings
// (authRoles) and permissions (authPerms). Every client API refuses it.
const (
	authNamespace = "__nacosd_auth__"
	authUsers     = "users"
	authRoles     = "roles"
	authPerms     = "permissions"
)

// globalAdminRole is Nacos's global admin role.
const globalAdminRole = "ROLE_ADMIN"

// defaultTokenTTL is Nacos's nacos.core.auth.plugin.nacos.token.expire.seconds.
const defaultTokenTTL = 18000 * time.Second

// authRefresh bounds how long a node serves a snapshot of the users and
// permissions after a change made through another node.
const authRefresh = time.Second

// jwtHeader is base64url({"alg":"HS256"}), the only header Nacos signs and
// accepts (NacosSignatureAlgorithm): compared as a string, so no other
// algorithm ("none" included) is ever considered.
const jwtHeader = "eyJhbGciOiJIUzI1NiJ9"

// maxTokenLen bounds a token read from a request.
const maxTokenLen = 4096

// minKeyLen is the shortest signing key Nacos accepts (32 bytes, 256 bits).
const minKeyLen = 32

// AuthConfig configures authentication.
type AuthConfig struct {
	// Enabled turns authentication and authorization on.
	Enabled bool
	// Key signs the tokens: the decoded secret key, at least 32 bytes.
	Key []byte
	// TokenTTL is how long a token is valid (default 18,000 s, Nacos's).
	TokenTTL time.Duration
	// AdminPassword, when set, creates the user "nacos" with ROLE_ADMIN at
	// start if no user of that name exists (an existing one is left alone).
	AdminPassword string
}

// DecodeAuthKey decodes a signing key given in base64, as Nacos takes its
// nacos.core.auth.plugin.nacos.token.secret.key, and checks its length.
func DecodeAuthKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("the token signing key must be base64 (as Nacos's token.secret.key): %w", err)
	}
	if len(k) < minKeyLen {
		return nil, fmt.Errorf("the token signing key is %d bytes once decoded: it must be at least %d (e.g. head -c 32 /dev/urandom | base64)", len(k), minKeyLen)
	}
	return k, nil
}

// Validate checks the configuration.
func (c *AuthConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if len(c.Key) < minKeyLen {
		errs = append(errs, fmt.Errorf("-auth needs a token signing key of at least %d bytes (-auth-key-file, base64)", minKeyLen))
	}
	if c.TokenTTL < 0 {
		errs = append(errs, errors.New("-auth-token-ttl must not be negative"))
	}
	if c.AdminPassword != "" {
		if err := checkPassword(c.AdminPassword); err != nil {
			errs = append(errs, fmt.Errorf("-admin-password-file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Errors of authentication (HTTP 401 for a console; Nacos's APIs answer 403
// for both) and of authorization (403).
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
)

func unauthenticated(msg string) error { return fmt.Errorf("%w: %s", ErrUnauthenticated, msg) }
func forbidden(msg string) error       { return fmt.Errorf("%w: %s", ErrForbidden, msg) }

// Auth authenticates and authorizes the clients of one node.
type Auth struct {
	cfg AuthConfig
	reg *registry.Registry
	log *slog.Logger
	now func() time.Time

	hashers   chan struct{} // bounds the bcrypt work running at once
	dummyOnce sync.Once
	dummy     string // a hash compared for unknown users

	mu      sync.Mutex
	snap    *authSnapshot
	snapAt  time.Time
	loading bool
	creds   map[[32]byte]credEntry // verified username/password pairs
}

// credEntry is a verified username/password pair, valid while the user's
// hash is the one it was verified against.
type credEntry struct {
	user, hash string
}

// maxCreds bounds the cache of verified credentials.
const maxCreds = 4096

type permission struct {
	Role, Resource, Action string
}

type authSnapshot struct {
	users map[string]string   // username → bcrypt hash
	roles map[string][]string // username → roles
	perms map[string][]permission
}

func newAuth(cfg AuthConfig, reg *registry.Registry, log *slog.Logger) *Auth {
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = defaultTokenTTL
	}
	return &Auth{
		cfg: cfg, reg: reg, log: log.With("api", "auth"), now: time.Now,
		hashers: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
		creds:   map[[32]byte]credEntry{},
	}
}

// Enabled reports whether authentication is on.
func (a *Auth) Enabled() bool { return a != nil && a.cfg.Enabled }

// --- tokens ---

type jwtPayload struct {
	Sub string `json:"sub"`
	Exp int64  `json:"exp"`
}

func (a *Auth) sign(s string) string {
	m := hmac.New(sha256.New, a.cfg.Key)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newToken returns a token for user, valid for TokenTTL.
func (a *Auth) newToken(user string) string {
	p, _ := json.Marshal(jwtPayload{Sub: user, Exp: a.now().Add(a.cfg.TokenTTL).Unix()})
	head := jwtHeader + "." + base64.RawURLEncoding.EncodeToString(p)
	return head + "." + a.sign(head)
}

// parseToken returns the user a valid, unexpired token names.
func (a *Auth) parseToken(tok string) (string, error) {
	if len(tok) > maxTokenLen {
		return "", unauthenticated("token invalid!")
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", unauthenticated("token invalid!")
	}
	if parts[0] != jwtHeader {
		return "", unauthenticated("unsupported signature algorithm")
	}
	want := a.sign(parts[0] + "." + parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return "", unauthenticated("Invalid signature")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", unauthenticated("token invalid!")
	}
	var p jwtPayload
	if err := json.Unmarshal(b, &p); err != nil || p.Sub == "" {
		return "", unauthenticated("token invalid!")
	}
	if p.Exp < a.now().Unix() {
		return "", unauthenticated("token expired!")
	}
	return p.Sub, nil
}

// --- identity ---

// identity is what a request carries to say who sends it.
type identity struct {
	token, user, password string
}

// authenticate returns the user an identity proves, checked against the
// current users (a deleted user's tokens stop working).
func (a *Auth) authenticate(ctx context.Context, id identity) (string, *authSnapshot, error) {
	snap, err := a.snapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	if id.token != "" {
		user, err := a.parseToken(id.token)
		if err != nil {
			return "", nil, err
		}
		if _, ok := snap.users[user]; !ok {
			return "", nil, unauthenticated("user not found!")
		}
		return user, snap, nil
	}
	if id.user == "" || id.password == "" {
		return "", nil, unauthenticated("user not found!")
	}
	if err := a.checkCredentials(snap, id.user, id.password); err != nil {
		return "", nil, err
	}
	return id.user, snap, nil
}

// checkCredentials verifies a username and password against snap. A pair
// verified before against the same hash is not hashed again: the Node.js
// client sends them on every request.
func (a *Auth) checkCredentials(snap *authSnapshot, user, password string) error {
	const notFound = "User not found! Please check user exist or password is right!"
	hash, ok := snap.users[user]
	if len(password) > 72 { // bcrypt's limit; longer never matches
		return unauthenticated(notFound)
	}
	key := credKey(user, password)
	a.mu.Lock()
	e, cached := a.creds[key]
	a.mu.Unlock()
	if cached && ok && e.user == user && e.hash == hash {
		return nil
	}
	if !ok {
		// Spend the time a real comparison takes, so that the answer does
		// not tell which user names exist.
		a.dummyOnce.Do(func() {
			h, _ := bcrypt.GenerateFromPassword([]byte("nacosd: no such user"), bcrypt.DefaultCost)
			a.dummy = string(h)
		})
		hash = a.dummy
	}
	a.hashers <- struct{}{}
	err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(password))
	<-a.hashers
	if err != nil || !ok {
		return unauthenticated(notFound)
	}
	a.mu.Lock()
	if len(a.creds) >= maxCreds {
		clear(a.creds)
	}
	a.creds[key] = credEntry{user: user, hash: hash}
	a.mu.Unlock()
	return nil
}

func credKey(user, password string) [32]byte {
	return sha256.Sum256([]byte(user + "\x00" + password))
}

// login checks a username and password and returns a token.
func (a *Auth) login(ctx context.Context, user, password string) (token string, admin bool, err error) {
	snap, err := a.snapshot(ctx)
	if err != nil {
		return "", false, err
	}
	if user == "" || password == "" {
		return "", false, unauthenticated("user not found!")
	}
	if err := a.checkCredentials(snap, user, password); err != nil {
		return "", false, err
	}
	return a.newToken(user), snap.isAdmin(user), nil
}

// --- authorization ---

func (s *authSnapshot) isAdmin(user string) bool {
	for _, r := range s.roles[user] {
		if r == globalAdminRole {
			return true
		}
	}
	return false
}

// allowed reports whether user may act ('r' or 'w') on resource
// ("namespace:group:naming/name"), as Nacos's role service decides.
func (s *authSnapshot) allowed(user, resource string, action byte) bool {
	for _, role := range s.roles[user] {
		if role == globalAdminRole {
			return true
		}
		for _, p := range s.perms[role] {
			pat := p.Resource
			if strings.HasPrefix(pat, ":") {
				pat = model.DefaultNamespace + pat
			}
			if strings.IndexByte(p.Action, action) >= 0 && globMatch(pat, resource) {
				return true
			}
		}
	}
	return false
}

// globMatch reports whether s matches pattern, where '*' matches any run of
// characters and every other character itself (Nacos turns '*' into ".*"
// of a regular expression; nacosd gives no other character a meaning).
func globMatch(pattern, s string) bool {
	// Iterative matching with one backtrack point: linear in practice,
	// O(len(pattern)·len(s)) at worst, never exponential.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// namingResource is Nacos's resource string of a naming request. An empty
// group or name stands for every one ("*", "naming/*").
func namingResource(namespace, group, name string) string {
	ns := namespaceOf(namespace)
	if group == "" {
		group = "*"
	}
	if name == "" {
		name = "*"
	}
	return ns + ":" + group + ":naming/" + name
}

// checkNamespace refuses the namespace of nacosd's users to every client
// API, with authentication on or off.
func checkNamespace(namespace string) error {
	if namespace == authNamespace {
		return forbidden("namespace " + authNamespace + " is reserved for nacosd's users and permissions")
	}
	return nil
}

// authorize checks that id may act on resource; with authentication off
// anything goes but the reserved namespace. It returns the user.
func (a *Auth) authorize(ctx context.Context, id identity, namespace, group, name string, write bool) (string, error) {
	if err := checkNamespace(namespaceOf(namespace)); err != nil {
		return "", err
	}
	if !a.Enabled() {
		return "", nil
	}
	user, snap, err := a.authenticate(ctx, id)
	if err != nil {
		return "", err
	}
	action := byte('r')
	if write {
		action = 'w'
	}
	if !snap.allowed(user, namingResource(namespace, group, name), action) {
		return user, forbidden("authorization failed!")
	}
	return user, nil
}

// authorizeAdmin checks that id is a global admin.
func (a *Auth) authorizeAdmin(ctx context.Context, id identity) (string, error) {
	user, snap, err := a.authenticate(ctx, id)
	if err != nil {
		return "", err
	}
	if !snap.isAdmin(user) {
		return user, forbidden("authorization failed!")
	}
	return user, nil
}

// --- the store: service definitions in authNamespace ---

// snapshot returns the users and permissions, read again when the last read
// is older than authRefresh (one reader at a time; the others keep the
// previous snapshot meanwhile).
func (a *Auth) snapshot(ctx context.Context) (*authSnapshot, error) {
	a.mu.Lock()
	snap, fresh := a.snap, a.now().Sub(a.snapAt) < authRefresh
	if snap != nil && (fresh || a.loading) {
		a.mu.Unlock()
		return snap, nil
	}
	a.loading = true
	a.mu.Unlock()
	next, err := a.load(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loading = false
	if err != nil {
		if a.snap != nil {
			return a.snap, nil
		}
		return nil, err
	}
	a.snap, a.snapAt = next, a.now()
	return next, nil
}

// invalidate makes the next check read the store again.
func (a *Auth) invalidate() {
	a.mu.Lock()
	a.snapAt = time.Time{}
	a.mu.Unlock()
}

// records returns the definitions of one group of authNamespace.
func (a *Auth) records(ctx context.Context, group string) ([]model.Service, error) {
	var out []model.Service
	for page := 1; ; page++ {
		l, err := a.reg.ListServices(ctx, registry.ListOptions{Namespace: authNamespace, Group: group, Page: page, PageSize: 500})
		if err != nil {
			return nil, err
		}
		for _, s := range l.Services {
			if !s.Defined {
				continue
			}
			def, err := a.reg.GetService(ctx, s.Key)
			if errors.Is(err, registry.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, err
			}
			out = append(out, def)
		}
		if len(l.Services) == 0 || page*500 >= l.Total {
			return out, nil
		}
	}
}

func (a *Auth) load(ctx context.Context) (*authSnapshot, error) {
	s := &authSnapshot{users: map[string]string{}, roles: map[string][]string{}, perms: map[string][]permission{}}
	users, err := a.records(ctx, authUsers)
	if err != nil {
		return nil, err
	}
	for _, u := range users {
		s.users[u.Key.Name] = u.Metadata.Map()["password"]
	}
	roles, err := a.records(ctx, authRoles)
	if err != nil {
		return nil, err
	}
	for _, r := range roles {
		md := r.Metadata.Map()
		if _, ok := s.users[md["username"]]; ok {
			s.roles[md["username"]] = append(s.roles[md["username"]], md["role"])
		}
	}
	perms, err := a.records(ctx, authPerms)
	if err != nil {
		return nil, err
	}
	for _, p := range perms {
		md := p.Metadata.Map()
		s.perms[md["role"]] = append(s.perms[md["role"]], permission{Role: md["role"], Resource: md["resource"], Action: md["action"]})
	}
	return s, nil
}

// maxNameLen bounds user and role names.
const maxNameLen = 64

// checkAuthName checks a user or role name: letters, digits, '_', '-' and
// '.', at most 64 (Nacos takes any string; nacosd keeps names it can put in
// service names and logs unchanged).
func checkAuthName(field, v string) error {
	if v == "" || len(v) > maxNameLen || v == "." || v == ".." {
		return fmt.Errorf("%w: parameter %s: must be 1–%d characters, not \".\" or \"..\"", model.ErrInvalid, field, maxNameLen)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: parameter %s: only letters, digits, '_', '-' and '.' are allowed: %q", model.ErrInvalid, field, v)
		}
	}
	return nil
}

// checkPassword checks a new password: 1–72 bytes (bcrypt's limit).
func checkPassword(p string) error {
	if p == "" || len(p) > 72 {
		return fmt.Errorf("%w: parameter password: must be 1–72 bytes", model.ErrInvalid)
	}
	return nil
}

func authKey(group, name string) model.ServiceKey {
	return model.ServiceKey{Namespace: authNamespace, Group: group, Name: name}
}

// permName is the record name of one permission: the role and a digest of
// the resource and action (a resource may hold characters a service name
// may not).
func permName(role, resource, action string) string {
	h := sha256.Sum256([]byte(resource + "\x00" + action))
	return role + ":" + hex.EncodeToString(h[:12])
}

func (a *Auth) put(ctx context.Context, key model.ServiceKey, md map[string]string, create bool) error {
	def := model.Service{Key: key, Metadata: model.NewMetadata(md)}
	var err error
	if create {
		err = a.reg.CreateService(ctx, def)
	} else {
		err = a.reg.UpdateService(ctx, def)
	}
	a.invalidate()
	return err
}

func (a *Auth) del(ctx context.Context, key model.ServiceKey) error {
	err := a.reg.DeleteService(ctx, key)
	a.invalidate()
	return err
}

func hashPassword(p string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.DefaultCost)
	return string(h), err
}

// createUser adds a user.
func (a *Auth) createUser(ctx context.Context, user, password string) error {
	if err := errors.Join(checkAuthName("username", user), checkPassword(password)); err != nil {
		return err
	}
	h, err := hashPassword(password)
	if err != nil {
		return err
	}
	err = a.put(ctx, authKey(authUsers, user), map[string]string{"password": h}, true)
	if errors.Is(err, registry.ErrServiceExists) {
		return fmt.Errorf("%w: user '%s' already exist!", model.ErrInvalid, user)
	}
	return err
}

// setPassword changes a user's password.
func (a *Auth) setPassword(ctx context.Context, user, password string) error {
	if err := errors.Join(checkAuthName("username", user), checkPassword(password)); err != nil {
		return err
	}
	if _, err := a.reg.GetService(ctx, authKey(authUsers, user)); err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			return fmt.Errorf("%w: user %s not exist!", model.ErrInvalid, user)
		}
		return err
	}
	h, err := hashPassword(password)
	if err != nil {
		return err
	}
	return a.put(ctx, authKey(authUsers, user), map[string]string{"password": h}, false)
}

// deleteUser removes a user and its role bindings.
func (a *Auth) deleteUser(ctx context.Context, user string) error {
	if err := checkAuthName("username", user); err != nil {
		return err
	}
	snap, err := a.load(ctx)
	if err != nil {
		return err
	}
	for _, role := range snap.roles[user] {
		if role == globalAdminRole {
			return fmt.Errorf("%w: cannot delete admin: %s", model.ErrInvalid, user)
		}
	}
	for _, role := range snap.roles[user] {
		if err := a.del(ctx, authKey(authRoles, role+":"+user)); err != nil && !errors.Is(err, registry.ErrNotFound) {
			return err
		}
	}
	err = a.del(ctx, authKey(authUsers, user))
	if errors.Is(err, registry.ErrNotFound) {
		return fmt.Errorf("%w: user %s not exist!", registry.ErrNotFound, user)
	}
	return err
}

// bindRole gives user role. ROLE_ADMIN is refused, as Nacos refuses it:
// the admin is made at start (-admin-password-file).
func (a *Auth) bindRole(ctx context.Context, role, user string, admin bool) error {
	if err := errors.Join(checkAuthName("role", role), checkAuthName("username", user)); err != nil {
		return err
	}
	if role == globalAdminRole && !admin {
		return fmt.Errorf("%w: role '%s' is not permitted to create!", model.ErrInvalid, globalAdminRole)
	}
	if _, err := a.reg.GetService(ctx, authKey(authUsers, user)); err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			return fmt.Errorf("%w: user '%s' not found!", model.ErrInvalid, user)
		}
		return err
	}
	err := a.put(ctx, authKey(authRoles, role+":"+user), map[string]string{"role": role, "username": user}, true)
	if errors.Is(err, registry.ErrServiceExists) {
		return fmt.Errorf("%w: user '%s' already bound to the role '%s'!", model.ErrInvalid, user, role)
	}
	return err
}

// unbindRole takes role from user, or from every user when user is empty.
func (a *Auth) unbindRole(ctx context.Context, role, user string) error {
	if err := checkAuthName("role", role); err != nil {
		return err
	}
	if role == globalAdminRole {
		return fmt.Errorf("%w: role '%s' is not permitted to delete!", model.ErrInvalid, globalAdminRole)
	}
	if user != "" {
		if err := checkAuthName("username", user); err != nil {
			return err
		}
		return a.del(ctx, authKey(authRoles, role+":"+user))
	}
	snap, err := a.load(ctx)
	if err != nil {
		return err
	}
	for u, roles := range snap.roles {
		for _, r := range roles {
			if r == role {
				if err := a.del(ctx, authKey(authRoles, role+":"+u)); err != nil && !errors.Is(err, registry.ErrNotFound) {
					return err
				}
			}
		}
	}
	return nil
}

// checkPermission checks a permission's resource and action.
func checkPermission(resource, action string) error {
	var errs []error
	if resource == "" || len(resource) > 512 {
		errs = append(errs, fmt.Errorf("%w: parameter resource: must be 1–512 characters", model.ErrInvalid))
	}
	for i := 0; i < len(resource); i++ {
		if resource[i] <= ' ' || resource[i] > '~' {
			errs = append(errs, fmt.Errorf("%w: parameter resource: must be printable ASCII without spaces", model.ErrInvalid))
			break
		}
	}
	if action != "r" && action != "w" && action != "rw" {
		errs = append(errs, fmt.Errorf("%w: parameter action: must be r, w or rw: %q", model.ErrInvalid, action))
	}
	return errors.Join(errs...)
}

func (a *Auth) addPermission(ctx context.Context, role, resource, action string) error {
	if err := errors.Join(checkAuthName("role", role), checkPermission(resource, action)); err != nil {
		return err
	}
	err := a.put(ctx, authKey(authPerms, permName(role, resource, action)), map[string]string{"role": role, "resource": resource, "action": action}, true)
	if errors.Is(err, registry.ErrServiceExists) {
		return fmt.Errorf("%w: permission already exist!", model.ErrInvalid)
	}
	return err
}

func (a *Auth) deletePermission(ctx context.Context, role, resource, action string) error {
	if err := errors.Join(checkAuthName("role", role), checkPermission(resource, action)); err != nil {
		return err
	}
	return a.del(ctx, authKey(authPerms, permName(role, resource, action)))
}

// bootstrap creates the admin user "nacos" with AdminPassword if it does
// not exist yet. In a cluster every node may try: one creation wins.
func (a *Auth) bootstrap(ctx context.Context) error {
	if a.cfg.AdminPassword == "" {
		return nil
	}
	const admin = "nacos"
	err := a.createUser(ctx, admin, a.cfg.AdminPassword)
	if err != nil && !errors.Is(err, model.ErrInvalid) { // ErrInvalid: it exists
		return err
	}
	created := err == nil
	err = a.bindRole(ctx, globalAdminRole, admin, true)
	if err != nil && !errors.Is(err, model.ErrInvalid) {
		return err
	}
	if created {
		a.log.Info("admin user created", "username", admin)
	}
	return nil
}
