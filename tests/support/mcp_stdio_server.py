"""A small MCP server on standard input and output, behind the tests of MCP
servers started as a command (tests/mcp.rs). Each message it gets is
appended to the file named by its first argument, one line each:
`<pid> <method> <tool name, for tools/call>`.

Like many real servers it misbehaves a little: it prints a banner that is
not JSON, asks the client for a ping, and sends notifications before an
answer.
"""

import json
import os
import sys
import time

LOG = sys.argv[1]

TOOLS = [
    {
        "name": "lookupCustomer",
        "description": "Look a customer up by id.",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    },
    {
        "name": "environment",
        "description": "The names of the variables the server was started with.",
        "inputSchema": {"type": "object"},
    },
    {"name": "crash", "description": "Ends the server.", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "Never answers in time.", "inputSchema": {"type": "object"}},
    {"name": "deaf", "description": "Stops reading its input.", "inputSchema": {"type": "object"}},
    {
        "name": "offer",
        "description": "Adds the tool `tool` (a copy of lookupCustomer under that name) or, with"
        " `offered` false, takes a tool away, and says that the tools changed.",
        "inputSchema": {
            "type": "object",
            "properties": {"tool": {"type": "string"}, "offered": {"type": "boolean"}},
            "required": ["tool", "offered"],
        },
    },
]

LOOKUP = TOOLS[0]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def log(message):
    with open(LOG, "a") as file:
        tool = message.get("params", {}).get("name", "") if message.get("method") == "tools/call" else ""
        file.write(f"{os.getpid()} {message.get('method', 'answer')} {tool}".rstrip() + "\n")


def result(request, value):
    send({"jsonrpc": "2.0", "id": request["id"], "result": value})


def call(request):
    name = request["params"]["name"]
    arguments = request["params"].get("arguments", {})
    if name == "lookupCustomer":
        # Before the answer: a request of the server's own and notifications.
        send({"jsonrpc": "2.0", "id": "server-ping", "method": "ping"})
        log(json.loads(sys.stdin.readline()))
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "looking"}})
        region = os.environ.get("CRM_REGION")
        customer = {"id": arguments["id"], "name": "Li Lei", "region": region}
        result(request, {"content": [{"type": "text", "text": json.dumps(customer)}]})
    elif name == "environment":
        names = sorted(os.environ)
        result(request, {"content": [{"type": "text", "text": json.dumps(names)}]})
    elif name == "crash":
        sys.stderr.write("crash: giving up\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "offer":
        tool = arguments["tool"]
        TOOLS[:] = [listed for listed in TOOLS if listed["name"] != tool]
        if arguments["offered"]:
            TOOLS.append(dict(LOOKUP, name=tool))
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result(request, {"content": [{"type": "text", "text": "done"}]})
    elif name == "slow":
        time.sleep(3)
    elif name == "deaf":
        time.sleep(60)
    else:
        # A tool `offer` added.
        result(request, {"content": [{"type": "text", "text": json.dumps({"tool": name, **arguments})}]})


def main():
    print("crm MCP server starting", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        log(request)
        method = request.get("method")
        if method == "initialize":
            sys.stderr.write("crm: ready\n")
            sys.stderr.flush()
            protocol = request["params"]["protocolVersion"]
            result(request, {"protocolVersion": protocol, "capabilities": {"tools": {}},
                             "serverInfo": {"name": "crm", "version": "1.0.0"}})
        elif method == "tools/list":
            result(request, {"tools": TOOLS})
        elif method == "tools/call":
            call(request)


main()
