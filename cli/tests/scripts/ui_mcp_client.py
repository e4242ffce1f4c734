"""A small MCP client for the operator UI's browser test: drives one call
of `stratumc mcp` through the official Python SDK and prints its JSON
result, so the test can move a run from an MCP client while the page
watches.

usage: ui_mcp_client.py STRATUMC TOOL ARGS_JSON   (STRATUM_HOME from the environment)
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(binary, tool, args):
    # the SDK passes a bare environment unless told: STRATUM_HOME must reach the server
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(tool, args)
    text = result.content[0].text if result.content else ""
    return bool(result.is_error), text


failed, text = asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
if failed:
    sys.exit(f"{sys.argv[2]} failed: {text}")
print(text)
