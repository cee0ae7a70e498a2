// An agent's MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk 1.x),
// for tests/tests/it/containment/mcp_sdk.rs: the same calls as client.py (initialize as
// `sdk-agent` 1.2, list the tools, `get_status`, `create_issue`, then `create_comment` on
// the number it answered), each bounded by 20 s, printing one JSON object of the same
// shape. It is configured by nothing of its own: inside `airlock run --network isolated`
// its connections are captured and NODE_EXTRA_CA_CERTS names airlock's CA; in env mode
// (tests/tests/it/adapters/mcp_sdk.rs) Node 24+ reads the run's HTTPS_PROXY because the
// run's environment sets NODE_USE_ENV_PROXY.
//
// usage: MCP_SDK_DIR=DIR node client.mjs URL [sse]   (DIR/node_modules holds the SDK)
//
// With `sse`, over the deprecated HTTP+SSE transport (URL is the GET stream); a call
// answered with a JSON-RPC error is printed as `{"error": {code, message, data}}`.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.MCP_SDK_DIR ?? process.cwd(), "x.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { SSEClientTransport } = require("@modelcontextprotocol/sdk/client/sse.js");
const { McpError } = require("@modelcontextprotocol/sdk/types.js");

// The bound's timer is unref'd: it must not keep the process alive once the calls end.
const bounded = (promise) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error("no answer in 20 s")), 20000).unref())]);
const textOf = (result) => result.content.map((part) => part.text ?? "").join("");

const legacy = process.argv[3] === "sse";
const transport = legacy
  ? new SSEClientTransport(new URL(process.argv[2]))
  : new StreamableHTTPClientTransport(new URL(process.argv[2]));
const call = async (name, args) => {
  try {
    const result = await bounded(client.callTool({ name, arguments: args }));
    return { text: textOf(result), isError: result.isError ?? false, structured: result.structuredContent ?? null };
  } catch (error) {
    if (error instanceof McpError) return { error: { code: error.code, message: error.message, data: error.data ?? null } };
    throw error;
  }
};
const client = new Client({ name: "sdk-agent", version: "1.2" });
await bounded(client.connect(transport));
const tools = await bounded(client.listTools());
const calls = {};
for (const [name, args] of [["get_status", {}], ["create_issue", { title: "flaky test" }]]) {
  calls[name] = await call(name, args);
}
const number = calls.create_issue.structured?.number;
if (number !== undefined) {
  calls.create_comment = await call("create_comment", { issue: number, body: "seen in CI" });
}
console.log(JSON.stringify({
  server: client.getServerVersion()?.name,
  session: transport.sessionId ?? null,
  tools: tools.tools.map((t) => t.name),
  calls,
}));
await client.close();
