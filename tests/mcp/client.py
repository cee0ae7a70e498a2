"""An agent's MCP client on the official Python SDK (`mcp` 1.x), for
tests/tests/it/adapters/mcp_sdk.rs. It is configured only by the environment airlock
gives a run (HTTPS_PROXY, SSL_CERT_FILE…, which httpx reads).

usage: client.py URL

Initializes as `sdk-agent` 1.2, lists the tools, calls `get_status` (a read),
`create_issue` (a write) and `create_comment` on the number it answered, each bounded by 20 s so a hang is an error, and prints one JSON
object: the session id, the tool names, and each call's text, structured content and
isError.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import Implementation


def text_of(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def main(url: str) -> None:
    async with streamablehttp_client(url) as (read, write, session_id):
        info = Implementation(name="sdk-agent", version="1.2")
        async with ClientSession(read, write, client_info=info) as session:
            init = await asyncio.wait_for(session.initialize(), 20)
            tools = await asyncio.wait_for(session.list_tools(), 20)
            calls = {}
            for name, arguments in (("get_status", {}), ("create_issue", {"title": "flaky test"})):
                result = await asyncio.wait_for(session.call_tool(name, arguments), 20)
                calls[name] = {"text": text_of(result), "isError": result.isError,
                               "structured": result.structuredContent}
            # The number as the answer gave it (a placeholder while staged), used
            # by the next call, as an agent does.
            number = (calls["create_issue"]["structured"] or {}).get("number")
            if number is not None:
                result = await asyncio.wait_for(session.call_tool(
                    "create_comment", {"issue": number, "body": "seen in CI"}), 20)
                calls["create_comment"] = {"text": text_of(result), "isError": result.isError,
                                           "structured": result.structuredContent}
            print(json.dumps({"server": init.serverInfo.name, "session": session_id(),
                              "tools": [t.name for t in tools.tools], "calls": calls}))


asyncio.run(main(sys.argv[1]))
