package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddy-rcns/caddy-rcns/caddymodule/agtp"
	"github.com/caddy-rcns/caddy-rcns/internal/secureurl"
	"github.com/caddy-rcns/caddy-rcns/internal/textcut"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// introspectionAnswer is an RFC 7662 §2.2 answer.
type introspectionAnswer struct {
	Active   bool            `json:"active"`
	Scope    json.RawMessage `json:"scope"`
	ClientID string          `json:"client_id"`
	Sub      string          `json:"sub"`
	Aud      json.RawMessage `json:"aud"`
	Iss      string          `json:"iss"`
	Exp      *int64          `json:"exp"`
	Nbf      *int64          `json:"nbf"`
	Iat      *int64          `json:"iat"`
}

// introspect verifies an opaque token at the introspection endpoint
// (RFC 7662), reusing an answer for IntrospectionCacheTTL at most and
// never past the token's exp; the cache is keyed by the token's
// SHA-256, never the token.
func (v *oauthVerifier) introspect(ctx context.Context, tok string) (tokenInfo, *agtp.Error) {
	key := tokenKey("", tok)
	if c, ok := v.introMem.Get(key); ok {
		return v.fromCache(c)
	}
	endpoint := v.cfg.IntrospectionEndpoint
	if endpoint == "" {
		meta, err := v.metadata(ctx)
		if err != nil {
			return tokenInfo{}, v.unavailable("the issuer's metadata could not be read", err)
		}
		endpoint = meta.IntrospectionEndpoint
		if endpoint != "" {
			// The gateway sends its client secret and the caller's token
			// there: never over cleartext to another host.
			if err := secureurl.Check(endpoint); err != nil {
				return tokenInfo{}, v.unavailable("no usable introspection endpoint (the metadata's is refused; nothing was sent to it)",
					fmt.Errorf("introspection_endpoint %q %v", textcut.Clip(secureurl.Redacted(endpoint)), err))
			}
		}
	}
	if endpoint == "" || v.cfg.ClientID == "" {
		return tokenInfo{}, agtp.TokenInvalid.New("the access token is not a JWT, and this gateway introspects no opaque tokens (no introspection endpoint or client credentials configured)")
	}
	form := url.Values{"token": {tok}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return tokenInfo{}, v.unavailable("the introspection request could not be made", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(v.cfg.ClientID), url.QueryEscape(v.cfg.ClientSecret))
	var a introspectionAnswer
	if err := v.do(req, &a); err != nil {
		return tokenInfo{}, v.unavailable("the token could not be introspected", err)
	}
	if !a.Active {
		c := &introspected{}
		v.introMem.SetWithTTL(key, c, 1, time.Duration(v.cfg.IntrospectionCacheTTL))
		return v.fromCache(c)
	}
	var aud []string
	if len(a.Aud) > 0 {
		var one string
		if json.Unmarshal(a.Aud, &one) == nil {
			aud = []string{one}
		} else {
			_ = json.Unmarshal(a.Aud, &aud)
		}
	}
	if a.Iss != "" && a.Iss != v.cfg.Issuer {
		return tokenInfo{}, agtp.TokenInvalid.New("the introspected token was issued by " + textcut.Clip(a.Iss) + ", not by this gateway's issuer")
	}
	if !oauthex.MatchesResource(aud, v.cfg.Resource) {
		return tokenInfo{}, agtp.TokenAudience.WithFields("the access token is for another resource: its audience does not include this gateway's resource "+v.cfg.Resource+" (RFC 8707)",
			map[string]any{"resource": v.cfg.Resource})
	}
	info := tokenInfo{clientID: a.ClientID, sub: a.Sub, scopes: scopeList(a.Scope)}
	var nbf, iat *josejwt.NumericDate
	if a.Exp != nil {
		info.exp = time.Unix(*a.Exp, 0)
	}
	if a.Nbf != nil {
		nbf = josejwt.NewNumericDate(time.Unix(*a.Nbf, 0))
	}
	if a.Iat != nil {
		iat = josejwt.NewNumericDate(time.Unix(*a.Iat, 0))
	}
	if e := v.lifetime(a.Exp == nil, info.exp, nbf, iat); e != nil {
		return tokenInfo{}, e
	}
	v.remember(key, info)
	return info, nil
}
