"""An agent's MCP client on the official Python SDK (`mcp` 1.x), for
tests/tests/it/adapters/mcp_sdk.rs. It is configured only by the environment airlock
gives a run (HTTPS_PROXY, SSL_CERT_FILE…, which httpx reads).

usage: client.py URL [sse] [--title-from=READ_URL]

With `sse`, over the deprecated HTTP+SSE transport (URL is the `GET` stream); a call
answered with a JSON-RPC error is printed as `{"error": {code, message, data}}`. With
`--title-from`, the agent first GETs READ_URL (through the same proxy) and files its
answer as the issue's title, as an agent pasting what it read into a tool call does.

Initializes as `sdk-agent` 1.2, lists the tools, calls `get_status` (a read),
`create_issue` (a write) and `create_comment` on the number it answered, each bounded by 20 s so a hang is an error, and prints one JSON
object: the session id, the tool names, and each call's text, structured content and
isError.
"""

import asyncio
import json
import sys

import httpx

from contextlib import asynccontextmanager

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError
from mcp.types import Implementation


def text_of(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@asynccontextmanager
async def transport(url: str, legacy: bool):
    if legacy:
        async with sse_client(url) as (read, write):
            yield read, write, lambda: None
    else:
        async with streamablehttp_client(url) as streams:
            yield streams


async def call(session: ClientSession, name: str, arguments: dict) -> dict:
    try:
        result = await asyncio.wait_for(session.call_tool(name, arguments), 20)
    except McpError as error:
        return {"error": {"code": error.error.code, "message": error.error.message,
                          "data": error.error.data}}
    return {"text": text_of(result), "isError": result.isError,
            "structured": result.structuredContent}


async def main(url: str, legacy: bool, title_from: str | None) -> None:
    title = "flaky test"
    if title_from is not None:
        async with httpx.AsyncClient() as http:
            title = (await http.get(title_from, timeout=20)).text
    async with transport(url, legacy) as (read, write, session_id):
        info = Implementation(name="sdk-agent", version="1.2")
        async with ClientSession(read, write, client_info=info) as session:
            init = await asyncio.wait_for(session.initialize(), 20)
            tools = await asyncio.wait_for(session.list_tools(), 20)
            calls = {}
            for name, arguments in (("get_status", {}), ("create_issue", {"title": title})):
                calls[name] = await call(session, name, arguments)
            # The number as the answer gave it (a placeholder while staged), used
            # by the next call, as an agent does.
            number = (calls["create_issue"].get("structured") or {}).get("number")
            if number is not None:
                calls["create_comment"] = await call(
                    session, "create_comment", {"issue": number, "body": "seen in CI"})
            print(json.dumps({"server": init.serverInfo.name, "session": session_id(),
                              "tools": [t.name for t in tools.tools], "calls": calls}))


options = sys.argv[2:]
title_from = next((o.split("=", 1)[1] for o in options if o.startswith("--title-from=")), None)
asyncio.run(main(sys.argv[1], "sse" in options, title_from))
