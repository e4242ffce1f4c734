#!/usr/bin/env python3
"""A fake OpenAI-compatible judge for the examples' `judged` ensures.

    fake-judge.py PORT [--port-file FILE] [--log FILE] [--reject N]

Serves on 127.0.0.1:PORT (PORT 0 picks a free port). Every
`POST /v1/chat/completions` is answered with a verdict that holds:

    {"choices":[{"message":{"content":"{\"holds\": true, \"reason\": \"...\"}"}}],
     "usage":{"total_tokens":42},"model":"fake"}

Once listening it prints the port on the first line of stdout (and writes it
to --port-file, if given, atomically). --log appends one JSON line per request
(the statement and stakes it was asked about). --reject N answers the first N
requests with a verdict that does not hold. Stops on SIGTERM or SIGINT.
Standard library only.
"""
import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("--port-file")
parser.add_argument("--log")
parser.add_argument("--reject", type=int, default=0)
args = parser.parse_args()

lock = threading.Lock()
state = {"seen": 0}


def statement_of(body):
    """The statement and stakes from the user message (as vm/src/host.rs writes it)."""
    try:
        user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
    except (KeyError, StopIteration, TypeError):
        return None, None
    statement = stakes = None
    for line in user.splitlines():
        if line.startswith("Statement: ") and statement is None:
            statement = line[len("Statement: "):]
        elif line.startswith("Stakes: ") and stakes is None:
            stakes = line[len("Stakes: "):]
    return statement, stakes


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):  # keep stderr quiet
        pass

    def send_json(self, code, doc):
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") == "/v1/models":
            self.send_json(200, {"data": [{"id": "fake", "object": "model"}]})
        else:
            self.send_json(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self.send_json(404, {"error": "not found"})
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self.send_json(400, {"error": "body is not JSON"})
            return
        statement, stakes = statement_of(body)
        with lock:
            state["seen"] += 1
            holds = state["seen"] > args.reject
            if args.log:
                with open(args.log, "a") as f:
                    f.write(json.dumps({"n": state["seen"], "model": body.get("model"),
                                        "statement": statement, "stakes": stakes,
                                        "holds": holds}) + "\n")
        reason = ("the context shows the statement holds" if holds
                  else "the context does not show the statement holds")
        verdict = json.dumps({"holds": holds, "reason": reason})
        self.send_json(200, {
            "choices": [{"message": {"role": "assistant", "content": verdict}}],
            "usage": {"total_tokens": 42},
            "model": "fake",
        })


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
port = server.server_address[1]
if args.port_file:
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.replace(tmp, args.port_file)
print(port, flush=True)


def stop(*_):
    threading.Thread(target=server.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
server.serve_forever()
server.server_close()
sys.exit(0)
