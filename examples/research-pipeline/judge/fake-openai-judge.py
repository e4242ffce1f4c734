#!/usr/bin/env python3
"""A loopback fake judge speaking the OpenAI chat completions API.

    fake-openai-judge.py [PORT] [--port-file FILE] [--log FILE] [--fail N]
                         [--weak-marker TEXT] [--low S] [--high S]

Serves `POST /v1/chat/completions` (and `GET /v1/models`) on 127.0.0.1:PORT
(PORT 0, the default, picks a free port). Once listening it prints the port
on the first line of stdout and writes it to --port-file (atomically).
SIGTERM or SIGINT stops it (exit 0). Standard library only.

It decides FROM THE CONTENT it is sent, deterministically:

- a scored request (a rubric; the system prompt asks for a "score") is
  answered with the message content {"score": S, "reasons": [...]}: S = --low
  (0.3) when any message contains the weak marker (--weak-marker, default
  "[weak]", which the scripted research agent writes into draft notes), else
  --high (0.9);
- a statement-form request (v1 `judged: {statement, stakes}`: the system
  prompt asks for "holds", the user message has a "Statement: " line) is
  answered {"holds": H, "reason": "..."}, H false when the weak marker is
  there, as examples/agents/fake-judge.py does.

--fail N answers the first N requests with HTTP 500 (judge errors, which are
not verdicts). --log FILE appends one JSON line per request: {n, status,
form, model, weak, score | holds, chars}.

Point the example at it with `[judges.local] url = "http://127.0.0.1:PORT/v1"`.
"""
import argparse
import json
import os
import re
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("port", type=int, nargs="?", default=0)
parser.add_argument("--port-file")
parser.add_argument("--log")
parser.add_argument("--fail", type=int, default=0, metavar="N",
                    help="answer the first N requests with HTTP 500")
parser.add_argument("--weak-marker", default="[weak]")
parser.add_argument("--low", type=float, default=0.3, help="score of a weak request")
parser.add_argument("--high", type=float, default=0.9, help="score of any other request")
args = parser.parse_args()

lock = threading.Lock()
state = {"seen": 0}


def texts(body):
    """(system text, user text) of a chat request; both '' when absent."""
    system, user = [], []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):  # [{type: text, text: ...}, ...]
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            continue
        (system if m.get("role") == "system" else user).append(content)
    return "\n".join(system), "\n".join(user)


def form_of(system, user):
    """'holds' for the v1 statement form, else 'score'."""
    if '"holds"' in system:
        return "holds"
    if re.search(r"\bscore\b", system, re.IGNORECASE):
        return "score"
    if re.search(r"(?m)^Statement: ", user) and not re.search(r"(?im)^\s*rubric\b", user):
        return "holds"
    return "score"


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
            self.send_json(200, {"object": "list",
                                 "data": [{"id": "fake-judge", "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self.send_json(404, {"error": {"message": "not found"}})
            return
        try:
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self.send_json(400, {"error": {"message": "the body is not a JSON object"}})
            return
        system, user = texts(body)
        form = form_of(system, user)
        weak = args.weak_marker in system or args.weak_marker in user
        with lock:
            state["seen"] += 1
            n = state["seen"]
        failing = n <= args.fail
        rec = {"n": n, "status": 500 if failing else 200, "form": form,
               "model": body.get("model"), "weak": weak, "chars": len(system) + len(user)}
        if failing:
            verdict = None
        elif form == "holds":
            holds = not weak
            rec["holds"] = holds
            verdict = {"holds": holds,
                       "reason": ("the context is marked %s: it does not show that the "
                                  "statement holds" % args.weak_marker) if weak else
                                 "the context shows the statement holds"}
        else:
            score = args.low if weak else args.high
            rec["score"] = score
            verdict = {"score": score,
                       "reasons": (["the inputs are marked %s: a draft that does not yet "
                                    "meet the rubric" % args.weak_marker,
                                    "the research questions are not answered one by one"]
                                   if weak else
                                   ["the inputs meet the rubric",
                                    "every claim is backed by the inputs"])}
        if args.log:
            with lock, open(args.log, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if failing:
            self.send_json(500, {"error": {"message": "fake judge error %d of %d (--fail)"
                                           % (n, args.fail)}})
            return
        self.send_json(200, {
            "id": "chatcmpl-fake-%d" % n,
            "object": "chat.completion",
            "model": "fake-judge",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps(verdict)}}],
            "usage": {"prompt_tokens": rec["chars"] // 4, "completion_tokens": 30,
                      "total_tokens": rec["chars"] // 4 + 30},
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
