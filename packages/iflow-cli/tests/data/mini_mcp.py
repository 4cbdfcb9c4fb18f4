"""A stdio MCP server in the standard library only, for images without the MCP SDK: it
answers initialize, tools/list and tools/call for one tool, ``get_secret``."""

import json
import sys

TOOLS = [
    {
        "name": "get_secret",
        "description": "The secret word of this task.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": True},
    }
]


def answer(request):
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "mini", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "get_secret":
        return {"content": [{"type": "text", "text": "the secret is opal"}], "isError": False}
    return None


def main():
    for line in sys.stdin:
        serve(line)


def serve(line):
    if not line.strip():
        return
    request = json.loads(line)
    if "id" not in request:
        return  # a notification
    result = answer(request)
    reply = {"jsonrpc": "2.0", "id": request["id"]}
    if result is None:
        reply["error"] = {"code": -32601, "message": f"no method {request.get('method')}"}
    else:
        reply["result"] = result
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
