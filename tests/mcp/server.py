"""An MCP server on the official Python SDK (`mcp` 1.x, FastMCP), over streamable HTTP
and TLS on 127.0.0.1, for tests/tests/it/adapters/mcp_sdk.rs; with `sse`, over the
deprecated HTTP+SSE transport instead (`GET /sse`, messages to `/messages/`), for
tests/tests/it/adapters/mcp_legacy.rs.

usage: server.py PORT CERT.pem KEY.pem LOG.jsonl [sse]

Tools: `get_status` (a read), `create_issue(title)` (a write, answers
`{"number": 7, "title": …}`) and `create_comment(issue, body)` (a write on that number);
each has an `outputSchema`, as every typed FastMCP tool. Every call is appended to LOG as one JSON line
`{"tool", "arguments", "session", "client"}`: what the origin received, in which MCP
session and from which client (`clientInfo.name` of the session's `initialize`).
"""

import json
import sys
from typing import TypedDict

import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.transport_security import TransportSecuritySettings

port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
# The SDK's DNS-rebinding check (421 for another Host) stays on, allowing the name the
# fenced client uses too (airlock's tests resolve origin.test to 127.0.0.1).
hosts = [f"{name}:*" for name in ("127.0.0.1", "localhost", "origin.test")]
server = FastMCP("issues", transport_security=TransportSecuritySettings(
    enable_dns_rebinding_protection=True, allowed_hosts=hosts,
    allowed_origins=[f"https://{h}" for h in hosts]))


def record(tool: str, ctx: Context, arguments: dict) -> None:
    request = ctx.request_context.request
    session = request.headers.get("mcp-session-id") if request is not None else None
    params = ctx.session.client_params
    client = params.clientInfo.name if params is not None else None
    with open(log, "a", encoding="utf-8") as out:
        out.write(json.dumps({"tool": tool, "arguments": arguments,
                              "session": session, "client": client}) + "\n")


@server.tool()
def get_status(ctx: Context) -> str:
    """Reports the tracker's status."""
    record("get_status", ctx, {})
    return "all green"


class Issue(TypedDict):
    """What `create_issue` answers: its `outputSchema` (FastMCP derives it) makes clients
    require `structuredContent` of this shape."""
    number: int
    title: str


@server.tool()
def create_issue(title: str, ctx: Context) -> Issue:
    """Opens an issue."""
    record("create_issue", ctx, {"title": title})
    return {"number": 7, "title": title}


class Comment(TypedDict):
    id: int
    issue: int


@server.tool()
def create_comment(issue: int, body: str, ctx: Context) -> Comment:
    """Comments on an issue (by the number `create_issue` answered)."""
    record("create_comment", ctx, {"issue": issue, "body": body})
    return {"id": 70, "issue": issue}


legacy = len(sys.argv) > 5 and sys.argv[5] == "sse"
uvicorn.run(server.sse_app() if legacy else server.streamable_http_app(), host="127.0.0.1", port=port,
            ssl_certfile=cert, ssl_keyfile=key, log_level="warning")
