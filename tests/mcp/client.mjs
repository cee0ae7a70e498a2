// An agent's MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk 1.x),
// for tests/tests/it/containment/mcp_sdk.rs: the same calls as client.py (initialize as
// `sdk-agent` 1.2, list the tools, `get_status`, `create_issue`, then `create_comment` on
// the number it answered), each bounded by 20 s, printing one JSON object of the same
// shape. It is configured by nothing: inside `airlock run --network isolated` its
// connections are captured and NODE_EXTRA_CA_CERTS names airlock's CA.
//
// usage: NODE_PATH=DIR/node_modules node client.mjs URL   (DIR holds the SDK)
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.MCP_SDK_DIR ?? process.cwd(), "x.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const bounded = (promise) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("no answer in 20 s")), 20000))]);
const textOf = (result) => result.content.map((part) => part.text ?? "").join("");

const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
const client = new Client({ name: "sdk-agent", version: "1.2" });
await bounded(client.connect(transport));
const tools = await bounded(client.listTools());
const calls = {};
for (const [name, args] of [["get_status", {}], ["create_issue", { title: "flaky test" }]]) {
  const result = await bounded(client.callTool({ name, arguments: args }));
  calls[name] = { text: textOf(result), isError: result.isError ?? false, structured: result.structuredContent ?? null };
}
const number = calls.create_issue.structured?.number;
if (number !== undefined) {
  const result = await bounded(client.callTool({ name: "create_comment", arguments: { issue: number, body: "seen in CI" } }));
  calls.create_comment = { text: textOf(result), isError: result.isError ?? false, structured: result.structuredContent ?? null };
}
console.log(JSON.stringify({
  server: client.getServerVersion()?.name,
  session: transport.sessionId,
  tools: tools.tools.map((t) => t.name),
  calls,
}));
await client.close();
