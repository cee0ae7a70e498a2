// An MCP server on the official TypeScript SDK (@modelcontextprotocol/sdk 1.x: McpServer
// over StreamableHTTPServerTransport, one transport and server per session), over TLS on
// 127.0.0.1, for tests/tests/it/adapters/mcp_sdk.rs: the same tools as server.py
// (`get_status`, `create_issue(title)` answering `{number: 7, title}`, `create_comment(issue,
// body)` answering `{id: 70, issue}`, each with an output schema) and the same call log,
// one JSON line `{tool, arguments, session, client}` per call.
//
// usage: MCP_SDK_DIR=DIR node server.mjs PORT CERT.pem KEY.pem LOG.jsonl
import { randomUUID } from "node:crypto";
import fs from "node:fs";
import https from "node:https";
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.MCP_SDK_DIR ?? process.cwd(), "x.js"));
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { isInitializeRequest } = require("@modelcontextprotocol/sdk/types.js");
const { z } = require("zod");

const [port, cert, key, log] = process.argv.slice(2);

function newServer() {
  const server = new McpServer({ name: "issues", version: "1.0.0" });
  const record = (tool, args, extra) => {
    const client = server.server.getClientVersion()?.name ?? null;
    fs.appendFileSync(log, JSON.stringify({ tool, arguments: args, session: extra.sessionId ?? null, client }) + "\n");
  };
  server.registerTool("get_status", { description: "Reports the tracker's status.", outputSchema: { result: z.string() } },
    async (extra) => {
      record("get_status", {}, extra);
      return { content: [{ type: "text", text: "all green" }], structuredContent: { result: "all green" } };
    });
  server.registerTool("create_issue", {
    description: "Opens an issue.",
    inputSchema: { title: z.string() },
    outputSchema: { number: z.number().int(), title: z.string() },
  }, async ({ title }, extra) => {
    record("create_issue", { title }, extra);
    const issue = { number: 7, title };
    return { content: [{ type: "text", text: JSON.stringify(issue) }], structuredContent: issue };
  });
  server.registerTool("create_comment", {
    description: "Comments on an issue (by the number create_issue answered).",
    inputSchema: { issue: z.number().int(), body: z.string() },
    outputSchema: { id: z.number().int(), issue: z.number().int() },
  }, async ({ issue, body }, extra) => {
    record("create_comment", { issue, body }, extra);
    const comment = { id: 70, issue };
    return { content: [{ type: "text", text: JSON.stringify(comment) }], structuredContent: comment };
  });
  return server;
}

const transports = new Map();

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : undefined;
}

https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, async (req, res) => {
  try {
    if (new URL(req.url, "https://x").pathname !== "/mcp") {
      res.writeHead(404).end();
      return;
    }
    const session = req.headers["mcp-session-id"];
    const body = req.method === "POST" ? await readJson(req) : undefined;
    let transport = session ? transports.get(session) : undefined;
    if (!transport) {
      if (session || req.method !== "POST" || !isInitializeRequest(body)) {
        res.writeHead(404, { "content-type": "application/json" })
          .end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => transports.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  } catch (error) {
    console.error(error);
    if (!res.headersSent) res.writeHead(500).end();
  }
}).listen(Number(port), "127.0.0.1");
