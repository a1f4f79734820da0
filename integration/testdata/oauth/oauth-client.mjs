// oauth-client.mjs runs the MCP TypeScript SDK's client with an OAuth
// client provider (tokens, client registration and PKCE verifier held in
// memory) against an MCP endpoint behind identity oauth: the endpoint's
// 401 starts the SDK's discovery (protected-resource metadata, then the
// authorization server's metadata), the SDK registers a client (RFC 7591)
// and sends the user to the authorization URL. redirectToAuthorization
// plays the browser: it follows the redirects by hand (keeping cookies)
// until the redirect_uri and keeps the code; finishAuth exchanges it
// (PKCE), and a second connection calls the tool twice with one
// Idempotency-Key in _meta.
//
// It prints one JSON line: every request the SDK sent ("METHOD URL"), the
// registered client, the token's scope, and the two tool results.
//
// usage: node oauth-client.mjs <sdk dir> <MCP endpoint URL> <tool> <arguments JSON> <idempotency key>
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [sdkDir, endpoint, tool, argsJSON, idemKey] = process.argv.slice(2);
const esm = (p) => pathToFileURL(path.join(sdkDir, 'dist', 'esm', p)).href;
const { Client } = await import(esm('client/index.js'));
const { StreamableHTTPClientTransport } = await import(esm('client/streamableHttp.js'));
const { UnauthorizedError } = await import(esm('client/auth.js'));

const REDIRECT = 'http://127.0.0.1:49152/oauth/callback';
const requests = [];
const loggingFetch = async (url, init) => {
  requests.push(`${(init?.method ?? 'GET').toUpperCase()} ${String(url)}`);
  return fetch(url, init);
};

// The browser: follow the authorization URL's redirects with a cookie jar
// (path-scoped) until the redirect_uri; return its code.
async function consent(start) {
  const jar = []; // {name, value, path}
  let url = new URL(start);
  for (let i = 0; i < 20; i++) {
    const cookie = jar.filter((c) => url.pathname.startsWith(c.path)).map((c) => `${c.name}=${c.value}`).join('; ');
    const res = await fetch(url, { redirect: 'manual', headers: cookie ? { cookie } : {} });
    for (const sc of res.headers.getSetCookie()) {
      const [nv, ...attrs] = sc.split(';').map((s) => s.trim());
      const eq = nv.indexOf('=');
      const name = nv.slice(0, eq);
      const value = nv.slice(eq + 1);
      const p = attrs.find((a) => a.toLowerCase().startsWith('path='))?.slice(5) || '/';
      const at = jar.findIndex((c) => c.name === name && c.path === p);
      if (at >= 0) jar.splice(at, 1);
      if (value !== '' && !/expires=thu, 01 jan 1970/i.test(sc)) jar.push({ name, value, path: p });
    }
    const loc = res.headers.get('location');
    if (res.status < 300 || res.status >= 400 || !loc) {
      throw new Error(`authorization stopped at ${url} with ${res.status}: ${await res.text()}`);
    }
    await res.arrayBuffer();
    url = new URL(loc, url);
    if (url.origin + url.pathname === REDIRECT) {
      const err = url.searchParams.get('error');
      if (err) throw new Error(`authorization error ${err}: ${url.searchParams.get('error_description')}`);
      return url.searchParams.get('code');
    }
  }
  throw new Error('more than 20 redirects');
}

let clientInfo;
let tokens;
let verifier;
let authorizationURL = null;
let code = null;
const provider = {
  get redirectUrl() { return REDIRECT; },
  get clientMetadata() {
    return { redirect_uris: [REDIRECT], client_name: 'rcns oauth-client test',
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation: () => clientInfo,
  saveClientInformation: (info) => { clientInfo = info; },
  tokens: () => tokens,
  saveTokens: (t) => { tokens = t; },
  redirectToAuthorization: async (u) => { authorizationURL = String(u); code = await consent(u); },
  saveCodeVerifier: (v) => { verifier = v; },
  codeVerifier: () => verifier,
};

const out = { requests };
try {
  const first = new StreamableHTTPClientTransport(new URL(endpoint), { authProvider: provider, fetch: loggingFetch });
  const c1 = new Client({ name: 'rcns-oauth-client', version: '1.0.0' });
  try {
    await c1.connect(first);
    throw new Error('connected without authorization');
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  if (!code) throw new Error('no authorization code');
  await first.finishAuth(code);
  await c1.close().catch(() => {});

  const transport = new StreamableHTTPClientTransport(new URL(endpoint), { authProvider: provider, fetch: loggingFetch });
  const client = new Client({ name: 'rcns-oauth-client', version: '1.0.0' });
  await client.connect(transport);
  const params = { name: tool, arguments: JSON.parse(argsJSON), _meta: { 'io.github.caddy-rcns/idempotency-key': idemKey } };
  out.first = await client.callTool(params);
  out.second = await client.callTool(params);
  await client.close();
} catch (e) {
  out.error = String(e?.stack ?? e);
}
out.authorizationURL = authorizationURL;
out.clientID = clientInfo?.client_id ?? null;
out.tokenScope = tokens?.scope ?? null;
out.accessToken = tokens?.access_token ?? null;
console.log(JSON.stringify(out));
