// authserver.mjs — a real OAuth 2.1 / OpenID authorization server for the
// tests and the demo, on oidc-provider (panva, OpenID-certified; `make deps`
// installs it into .tools). internal/oauthtest starts it.
//
//   node scripts/oauth/authserver.mjs config.json
//
// config.json:
//   {
//     "port": 0,                       // 0: a free port
//     "keys": {"keys": [<private JWK>, ...]},   // the first signs; all are published
//     "resources": {"https://api.example/": {"scopes": ["read"], "format": "jwt", "ttl_seconds": 300}},
//     "default_resource": "",          // optional: the resource of requests naming none
//     "clients": [<oidc-provider client metadata>, ...],
//     "account": "alice",              // whom the auto-consent logs in
//     "registration": false,           // dynamic client registration (RFC 7591)
//     "introspection_clients": ["gateway"],
//     "token_exchange": {"ttl_seconds": 0, "subject_clients": []}   // optional; see below
//   }
//
// The issuer is http://127.0.0.1:PORT; its metadata is served at both
// /.well-known/openid-configuration and /.well-known/oauth-authorization-server
// (RFC 8414, the same document). When listening, the one line on
// stdout is {"issuer":"http://127.0.0.1:PORT"}; everything else goes to
// stderr. The authorization-code flow needs no browser: the interaction
// route logs `account` in (or the authorization request's login_hint,
// so a test can log in several people) and grants the requested scopes and resource at
// once, so following the redirects of an authorization URL ends at the
// client's redirect_uri with code and state. PKCE (S256) is required for
// every authorization-code request. A client with application_type
// "native" (the default here for public clients, token_endpoint_auth_method
// "none") may use its loopback redirect URI with any port (RFC 8252 §7.3).
//
// Token exchange (RFC 8693), added through oidc-provider's documented
// extension point registerGrantType: a client allowed the grant type
// urn:ietf:params:oauth:grant-type:token-exchange (in its grant_types)
// posts subject_token (an access token this server issued: a JWT it signed,
// verified against its own keys, or an opaque one it stores),
// subject_token_type urn:ietf:params:oauth:token-type:access_token,
// resource (or audience) naming one configured resource, and optionally
// scope. The answer is an access token for that resource (its format, and
// its TTL unless token_exchange.ttl_seconds is set) whose sub is the
// subject token's sub, act.sub the exchanging client (RFC 8693 §4.1), and
// scope the requested scopes that both the subject token and the resource
// have (all of the subject token's that the resource has when scope is
// absent), with issued_token_type ...:access_token. Refusals: a subject
// token that is not valid (bad signature, another issuer, expired, unknown)
// is invalid_grant, and so is one whose client is not listed in
// token_exchange.subject_clients when that list is given (the server's
// exchange policy: whose tokens may be exchanged); an unknown resource is invalid_target; no scope left is
// invalid_scope; a wrong subject_token_type is invalid_request.
//
// GET /_test/stats answers {"token_exchange": {"issued": N, "refused": M}}
// so a test can count the exchanges the server saw.

import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const log = (...args) => console.error('authserver:', ...args);

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

// oidc-provider lives in <repo>/.tools/node_modules (or a NODE_PATH entry);
// ESM imports do not consult NODE_PATH, so it is found by hand.
async function loadProvider() {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const dirs = [
    ...(process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean),
    path.resolve(here, '../../.tools/node_modules'),
  ];
  for (const dir of dirs) {
    const pkgFile = path.join(dir, 'oidc-provider', 'package.json');
    if (!fs.existsSync(pkgFile)) continue;
    const pkg = JSON.parse(fs.readFileSync(pkgFile, 'utf8'));
    const entry = path.join(dir, 'oidc-provider', pkg.main || 'lib/index.js');
    log(`oidc-provider ${pkg.version} from ${dir}`);
    const mod = await import(pathToFileURL(entry).href);
    // jose (panva) is oidc-provider's own JOSE library, installed with it.
    const josePkg = JSON.parse(fs.readFileSync(path.join(dir, 'jose', 'package.json'), 'utf8'));
    const joseEntry = josePkg.exports?.['.']?.default || 'dist/webapi/index.js';
    const jose = await import(pathToFileURL(path.join(dir, 'jose', joseEntry)).href);
    return { ...mod, jose };
  }
  throw new Error(`oidc-provider not found in ${dirs.join(', ')}: run make deps`);
}

function signingAlg(jwk) {
  if (jwk.alg) return jwk.alg;
  switch (jwk.kty) {
    case 'RSA': return 'RS256';
    case 'EC': return { 'P-256': 'ES256', 'P-384': 'ES384', 'P-521': 'ES512' }[jwk.crv];
    case 'OKP': return 'EdDSA';
    default: throw new Error(`no signing alg for kty ${jwk.kty}`);
  }
}

async function main() {
  const cfgPath = process.argv[2];
  if (!cfgPath) throw new Error('usage: authserver.mjs config.json');
  const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
  const keys = cfg.keys?.keys || [];
  if (keys.length === 0) throw new Error('config: keys.keys is empty');
  const alg = signingAlg(keys[0]);
  const resources = cfg.resources || {};
  const account = cfg.account || 'alice';
  const introspectors = new Set(cfg.introspection_clients || []);
  const exchangeTTL = cfg.token_exchange?.ttl_seconds || 0;
  const exchangeSubjects = cfg.token_exchange?.subject_clients ? new Set(cfg.token_exchange.subject_clients) : null;

  const { default: Provider, errors, jose } = await loadProvider();

  // Listen first: the issuer carries the port.
  const server = http.createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(cfg.port || 0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;

  const clients = (cfg.clients || []).map((c) => {
    const out = { ...c };
    if (out.token_endpoint_auth_method === 'none' && !out.application_type) {
      out.application_type = 'native';
    }
    return out;
  });

  // The scopes of every resource are the server's scopes too: a client
  // registering dynamically (RFC 7591) may name them in its metadata's
  // scope (the MCP SDKs send the scope they will request).
  const resourceScopes = [...new Set(Object.values(resources).flatMap((r) => r.scopes || []))];

  function resourceServerInfo(indicator) {
    const rs = resources[indicator];
    if (!rs) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
    const info = {
      scope: (rs.scopes || []).join(' '),
      audience: indicator,
      accessTokenTTL: rs.ttl_seconds || 3600,
      accessTokenFormat: rs.format === 'opaque' ? 'opaque' : 'jwt',
    };
    if (info.accessTokenFormat === 'jwt') info.jwt = { sign: { alg } };
    return info;
  }

  const provider = new Provider(issuer, {
    clients,
    scopes: ['openid', 'offline_access', ...resourceScopes],
    responseTypes: ['code'], // OAuth 2.1: no implicit, no hybrid
    jwks: { keys },
    cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
    clientDefaults: {
      grant_types: ['authorization_code'],
      id_token_signed_response_alg: alg,
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    async findAccount(_ctx, sub) {
      return { accountId: sub, async claims() { return { sub }; } };
    },
    // Any Origin may call the endpoints CORS covers (browser MCP clients).
    clientBasedCORS() { return true; },
    pkce: { required() { return true; } },
    // Refresh tokens to every client allowed the refresh_token grant.
    async issueRefreshToken(_ctx, client) { return client.grantTypeAllowed('refresh_token'); },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        async allowedPolicy(ctx, client) {
          return introspectors.has(client.clientId);
        },
      },
      revocation: { enabled: true },
      registration: { enabled: !!cfg.registration, initialAccessToken: false },
      resourceIndicators: {
        enabled: true,
        async defaultResource(_ctx, _client, oneOf) {
          return oneOf || cfg.default_resource || undefined;
        },
        // A token request naming no resource gets the one granted.
        async useGrantedResource() { return true; },
        async getResourceServerInfo(_ctx, indicator) {
          return resourceServerInfo(indicator);
        },
      },
    },
    // An exchanged token names the client that exchanged it (RFC 8693 §4.1).
    async extraTokenClaims(_ctx, token) {
      if (token.gty === TOKEN_EXCHANGE) return { act: { sub: token.clientId } };
      return undefined;
    },
    ttl: {
      AccessToken(_ctx, token) {
        if (token.gty === TOKEN_EXCHANGE && exchangeTTL) return exchangeTTL;
        return token.resourceServer?.accessTokenTTL || 3600;
      },
      ClientCredentials(_ctx, token) { return token.resourceServer?.accessTokenTTL || 600; },
    },
    async renderError(ctx, out, error) {
      log('error page:', JSON.stringify(out), error?.stack || '');
      ctx.type = 'application/json';
      ctx.body = out;
    },
  });

  provider.on('server_error', (_ctx, err) => log('server_error:', err?.stack || err));
  provider.on('grant.error', (_ctx, err) => log('grant.error:', err?.message, err?.error_description || ''));
  provider.on('introspection.error', (_ctx, err) => log('introspection.error:', err?.message, err?.error_description || ''));
  provider.on('authorization.error', (_ctx, err) => log('authorization.error:', err?.message, err?.error_description || ''));

  // Token exchange (RFC 8693) through the documented extension point.
  const publicKeys = new Map(keys.map((k) => [k.kid, crypto.createPublicKey(crypto.createPrivateKey({ key: k, format: 'jwk' }))]));
  const stats = { token_exchange: { issued: 0, refused: 0 } };
  async function subjectOf(subjectToken) {
    if (subjectToken.split('.').length === 3) {
      try {
        const { payload } = await jose.jwtVerify(subjectToken, async (header) => {
          const key = publicKeys.get(header.kid);
          if (!key) throw new Error(`unknown kid ${header.kid}`);
          return key;
        }, { issuer, typ: 'at+jwt', algorithms: [alg] });
        return { sub: payload.sub, scope: payload.scope || '', clientId: payload.client_id };
      } catch (err) {
        throw new errors.InvalidGrant(`subject_token invalid: ${err.message}`);
      }
    }
    const stored = (await provider.AccessToken.find(subjectToken)) || (await provider.ClientCredentials.find(subjectToken));
    if (!stored || stored.isExpired) throw new errors.InvalidGrant('subject_token invalid: unknown or expired');
    return { sub: stored.accountId || stored.clientId, scope: stored.scope || '', clientId: stored.clientId };
  }
  provider.registerGrantType(TOKEN_EXCHANGE, async (ctx) => {
    try {
      const { params, client } = ctx.oidc;
      if (!params.subject_token) throw new errors.InvalidRequest('missing subject_token');
      if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
      }
      if (params.actor_token) throw new errors.InvalidRequest('actor_token is not supported');
      if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
        throw new errors.InvalidRequest(`requested_token_type must be ${ACCESS_TOKEN_TYPE}`);
      }
      const targets = [...new Set([params.resource, params.audience].flat().filter(Boolean))];
      if (targets.length !== 1) throw new errors.InvalidTarget('name exactly one resource (resource or audience)');
      const info = resourceServerInfo(targets[0]);
      const subject = await subjectOf(params.subject_token);
      if (exchangeSubjects && !exchangeSubjects.has(subject.clientId)) {
        throw new errors.InvalidGrant(`tokens of client ${subject.clientId} may not be exchanged here`);
      }
      const had = new Set(subject.scope.split(' ').filter(Boolean));
      const offered = new Set(info.scope.split(' ').filter(Boolean));
      const asked = params.scope ? params.scope.split(' ').filter(Boolean) : [...had];
      const scope = asked.filter((x) => had.has(x) && offered.has(x));
      if (params.scope && scope.length === 0) {
        throw new errors.InvalidScope('none of the requested scopes is both in the subject token and offered by the resource');
      }
      const token = new provider.AccessToken({
        accountId: subject.sub,
        client,
        gty: TOKEN_EXCHANGE,
        scope: scope.join(' ') || undefined,
      });
      token.resourceServer = new provider.ResourceServer(targets[0], info);
      ctx.oidc.entity('AccessToken', token);
      const value = await token.save();
      stats.token_exchange.issued += 1;
      ctx.body = {
        access_token: value,
        issued_token_type: ACCESS_TOKEN_TYPE,
        token_type: token.tokenType,
        expires_in: token.expiration,
        scope: token.scope || undefined,
      };
    } catch (err) {
      stats.token_exchange.refused += 1;
      throw err;
    }
  }, ['subject_token', 'subject_token_type', 'actor_token', 'actor_token_type', 'requested_token_type', 'audience', 'scope', 'resource']);

  const oidc = provider.callback();

  // The test plays the user: log `account` in and grant whatever is asked.
  async function interact(req, res) {
    try {
      const details = await provider.interactionDetails(req, res);
      const { prompt, params } = details;
      if (prompt.name === 'login') {
        await provider.interactionFinished(req, res, { login: { accountId: params.login_hint || account } }, { mergeWithLastSubmission: false });
        return;
      }
      if (prompt.name === 'consent') {
        let grant;
        if (details.grantId) {
          grant = await provider.Grant.find(details.grantId);
        } else {
          grant = new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
        }
        const d = prompt.details || {};
        if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
        if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
        for (const [indicator, scopes] of Object.entries(d.missingResourceScopes || {})) {
          grant.addResourceScope(indicator, scopes.join(' '));
        }
        const grantId = await grant.save();
        const consent = details.grantId ? {} : { grantId };
        await provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
        return;
      }
      throw new Error(`unknown prompt ${prompt.name}`);
    } catch (err) {
      log('interaction:', err?.stack || err);
      res.statusCode = 500;
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ error: 'server_error', error_description: String(err?.message || err) }));
    }
  }

  server.on('request', (req, res) => {
    if (req.method === 'GET' && req.url === '/_test/stats') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(stats));
      return;
    }
    // RFC 8414 metadata: the same document as OpenID discovery.
    if (req.url === '/.well-known/oauth-authorization-server' || req.url.startsWith('/.well-known/oauth-authorization-server?')) {
      req.url = req.url.replace('/.well-known/oauth-authorization-server', '/.well-known/openid-configuration');
    }
    if (req.method === 'GET' && /^\/interaction\/[^/?]+(\?|$)/.test(req.url)) {
      interact(req, res);
      return;
    }
    oidc(req, res);
  });

  process.stdout.write(`${JSON.stringify({ issuer })}\n`);
  log(`listening, issuer ${issuer}, signing ${alg} kid ${keys[0].kid || '(none)'}, ${Object.keys(resources).length} resources, ${clients.length} clients, registration ${!!cfg.registration}`);

  const stop = (sig) => {
    log(`${sig}, closing`);
    server.close(() => process.exit(0));
    server.closeAllConnections?.();
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((err) => {
  log(err?.stack || err);
  process.exit(1);
});
