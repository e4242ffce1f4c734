#!/usr/bin/env python3
"""Benchmark of `stratumc mcp` through the official Python MCP SDK.

Usage: python3 mcp/bench/bench.py [path/to/stratumc] [--sizes 10,100,1000] [--starts 20]
       [--home-in DIR] [--client sdk|raw]   (env STRATUM_SYNC=normal: the store's faster durability)
(default binary: target/release/stratumc; build it with `cargo build --release -p stratumc`).

For each N it plans an N-step linear flow (each step after the previous one)
and reports every step with stratum_step_done, timing each round trip as the
client sees it (request written → result parsed), on the durable SQLite store
in a temporary STRATUM_HOME. Cold start is the time from spawning the process
to the `tools/list` answer (initialize + initialized + tools/list), p50 over
several starts. Prints one table; numbers are milliseconds. Not a test.
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]


def linear_spec(n):
    lines = ["version: 1", "contracts:", "  R: {value: string}", "flows:", "  entry: main",
             "  main:", "    input: {}", f'    output: {{from: "${{s{n - 1}.output}}", contract: R}}',
             "    steps:"]
    for i in range(n):
        lines.append(f"      - id: s{i}")
        if i:
            lines.append(f"        after: [s{i - 1}]")
        lines.append(f'        do: "step {i}"')
        lines.append("        out: R")
    return "\n".join(lines) + "\n"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def params(binary, home):
    return StdioServerParameters(command=str(binary), args=["mcp"],
                                 env=dict(os.environ, STRATUM_HOME=str(home)))


async def run_flow(binary, home, n):
    async with stdio_client(params(binary, home)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            t0 = time.perf_counter()
            res = await s.call_tool("stratum_plan", {"spec": linear_spec(n)})
            plan_ms = (time.perf_counter() - t0) * 1000
            env = res.structured_content
            times = []
            while env["status"] == "ready":
                e = env["ready"][0]
                t0 = time.perf_counter()
                res = await s.call_tool("stratum_step_done", {
                    "runId": env["runId"], "stepId": e["id"], "dispatchToken": e["dispatchToken"],
                    "result": {"value": e["id"]}})
                times.append((time.perf_counter() - t0) * 1000)
                assert not res.is_error, res.content[0].text
                env = res.structured_content
            assert env["status"] == "completed" and len(times) == n, env["status"]
            # the client + transport floor: a request refused before any engine work
            floor = []
            for _ in range(200):
                t0 = time.perf_counter()
                res = await s.call_tool("stratum_audit", {"runId": "x", "unknown": 1})
                floor.append((time.perf_counter() - t0) * 1000)
                assert res.is_error
            return plan_ms, times, floor


class RawClient:
    """A minimal MCP client: newline-delimited JSON-RPC over the server's
    stdio with blocking pipes (no SDK), to see the server's own latency."""

    def __init__(self, binary, home):
        self.p = subprocess.Popen([str(binary), "mcp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  env=dict(os.environ, STRATUM_HOME=str(home)))
        self.n = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def request(self, method, params):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    def call(self, tool, args):
        r = self.request("tools/call", {"name": tool, "arguments": args})
        return bool(r.get("isError")), r.get("structuredContent")

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def run_flow_raw(binary, home, n):
    c = RawClient(binary, home)
    try:
        t0 = time.perf_counter()
        _, env = c.call("stratum_plan", {"spec": linear_spec(n)})
        plan_ms = (time.perf_counter() - t0) * 1000
        times = []
        while env["status"] == "ready":
            e = env["ready"][0]
            t0 = time.perf_counter()
            is_error, env = c.call("stratum_step_done", {
                "runId": env["runId"], "stepId": e["id"], "dispatchToken": e["dispatchToken"],
                "result": {"value": e["id"]}})
            times.append((time.perf_counter() - t0) * 1000)
            assert not is_error, env
        assert env["status"] == "completed" and len(times) == n, env["status"]
        floor = []
        for _ in range(200):
            t0 = time.perf_counter()
            is_error, _ = c.call("stratum_audit", {"runId": "x", "unknown": 1})
            floor.append((time.perf_counter() - t0) * 1000)
            assert is_error
        return plan_ms, times, floor
    finally:
        c.close()


async def cold_start(binary, home):
    t0 = time.perf_counter()
    async with stdio_client(params(binary, home)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            ms = (time.perf_counter() - t0) * 1000
            assert "stratum_step_done" in {t.name for t in tools.tools}
    return ms


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=str(REPO / "target" / "release" / "stratumc"))
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--client", choices=["sdk", "raw"], default="sdk",
                    help="sdk: the official Python MCP SDK; raw: JSON lines over blocking pipes")
    ap.add_argument("--home-in", default=None,
                    help="directory for the temporary STRATUM_HOME (e.g. /dev/shm to leave out disk fsync)")
    a = ap.parse_args()
    binary = Path(a.binary).resolve()
    home = Path(tempfile.mkdtemp(prefix="stratum-mcp-bench-", dir=a.home_in))
    try:
        await cold_start(binary, home)  # creates the store; page cache warm
        starts = [await cold_start(binary, home) for _ in range(a.starts)]
        print(f"binary: {binary}  client: {a.client}  STRATUM_SYNC={os.environ.get('STRATUM_SYNC', 'full')}")
        print(f"cold start to tools/list: p50 {pct(starts, 50):.1f} ms, p95 {pct(starts, 95):.1f} ms "
              f"({a.starts} starts)")
        print(f"{'N':>6}  {'plan ms':>8}  {'step_done p50':>13}  {'p95':>7}  {'max':>7}  {'floor p50':>9}")
        for n in [int(x) for x in a.sizes.split(",")]:
            if a.client == "raw":
                plan_ms, times, floor = run_flow_raw(binary, home, n)
            else:
                plan_ms, times, floor = await run_flow(binary, home, n)
            print(f"{n:>6}  {plan_ms:>8.2f}  {pct(times, 50):>13.3f}  {pct(times, 95):>7.3f}  "
                  f"{max(times):>7.3f}  {pct(floor, 50):>9.3f}")
        print("floor: round trip of a request refused before any engine work (client + transport + rmcp)")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
