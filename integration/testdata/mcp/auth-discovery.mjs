// auth-discovery.mjs runs the MCP TypeScript SDK's client, with an OAuth
// provider as mcp-remote and the desktop hosts give it, against an MCP
// endpoint without any identity header: the endpoint's 401 starts the
// SDK's authorization discovery. It prints one JSON line: every
// request the SDK sent ("METHOD URL"), the error connect failed with,
// and whether the SDK got as far as sending a user to an authorization
// page or saving a client registration.
//
// usage: node auth-discovery.mjs <sdk dir> <MCP endpoint URL>
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [sdkDir, endpoint] = process.argv.slice(2);
const esm = (p) => pathToFileURL(path.join(sdkDir, 'dist', 'esm', p)).href;
const { Client } = await import(esm('client/index.js'));
const { StreamableHTTPClientTransport } = await import(esm('client/streamableHttp.js'));

const requests = [];
const loggingFetch = async (url, init) => {
  requests.push(`${(init?.method ?? 'GET').toUpperCase()} ${String(url)}`);
  return fetch(url, init);
};

let authorizationURL = null;
let registered = null;
let clientInfo;
let tokens;
let verifier;
const provider = {
  get redirectUrl() { return 'http://127.0.0.1:1/oauth/callback'; },
  get clientMetadata() {
    return { redirect_uris: ['http://127.0.0.1:1/oauth/callback'], client_name: 'rcns auth-discovery test',
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  },
  clientInformation: () => clientInfo,
  saveClientInformation: (info) => { clientInfo = info; registered = info; },
  tokens: () => tokens,
  saveTokens: (t) => { tokens = t; },
  redirectToAuthorization: (u) => { authorizationURL = String(u); },
  saveCodeVerifier: (v) => { verifier = v; },
  codeVerifier: () => verifier,
};

const client = new Client({ name: 'rcns-auth-discovery', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(endpoint), { authProvider: provider, fetch: loggingFetch });
let error = null;
try {
  await client.connect(transport);
} catch (e) {
  error = String(e?.message ?? e);
}
await client.close().catch(() => {});
console.log(JSON.stringify({ requests, error, authorizationURL, registered }));
