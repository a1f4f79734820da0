// ai-sdk.mjs: the Vercel AI SDK (@ai-sdk/mcp with ai) against the MCP
// door, at its default settings. It prints one JSON line with, for each
// call, the string the AI SDK hands the model as the tool's result, or
// {"error": ...}.
//
// The path, as the packages' dist code has it:
//   - @ai-sdk/mcp dist/index.js, DefaultMCPClient.toolsFromDefinitions
//     (schemas "automatic"): each MCP tool becomes a dynamicTool whose
//     execute returns the CallToolResult as is (an isError result too, it
//     is not thrown) and whose toModelOutput is mcpToModelOutput, which
//     turns result.content into {type: "content", value: [{type: "text",
//     text}]}.
//   - ai dist/index.js, createToolModelOutput: with the tool's
//     toModelOutput it uses it; the result becomes the tool-result part of
//     the tool message that the next step's prompt carries to the model.
// The script runs generateText (two steps) with the ai/test mock model:
// step 1 returns the tool call, step 2 records its prompt; the string is
// the text parts of the tool-result output the model receives in step 2
// joined, as a provider sends them.
//
// The tool's inputSchema is jsonSchema(...) without a validator, so the
// SDK does not itself reject an unknown argument: the bad call reaches the
// gateway, and its isError result goes to the model like any other.
// Runs under Node 20 though both packages declare engines node >= 22.
//
// usage: bun ai-sdk.mjs <.tools/node_modules> <MCP endpoint URL> <Agent-ID> <Authority-Scope>
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [nm, endpoint, agentID, scope] = process.argv.slice(2);
const imp = (p) => import(pathToFileURL(path.join(nm, p)).href);

const modelText = (output) => {
  if (output == null) return '';
  switch (output.type) {
    case 'text':
    case 'error-text':
      return output.value;
    case 'json':
    case 'error-json':
      return JSON.stringify(output.value);
    case 'content':
      return output.value.map((p) => (p.type === 'text' ? p.text : JSON.stringify(p))).join('\n');
    default:
      return JSON.stringify(output);
  }
};

try {
  const { createMCPClient } = await imp('@ai-sdk/mcp/dist/index.js');
  const { generateText, isStepCount } = await imp('ai/dist/index.js');
  const { MockLanguageModelV4 } = await imp('ai/dist/test/index.js');
  const client = await createMCPClient({
    transport: { type: 'http', url: endpoint, headers: { 'Agent-ID': agentID, 'Authority-Scope': scope } },
  });
  const tools = await client.tools();
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  // run has the mock model call fetch_guest with args, and returns the
  // tool-result output of the prompt of its second step.
  const run = async (args) => {
    let seen;
    const model = new MockLanguageModelV4({
      doGenerate: async (opts) => {
        if (seen === undefined && !opts.prompt.some((m) => m.role === 'tool')) {
          return {
            content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'fetch_guest', input: JSON.stringify(args) }],
            finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
            usage,
            warnings: [],
          };
        }
        seen = opts.prompt;
        return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
      },
    });
    await generateText({ model, tools, prompt: 'Fetch guest g-1.', stopWhen: isStepCount(2) });
    const part = (seen ?? []).filter((m) => m.role === 'tool').flatMap((m) => m.content).find((p) => p.type === 'tool-result');
    return { output: part?.output, text: modelText(part?.output) };
  };
  const ok = await run({ guest_id: 'g-1' });
  const bad = await run({ guest_id: 'g-1', colour: 'red' });
  await client.close();
  console.log(JSON.stringify({
    tools: Object.keys(tools).sort(),
    ok: ok.text,
    bad: bad.text,
    ok_output_type: ok.output?.type,
    bad_output_type: bad.output?.type,
  }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e?.stack ?? e) }));
}
