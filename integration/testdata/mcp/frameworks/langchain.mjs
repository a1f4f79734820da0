// langchain.mjs: LangChain's MCP adapters (@langchain/mcp-adapters, with
// @langchain/core and @langchain/langgraph) against the MCP door, at their
// default settings. It prints one JSON line with, for each call, the
// ToolMessage content LangChain hands the model as the tool's result, or
// {"error": ...}.
//
// The path, as the packages' dist code has it:
//   - @langchain/mcp-adapters dist/client.js, MultiServerMCPClient: an
//     "http" connection's headers go on every Streamable HTTP request;
//     getTools() runs loadMcpTools (dist/tools.js) with the default
//     options: each MCP tool is a DynamicStructuredTool with responseFormat
//     "content_and_artifact" whose func is _callTool.
//   - dist/tools.js, _convertCallToolResult: one text block with
//     structuredContent or _meta becomes one object {type: "text", text,
//     structuredContent, meta}, which @langchain/core dist/tools/index.js
//     _formatToolOutput (neither a string nor an array of blocks)
//     JSON.stringifies into the ToolMessage content; an isError result is
//     thrown as a ToolException "MCP tool '<tool>' on server '<server>'
//     returned an error: <the text content>".
//   - @langchain/core dist/tools/index.js, StructuredTool.call: the
//     arguments are checked against the tool's JSON schema (the door's
//     inputSchema, additionalProperties false) before func runs; a
//     mismatch throws ToolInputParsingException "Received tool input did
//     not match expected schema" (no details: verboseParsingErrors is off
//     by default), so a call with an unknown argument never reaches the
//     gateway.
//   - @langchain/langgraph dist/prebuilt/tool_node.js, ToolNode.runTool
//     (what createReactAgent runs tools with; handleToolErrors defaults to
//     true): the tool's ToolMessage as is, or, for a thrown error, a
//     ToolMessage "Error: <message>\n Please fix your mistakes.".
// The script runs a ToolNode over an AIMessage carrying the tool call; the
// string is the ToolMessage's content (its text blocks joined when it is
// an array of content blocks). Calls: ok (g-1), bad (g-1 with colour, an
// unknown argument), missing (g-404, a call the gateway answers with an
// isError result, to show that path).
//
// usage: node langchain.mjs <.tools/node_modules> <MCP endpoint URL> <Agent-ID> <Authority-Scope>
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, endpoint, agentID, scope] = process.argv.slice(2);
const require = createRequire(path.join(nm, 'noop.js'));
const imp = async (name, file) => import(pathToFileURL(file ? path.join(nm, name, file) : require.resolve(name)).href);

const contentText = (c) => {
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((b) => (typeof b === 'string' ? b : b?.type === 'text' ? b.text : JSON.stringify(b))).join('\n');
  return JSON.stringify(c);
};

try {
  const { MultiServerMCPClient } = await imp('@langchain/mcp-adapters', 'dist/index.js');
  const { ToolNode } = await imp('@langchain/langgraph', 'dist/prebuilt/index.js');
  const { AIMessage } = await imp('@langchain/core', 'dist/messages/index.js');
  const client = new MultiServerMCPClient({
    mcpServers: { rcns: { transport: 'http', url: endpoint, headers: { 'Agent-ID': agentID, 'Authority-Scope': scope } } },
  });
  const tools = await client.getTools();
  const node = new ToolNode(tools);
  const run = async (args, id) => {
    const out = await node.invoke({
      messages: [new AIMessage({ content: '', tool_calls: [{ name: 'fetch_guest', args, id, type: 'tool_call' }] })],
    });
    const msg = out.messages[0];
    return { status: msg.status, text: contentText(msg.content) };
  };
  const ok = await run({ guest_id: 'g-1' }, 'call-1');
  const bad = await run({ guest_id: 'g-1', colour: 'red' }, 'call-2');
  const missing = await run({ guest_id: 'g-404' }, 'call-3');
  await client.close();
  console.log(JSON.stringify({ tools: tools.map((t) => t.name).sort(), ok: ok.text, bad: bad.text, missing: missing.text, ok_status: ok.status, bad_status: bad.status }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.stack ?? e) }));
}
