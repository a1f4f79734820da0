// ts-preview.mjs runs the MCP TypeScript SDK's client (headers as the
// agent: Agent-ID and Authority-Scope on every request) against a
// confirm-first gateway: a call with a bad argument, then book-room
// (the preview), then book-room again with its synthesis_id (the
// confirmation). It prints one JSON line with the three results (each
// with isError, structuredContent and the text), or {"error": ...}.
//
// usage: node ts-preview.mjs <sdk dir> <MCP endpoint URL> <Agent-ID> <Authority-Scope> <book-room arguments JSON>
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [sdkDir, endpoint, agentID, scope, argsJSON] = process.argv.slice(2);
const esm = (p) => pathToFileURL(path.join(sdkDir, 'dist', 'esm', p)).href;
const { Client } = await import(esm('client/index.js'));
const { StreamableHTTPClientTransport } = await import(esm('client/streamableHttp.js'));

const pick = (r) => ({ isError: r.isError === true, structured: r.structuredContent, text: r.content?.[0]?.text ?? '' });
try {
  const client = new Client({ name: 'rcns-it-ts', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: { 'Agent-ID': agentID, 'Authority-Scope': scope } },
  });
  await client.connect(transport);
  const args = JSON.parse(argsJSON);
  const bad = await client.callTool({ name: 'book-room', arguments: { ...args, nights: 'two' } });
  const preview = await client.callTool({ name: 'book-room', arguments: args });
  const sid = preview.structuredContent?.synthesis_id;
  const confirmed = await client.callTool({ name: 'book-room', arguments: { ...args, synthesis_id: sid } });
  await client.close();
  console.log(JSON.stringify({ bad: pick(bad), preview: pick(preview), confirmed: pick(confirmed) }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.message ?? e) }));
}
