// openai-agents.mjs: the OpenAI Agents SDK (@openai/agents) against the
// MCP door, at its default settings. It prints one JSON line with, for
// each call, the string the Agents SDK hands the model as the tool's
// result, or {"error": ...}.
//
// The path, as the packages' dist code has it (@openai/agents-core):
//   - dist/shims/mcp-server/node.mjs, MCPServerStreamableHttp: requestInit
//     goes to the MCP client's Streamable HTTP transport; callTool returns
//     the CallToolResult's content (an isError result is not thrown).
//   - dist/mcp.mjs, mcpToFunctionTool's invoke: useStructuredContent is
//     off by default, so the tool output is content[0] when there is one
//     content item; a thrown error (a JSON-RPC error such as -32602) goes
//     to defaultToolErrorFunction (dist/tool.mjs), "An error occurred while
//     running the tool. Please try again.".
//   - dist/runner/toolExecution.mjs, getToolCallOutputItem, with
//     dist/runner/toolOutputNormalization.mjs: a {type: "text"} output
//     becomes the function_call_result item's [{type: "input_text", text}]
//     (anything else toSmartString), which the next model request carries.
// The script runs the agent (run) with a stand-in Model: its first
// response is the function call, its second records the request input;
// the string is the text of the function_call_result output there.
// Tracing is disabled (it would only try to export spans to OpenAI).
//
// usage: node openai-agents.mjs <.tools/node_modules> <MCP endpoint URL> <Agent-ID> <Authority-Scope>
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, endpoint, agentID, scope] = process.argv.slice(2);
const require = createRequire(path.join(nm, 'noop.js'));
const imp = (name) => import(pathToFileURL(require.resolve(name)).href);

const outputText = (out) => {
  if (typeof out === 'string') return out;
  if (Array.isArray(out)) return out.map(outputText).join('\n');
  if (out && typeof out === 'object' && typeof out.text === 'string') return out.text;
  return JSON.stringify(out);
};

try {
  const { Agent, Runner, MCPServerStreamableHttp, Usage, setTracingDisabled } = await imp('@openai/agents');
  setTracingDisabled(true);
  const server = new MCPServerStreamableHttp({
    url: endpoint,
    name: 'rcns',
    requestInit: { headers: { 'Agent-ID': agentID, 'Authority-Scope': scope } },
  });
  await server.connect();
  const tools = (await server.listTools()).map((t) => t.name).sort();
  const run = async (args) => {
    let seen;
    const model = {
      async getResponse(req) {
        const input = Array.isArray(req.input) ? req.input : [];
        const result = input.find((i) => i.type === 'function_call_result');
        if (!result) {
          return {
            usage: new Usage(),
            output: [{ type: 'function_call', callId: 'call-1', name: 'fetch_guest', arguments: JSON.stringify(args), status: 'completed' }],
            responseId: 'r-1',
          };
        }
        seen = result;
        return {
          usage: new Usage(),
          output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'done' }] }],
          responseId: 'r-2',
        };
      },
      async *getStreamedResponse() {
        throw new Error('not streamed');
      },
    };
    const agent = new Agent({ name: 'concierge', instructions: 'Use the tools.', model, mcpServers: [server] });
    await new Runner().run(agent, 'Fetch guest g-1.');
    return { output: seen?.output, text: outputText(seen?.output) };
  };
  const ok = await run({ guest_id: 'g-1' });
  const bad = await run({ guest_id: 'g-1', colour: 'red' });
  await server.close();
  console.log(JSON.stringify({ tools, ok: ok.text, bad: bad.text, ok_output: ok.output?.[0]?.type ?? ok.output?.type }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.stack ?? e) }));
}
