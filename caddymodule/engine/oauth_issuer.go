package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/caddymodule/upstreamauth"
	"github.com/caddy-rcns/caddy-rcns/internal/recovered"
	"github.com/caddy-rcns/caddy-rcns/internal/secureurl"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.uber.org/zap"
)

// key finds the JWKS key kid (alg alg) in the held set. With no set
// held, the request waits for a fetch; a set older than JWKSMaxAge is
// refreshed in the background while the held one still verifies (a slow
// or unreachable issuer delays no request that way); an unknown kid
// fetches the set again, waiting, when the last fetch started at least
// JWKSMinRefresh ago. A failed fetch is not tried again for
// issuerRetryAfter seconds, whatever asks (a dead issuer costs a request
// no timeout then). With no set held and none readable, the answer is
// 503 issuer-unavailable.
func (v *oauthVerifier) key(ctx context.Context, kid, alg string) (*jose.JSONWebKey, *agtp.Error) {
	v.mu.Lock()
	set, at, tried, ferr, failed := v.keys, v.keysAt, v.keysTry, v.keysErr, v.keysFail
	v.mu.Unlock()
	now := v.now()
	backoff := ferr != nil && now.Sub(failed) < issuerRetryAfter*time.Second
	switch {
	case set == nil && backoff:
		return nil, v.unavailable("the issuer's keys (JWKS) could not be read", ferr)
	case set == nil:
		fresh, err := v.fetchKeys(ctx)
		if err != nil {
			return nil, v.unavailable("the issuer's keys (JWKS) could not be read", err)
		}
		set = fresh
	case now.Sub(at) > time.Duration(v.cfg.JWKSMaxAge) && !backoff:
		v.refreshKeys(ctx)
	}
	if k := pick(set, kid, alg); k != nil {
		return k, nil
	}
	unread := backoff // the issuer's keys could not be read just now
	if now.Sub(tried) >= time.Duration(v.cfg.JWKSMinRefresh) && !backoff {
		// An unknown kid: the issuer may have rotated its keys.
		if fresh, err := v.fetchKeys(ctx); err == nil {
			if k := pick(fresh, kid, alg); k != nil {
				return k, nil
			}
		} else {
			unread, ferr = true, err // logged by unavailable
		}
	}
	if unread {
		// Not known to be bad: a key the issuer rotated in during its
		// outage is one it publishes (helper-149: such a token was
		// refused 401 token-invalid, not retryable).
		return nil, v.unavailable("the access token is signed by a key (kid "+textcut.Clip(kid)+") this gateway does not hold, and the issuer's keys (JWKS) could not be read to look for it", ferr)
	}
	if kid == "" {
		return nil, agtp.TokenInvalid.New("the access token names no key (kid), and the issuer does not publish exactly one key for its algorithm " + textcut.Clip(alg))
	}
	return nil, agtp.TokenInvalid.New("the access token is signed by a key (kid " + textcut.Clip(kid) + ") the issuer does not publish")
}

// pick is the key of set named kid, usable with alg: with no kid, the
// set's only such key.
func pick(set *jose.JSONWebKeySet, kid, alg string) *jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var found *jose.JSONWebKey
	n := 0
	for i := range set.Keys {
		k := &set.Keys[i]
		if (kid != "" && k.KeyID != kid) || (k.Algorithm != "" && k.Algorithm != alg) || (k.Use != "" && k.Use != "sig") {
			continue
		}
		found, n = k, n+1
	}
	if n != 1 && kid == "" {
		return nil
	}
	return found
}

// refreshKeys starts a background fetch of the JWKS unless one runs
// already: the held set keeps verifying meanwhile. The fetch keeps ctx's
// values, not its cancellation, and ends within the client's timeout.
// A panic in the fetch itself becomes its error (shared: logged once
// at ERROR with its stack, "panic fetching from an OAuth issuer", then
// as a failed refresh, the held set kept); one elsewhere in the goroutine is
// recovered and logged at ERROR ("panic refreshing an issuer's JWKS in
// the background"), and the next request that needs the keys starts
// another refresh. Neither ends the process.
func (v *oauthVerifier) refreshKeys(ctx context.Context) {
	if !v.refreshing.CompareAndSwap(false, true) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer v.refreshing.Store(false)
		defer recovered.Guard(v.log, "panic refreshing an issuer's JWKS in the background; the keys fetched before still verify", zap.String("issuer", v.cfg.Issuer))
		if _, err := v.fetchKeys(ctx); err != nil && v.log != nil {
			v.log.Warn("oauth: refreshing the issuer's JWKS failed; the keys fetched before still verify", zap.String("issuer", v.cfg.Issuer), zap.Error(err))
		}
	}()
}

// fetchKeys reads the JWKS and keeps it: one fetch at a time, shared by
// every request that waits for it (shared). A set that holds no key
// (RFC 7517 §5: "keys" is required; an issuer that publishes none has
// signed no token) is a failure, as an unreadable one is: the set held
// before stays, and the failure is remembered for issuerRetryAfter
// seconds (key).
func (v *oauthVerifier) fetchKeys(ctx context.Context) (*jose.JSONWebKeySet, error) {
	r, err := v.shared(ctx, "jwks", func(ctx context.Context) (any, error) {
		v.mu.Lock()
		v.keysTry = v.now()
		v.mu.Unlock()
		set, err := v.readKeys(ctx)
		v.mu.Lock()
		defer v.mu.Unlock()
		if err != nil {
			v.keysErr, v.keysFail = err, v.now()
			return nil, err
		}
		v.keys, v.keysAt, v.keysErr = set, v.now(), nil
		return set, nil
	})
	if err != nil {
		return nil, err
	}
	return r.(*jose.JSONWebKeySet), nil
}

// readKeys reads the JWKS at JWKSURI, else at the metadata's jwks_uri,
// keeping only the public part of each key.
func (v *oauthVerifier) readKeys(ctx context.Context) (*jose.JSONWebKeySet, error) {
	uri := v.cfg.JWKSURI
	if uri == "" {
		meta, e := v.metadata(ctx)
		if e != nil {
			return nil, e
		}
		if meta.JWKSURI == "" {
			return nil, errors.New("the issuer's metadata has no jwks_uri")
		}
		// The keys every token is verified with: never over cleartext
		// to another host, as the configured jwks_uri (oauthconfig.go).
		if err := secureurl.Check(meta.JWKSURI); err != nil {
			return nil, fmt.Errorf("the issuer's metadata names jwks_uri %q, which %v: no keys are read from it", textcut.Clip(secureurl.Redacted(meta.JWKSURI)), err)
		}
		uri = meta.JWKSURI
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, uri, &set); err != nil {
		return nil, err
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("the JWKS at %s holds no keys (RFC 7517 §5)", textcut.Clip(uri))
	}
	for i := range set.Keys {
		set.Keys[i] = set.Keys[i].Public()
	}
	return &set, nil
}

// shared runs fn once for all the concurrent callers of key
// (singleflight), under ctx's values but not its cancellation: a
// caller that hangs up does not cancel the fetch the others wait for
// (the client's timeout bounds it). Each caller waits at most until its
// own ctx ends.
func (v *oauthVerifier) shared(ctx context.Context, key string, fn func(context.Context) (any, error)) (any, error) {
	detached := context.WithoutCancel(ctx)
	ch := v.flight.DoChan(key, func() (val any, err error) {
		// DoChan re-panics where nothing recovers it; its waiters get
		// the panic as their error, logged here once with its stack.
		defer recovered.IntoLog(&err, v.log, "panic fetching from an OAuth issuer; the requests waiting for it fail", zap.String("issuer", v.cfg.Issuer), zap.String("fetch", key))
		return fn(detached)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// metadata is the issuer's RFC 8414 metadata, read on first use (the
// RFC 8414 path, then OpenID Connect's); a failure is remembered for
// issuerRetryAfter seconds.
func (v *oauthVerifier) metadata(ctx context.Context) (*oauthex.AuthServerMeta, error) {
	v.mu.Lock()
	meta, merr, mtry := v.meta, v.metaErr, v.metaTry
	v.mu.Unlock()
	if meta != nil {
		return meta, nil
	}
	if merr != nil && v.now().Sub(mtry) < issuerRetryAfter*time.Second {
		return nil, merr
	}
	r, err := v.shared(ctx, "meta", func(ctx context.Context) (any, error) {
		// Read here, not with oauthex.GetAuthServerMeta: that is an
		// OAuth client's reader, which refuses an issuer that does not
		// advertise PKCE (a client's concern, not a resource server's:
		// a machine-to-machine issuer need not) and endpoints on private
		// addresses. The URLs this verifier uses are checked where they
		// are used (readKeys, introspect).
		var last, mismatch error
		for _, u := range upstreamauth.MetadataURLs(v.cfg.Issuer) {
			var m oauthex.AuthServerMeta
			if err := v.getJSON(ctx, u, &m); err != nil {
				last = err
				continue
			}
			// RFC 8414 §3.3: the issuer named must be the one asked for
			// (a trailing slash aside, as the MCP SDK compares them).
			if strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(v.cfg.Issuer, "/") {
				mismatch = fmt.Errorf("the metadata at %s names issuer %q, not %q", u, textcut.Clip(m.Issuer), v.cfg.Issuer)
				continue
			}
			v.mu.Lock()
			v.meta, v.metaErr = &m, nil
			v.mu.Unlock()
			return &m, nil
		}
		if mismatch != nil {
			last = mismatch // the fault to name, whatever the other URL said
		}
		if last == nil {
			last = errors.New("the issuer publishes no RFC 8414 or OpenID Connect metadata")
		}
		v.mu.Lock()
		v.metaErr, v.metaTry = last, v.now()
		v.mu.Unlock()
		return nil, last
	})
	if err != nil {
		return nil, err
	}
	return r.(*oauthex.AuthServerMeta), nil
}

// getJSON reads the JSON document at uri into out (200 only, at most
// maxOAuthDocument bytes).
func (v *oauthVerifier) getJSON(ctx context.Context, uri string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	return v.do(req, out)
}

// do sends req and decodes a 200 JSON answer into out.
func (v *oauthVerifier) do(req *http.Request, out any) error {
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxOAuthDocument+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s answered %d", req.Method, req.URL.Redacted(), resp.StatusCode)
	}
	if len(body) > maxOAuthDocument {
		return fmt.Errorf("%s answered more than %d bytes", req.URL.Redacted(), maxOAuthDocument)
	}
	return json.Unmarshal(body, out)
}

// unavailable is 503 issuer-unavailable: the authorization server could
// not be reached, so no token can be verified and nothing runs. Its
// WARN line is written within the engine's log bound (LogBurst lines
// per LogWindow for each what, with the count held back in
// "suppressed"): during an outage every request with a token meets it,
// and the agents' requests must not set the log volume.
func (v *oauthVerifier) unavailable(what string, err error) *agtp.Error {
	l := v.log
	if v.h != nil && v.h.logBudget != nil {
		l = v.h.logBudget.logFor(v.log, "oauth-issuer", what)
	}
	// A caller that hung up while waiting for a shared fetch (shared)
	// says nothing of the issuer.
	if l != nil && !errors.Is(err, context.Canceled) {
		l.Warn("oauth: the authorization server is unavailable", zap.String("issuer", v.cfg.Issuer), zap.String("what", what), zap.Error(err))
	}
	return agtp.IssuerUnavailable.WithFields(what+" from "+v.cfg.Issuer+"; nothing was executed; retry after Retry-After seconds",
		map[string]any{"retry_after_seconds": issuerRetryAfter, "issuer": v.cfg.Issuer})
}
