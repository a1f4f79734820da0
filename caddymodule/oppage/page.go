package oppage

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"html/template"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/engine"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/httpdoor"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/store"
	"go.uber.org/zap"
)

// StoreHealth is the store's health as the page shows it.
type StoreHealth struct {
	// Kind is "memory" or "redis"; Addresses the Redis addresses.
	Kind      string
	Addresses []string
	// Reachable: the store answered the page's ping (always, for
	// memory); Latency is that ping's round trip; Error why it failed.
	Reachable bool
	Latency   time.Duration
	Error     string
	// Down: the gateway's own health check or last round trip found
	// it not answering.
	Down bool
	// Full: the store refused a write for want of memory within the
	// last minute (Redis over maxmemory: OOM). UsedMemory and
	// MaxMemory are Redis's INFO memory figures in bytes (0: unknown
	// or no limit).
	Full                  bool
	UsedMemory, MaxMemory int64
	// Quarantine is the restart quarantine left (Redis restarted less
	// than the longest lease ago: keyed requests are refused).
	Quarantine time.Duration
}

// HealthFunc reports the store's health; ctx bounds it.
type HealthFunc func(ctx context.Context) StoreHealth

// Page is one handler's operator page. Build it with New; it is safe
// for concurrent use.
type Page struct {
	cfg    Config
	eng    *engine.Engine
	health HealthFunc
	allow  []netip.Prefix
	logger *zap.Logger
}

// New builds the page of cfg (defaults applied and validated) over eng;
// health reports the store's health (nil: memory).
func New(cfg Config, eng *engine.Engine, health HealthFunc) (*Page, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	allow, _ := parseAllow(cfg.Allow)
	if health == nil {
		health = func(context.Context) StoreHealth { return StoreHealth{Kind: "memory", Reachable: true} }
	}
	return &Page{cfg: cfg, eng: eng, health: health, allow: allow, logger: eng.Logger().Named("operator_page")}, nil
}

// Match reports whether path is the page's: Path or Path+"/revoke".
func (p *Page) Match(path string) bool {
	return path == p.cfg.Path || path == p.cfg.Path+"/" || path == p.cfg.Path+"/revoke"
}

// pageTimeout bounds the store reads of one page view or revoke.
const pageTimeout = 5 * time.Second

// maxForm bounds a revoke form's body, in bytes.
const maxForm = 4 << 10

// ServeHTTP serves a request Match accepted, from client (Caddy's
// client address); authUser is the user an authentication handler
// of Caddy's that ran before it verified (basic_auth's
// {http.auth.user.id}), "" for none. A loopback request naming another
// Host is refused first (DNSRebindingProtection); then the access rule:
// a client outside Allow gets 403, a missing or wrong credential 401; then GET (or HEAD)
// of Path shows the page and POST Path/revoke revokes (checkRevoke).
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request, client netip.Addr, authUser string) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the page's own form POST (crossSite refuses it).
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	if p.cfg.rebindingProtected() && httpdoor.LocalIsLoopback(r) && !httpdoor.LoopbackHost(r.Host) {
		p.logger.Info("operator page refused a loopback request for another Host (DNS rebinding protection)", zap.String("host", r.Host), zap.String("client", client.String()))
		plain(w, http.StatusForbidden, "the operator page is on a loopback address and answers only Host localhost, 127.0.0.1 or [::1]: another Host is how DNS rebinding reaches a local server (operator_page dns_rebinding_protection)")
		return
	}
	if !p.allowed(client) {
		p.logger.Info("operator page refused a client outside allow", zap.String("client", client.String()))
		plain(w, http.StatusForbidden, "the operator page is not open to this client address (operator_page allow)")
		return
	}
	who, ok := p.authenticate(r, client, authUser)
	if !ok {
		if p.cfg.BasicUser != "" {
			h.Set("WWW-Authenticate", `Basic realm="rcns operator page", charset="UTF-8"`)
		} else {
			h.Set("WWW-Authenticate", `Bearer realm="rcns operator page"`)
		}
		plain(w, http.StatusUnauthorized, "the operator page needs its credential")
		return
	}
	switch {
	case r.URL.Path == p.cfg.Path+"/revoke":
		if r.Method != http.MethodPost {
			h.Set("Allow", "POST")
			plain(w, http.StatusMethodNotAllowed, "revoke takes POST")
			return
		}
		p.revoke(w, r, who)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		p.show(w, r, who)
	default:
		h.Set("Allow", "GET, HEAD")
		plain(w, http.StatusMethodNotAllowed, "the operator page takes GET; revoke is POST "+p.cfg.Path+"/revoke")
	}
}

// plain writes a short text answer.
func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}

// allowed reports whether client is in an allowed range.
func (p *Page) allowed(client netip.Addr) bool {
	client = client.Unmap()
	for _, pr := range p.allow {
		if pr.Contains(client) {
			return true
		}
	}
	return false
}

// visitor is who the access rule admitted: the operator to record, how
// they were admitted, and what binds their CSRF tokens (a hash of the
// credential they presented, or of their address when the rule asks
// none).
type visitor struct {
	op      engine.Operator
	binding []byte
}

// authenticate checks the configured credentials (all of them must
// match; none configured admits every allowed client). Without a
// credential of its own, a user Caddy's authentication verified
// (authUser) is the operator, and the CSRF binding is that user and
// the client address.
func (p *Page) authenticate(r *http.Request, client netip.Addr, authUser string) (visitor, bool) {
	v := visitor{op: engine.Operator{Name: p.cfg.Operator, Access: "cidr"}}
	bind := sha256.New()
	bind.Write([]byte(p.cfg.Path + "\x00"))
	if p.cfg.BearerToken == "" && p.cfg.BasicUser == "" {
		if authUser != "" {
			v.op.Name, v.op.Access = authUser, "caddy-auth"
			bind.Write([]byte("user\x00" + authUser + "\x00"))
		}
		bind.Write([]byte("addr\x00" + client.Unmap().String()))
		v.binding = bind.Sum(nil)
		return v, true
	}
	authz := r.Header.Values("Authorization")
	if p.cfg.BearerToken != "" {
		tok, found := credential(authz, "Bearer")
		if !found || !equal(tok, p.cfg.BearerToken) {
			return v, false
		}
		v.op.Access = "bearer"
		bind.Write([]byte("bearer\x00" + tok + "\x00"))
	}
	if p.cfg.BasicUser != "" {
		user, pass, ok := r.BasicAuth()
		if !ok || !equal(user, p.cfg.BasicUser) || !equal(pass, p.cfg.BasicPassword) {
			return v, false
		}
		if v.op.Access == "bearer" {
			v.op.Access = "bearer+basic"
		} else {
			v.op.Access = "basic"
		}
		v.op.Name = user
		bind.Write([]byte("basic\x00" + user + "\x00" + pass))
	}
	v.binding = bind.Sum(nil)
	return v, true
}

// credential finds the credentials of scheme among the Authorization
// field values (case-insensitive scheme).
func credential(values []string, scheme string) (string, bool) {
	for _, v := range values {
		s, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(s, scheme) {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// equal compares secrets in constant time (of the shorter length).
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// csrfKey signs this process's CSRF tokens: a token does not survive a
// restart (the page is simply loaded again).
var csrfKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// csrfTTL is how long a page's revoke forms stay valid.
const csrfTTL = time.Hour

// csrfToken is the token the page puts in its revoke forms: its issue
// time and an HMAC-SHA256 of it with the visitor's credential binding,
// so a token works only with the credential it was issued to, for
// csrfTTL.
func csrfToken(v visitor, now time.Time) string {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(now.Unix()))
	m := hmac.New(sha256.New, csrfKey)
	m.Write(v.binding)
	m.Write(ts[:])
	return base64.RawURLEncoding.EncodeToString(append(ts[:], m.Sum(nil)...))
}

// checkCSRF reports why tok is not a valid token for v now ("": valid).
func checkCSRF(tok string, v visitor, now time.Time) string {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if tok == "" || err != nil || len(raw) != 8+sha256.Size {
		return "the form's CSRF token is missing or malformed: load the page again"
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(raw[:8])), 0)
	m := hmac.New(sha256.New, csrfKey)
	m.Write(v.binding)
	m.Write(raw[:8])
	if !hmac.Equal(m.Sum(nil), raw[8:]) {
		return "the form's CSRF token was not issued to this credential: load the page again"
	}
	if now.Sub(issued) > csrfTTL || issued.Sub(now) > time.Minute {
		return "the form's CSRF token has expired: load the page again"
	}
	return ""
}

// crossSite reports why r looks like a cross-site request ("": it does
// not): a browser sends Sec-Fetch-Site and Origin with a form POST; a
// value other than same-origin, or an Origin that is not the page's
// own, is refused. A client that sends neither (curl) is judged by its
// CSRF token alone.
func crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return "Sec-Fetch-Site is " + s + ", not same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || origin == "null" || u.Host == "" {
		return "Origin " + origin + " is not the page's origin"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(u.Host, r.Host) || u.Scheme != scheme {
		return "Origin " + origin + " is not the page's origin"
	}
	return ""
}

// revoke serves POST Path/revoke: a same-origin form with a valid CSRF
// token, a synthesis_id and an optional reason; the contract is revoked
// through engine.OperatorRevoke and the page is shown again with what
// happened (303 to the page, so a reload does not post again).
func (p *Page) revoke(w http.ResponseWriter, r *http.Request, v visitor) {
	if why := crossSite(r); why != "" {
		p.logger.Warn("operator page refused a cross-site revoke", zap.String("why", why))
		plain(w, http.StatusForbidden, "refused as cross-site: "+why)
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		plain(w, http.StatusUnsupportedMediaType, "revoke takes an application/x-www-form-urlencoded form")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		plain(w, http.StatusBadRequest, "the form does not parse")
		return
	}
	if why := checkCSRF(r.PostForm.Get("csrf"), v, time.Now()); why != "" {
		p.logger.Warn("operator page refused a revoke without a valid CSRF token", zap.String("why", why))
		plain(w, http.StatusForbidden, why)
		return
	}
	id := strings.TrimSpace(r.PostForm.Get("synthesis_id"))
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if len(reason) > 256 {
		reason = reason[:256]
	}
	if id == "" || len(id) > 128 {
		plain(w, http.StatusBadRequest, "revoke needs a synthesis_id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	res, err := p.eng.OperatorRevoke(ctx, id, reason, v.op)
	q := url.Values{}
	switch {
	case errors.Is(err, engine.ErrContractUnknown):
		q.Set("error", "no contract with synthesis id "+id+" is known")
	case errors.Is(err, store.ErrUnavailable):
		q.Set("error", "the store did not answer; nothing was revoked: try again")
	case err != nil:
		p.logger.Error("operator page revoke failed", zap.String("synthesis_id", id), zap.Error(err))
		q.Set("error", "the revoke failed: see the gateway's log")
	case res.Noop:
		q.Set("done", "contract "+id+" had already ended ("+res.State+"); nothing changed")
	default:
		p.logger.Info("operator revoked a contract from the operator page", zap.String("synthesis_id", id),
			zap.String("actor", v.op.Name), zap.String("operator_access", v.op.Access), zap.String("request_id", res.RequestID))
		q.Set("done", "contract "+id+" revoked by "+v.op.Name)
	}
	q.Set("sig", noticeMAC(q.Get("done"), q.Get("error")))
	http.Redirect(w, r, p.cfg.Path+"?"+q.Encode(), http.StatusSeeOther)
}

// noticeMAC authenticates a revoke's outcome in the redirect's query
// (done, error), so that the page shows only outcomes it wrote itself:
// a crafted link's ?done=… is not shown (keyed like the CSRF tokens,
// with its own label so neither can stand for the other).
func noticeMAC(done, errText string) string {
	m := hmac.New(sha256.New, csrfKey)
	m.Write([]byte("rcns-operator-notice\x00"))
	m.Write([]byte(done))
	m.Write([]byte{0})
	m.Write([]byte(errText))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// noticeFrom is the outcome in the query of r when the page wrote it
// (noticeMAC), else none.
func noticeFrom(r *http.Request) notice {
	q := r.URL.Query()
	done, errText := q.Get("done"), q.Get("error")
	if done == "" && errText == "" {
		return notice{}
	}
	if !hmac.Equal([]byte(q.Get("sig")), []byte(noticeMAC(done, errText))) {
		return notice{}
	}
	return notice{Done: clip(done), Error: clip(errText)}
}

// notice is the outcome of a revoke, shown at the top of the page.
type notice struct{ Done, Error string }

//go:embed page.html
var pageHTML string

// pageTemplate renders the page (page.html).
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"ago": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"ms":  func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() },
	"more": func(total, shown int) int {
		return total - shown
	},
	"mib": func(n int64) string {
		if n < 1<<20 {
			return strconv.FormatInt(n, 10) + " B"
		}
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	},
}).Parse(pageHTML))

// pageData is what page.html renders.
type pageData struct {
	engine.OperatorView
	Store     StoreHealth
	Path      string
	CSRF      string
	Operator  string
	Access    string
	Now       time.Time
	Notice    notice
	MaxRows   int
	RingBound int
}

// show renders the page.
func (p *Page) show(w http.ResponseWriter, r *http.Request, v visitor) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	d := pageData{
		OperatorView: p.eng.OperatorView(ctx, engine.OperatorViewOptions{Max: p.cfg.MaxRows}),
		Store:        p.health(ctx),
		Path:         p.cfg.Path,
		CSRF:         csrfToken(v, time.Now()),
		Operator:     v.op.Name,
		Access:       v.op.Access,
		Now:          time.Now().UTC(),
		Notice:       noticeFrom(r),
		MaxRows:      p.cfg.MaxRows,
		RingBound:    engine.RefusalRing,
	}
	if d.Store.Kind == "memory" {
		d.Store.Down = false
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	if err := pageTemplate.Execute(w, d); err != nil {
		p.logger.Error("rendering the operator page", zap.Error(err))
	}
}

// clip bounds a notice taken from the query (the page's own redirect
// writes it; anyone can put text there, which the template escapes).
func clip(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}
