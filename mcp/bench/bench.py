#!/usr/bin/env python3
"""Benchmark of `stratumc mcp` through the official Python MCP SDK.

Usage: python3 mcp/bench/bench.py [path/to/stratumc] [--sizes 10,100,1000] [--starts 20]
       [--samples 1000] [--home-in DIR] [--client sdk|raw] [--uvloop]
       (env STRATUM_SYNC=normal: the store's faster durability)
(default binary: target/release/stratumc; build it with `cargo build --release -p stratumc`).

For each N it plans N-step linear flows (each step after the previous one)
and reports every step with stratum_step_done, timing each round trip as the
client sees it (request written -> result parsed), on the durable SQLite store
in a temporary STRATUM_HOME. Small N repeat the flow (new runs on the same
server) until at least --samples round trips are timed, so every p50/p95 rests
on enough calls. Cold start is the time from spawning the process to the
`tools/list` answer (initialize + initialized + tools/list), p50 over several
starts. The floor is a request refused before any engine work (client, pipes,
rmcp, argument check). On Linux the CPU time per call of the client (this
process) and of the server (from /proc) is shown too: the round trip minus
both is time spent waiting (scheduling, disk flush). Prints one table;
numbers are milliseconds. Not a test.

--uvloop runs the SDK client on uvloop (`pip install uvloop`) through anyio's
asyncio backend option: a client configuration, reported as its own row.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
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


def server_pid(parent=None):
    """The pid of our `stratumc` child (Linux /proc), or None."""
    parent = parent or os.getpid()
    try:
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        comm, rest = f.read().split(" (", 1)[1].rsplit(") ", 1)
                except (OSError, ValueError, IndexError):
                    continue
                if comm.startswith("stratumc") and int(rest.split()[1]) == parent:
                    return int(d)
    except OSError:
        pass
    return None


def cpu_s(pid):
    """CPU seconds (user + system) of process `pid` so far, or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class CpuMeter:
    """Client and server CPU time summed over the stretches between start()
    and stop() (the timed calls only, not the plans between them)."""

    def __init__(self, pid):
        self.pid, self.client, self.server = pid, 0.0, 0.0

    def start(self):
        self.c0, self.s0 = time.process_time(), cpu_s(self.pid)

    def stop(self):
        self.client += time.process_time() - self.c0
        s1 = cpu_s(self.pid)
        self.server = None if s1 is None or self.s0 is None or self.server is None \
            else self.server + s1 - self.s0

    def per_call(self, calls):
        """Mean client and server CPU milliseconds per call (server None off Linux)."""
        return (self.client / calls * 1000,
                None if self.server is None else self.server / calls * 1000)


def params(binary, home):
    return StdioServerParameters(command=str(binary), args=["mcp"],
                                 env=dict(os.environ, STRATUM_HOME=str(home)))


def flows_for(n, samples):
    return max(1, math.ceil(samples / n))


async def run_flow(binary, home, n, samples):
    async with stdio_client(params(binary, home)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            pid = server_pid()
            times, plan_ms = [], None
            meter = CpuMeter(pid)
            for _ in range(flows_for(n, samples)):
                t0 = time.perf_counter()
                res = await s.call_tool("stratum_plan", {"spec": linear_spec(n)})
                plan_ms = plan_ms or (time.perf_counter() - t0) * 1000
                env = res.structured_content
                steps = 0
                meter.start()
                while env["status"] == "ready":
                    e = env["ready"][0]
                    t0 = time.perf_counter()
                    res = await s.call_tool("stratum_step_done", {
                        "runId": env["runId"], "stepId": e["id"], "dispatchToken": e["dispatchToken"],
                        "result": {"value": e["id"]}})
                    times.append((time.perf_counter() - t0) * 1000)
                    steps += 1
                    assert not res.is_error, res.content[0].text
                    env = res.structured_content
                meter.stop()
                assert env["status"] == "completed" and steps == n, env["status"]
            cpu = meter.per_call(len(times))
            # the client + transport floor: a request refused before any engine work
            floor = []
            meter = CpuMeter(pid)
            meter.start()
            for _ in range(samples):
                t0 = time.perf_counter()
                res = await s.call_tool("stratum_audit", {"runId": "x", "unknown": 1})
                floor.append((time.perf_counter() - t0) * 1000)
                assert res.is_error
            meter.stop()
            return plan_ms, times, floor, cpu, meter.per_call(samples)


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


def run_flow_raw(binary, home, n, samples):
    c = RawClient(binary, home)
    try:
        times, plan_ms = [], None
        meter = CpuMeter(c.p.pid)
        for _ in range(flows_for(n, samples)):
            t0 = time.perf_counter()
            _, env = c.call("stratum_plan", {"spec": linear_spec(n)})
            plan_ms = plan_ms or (time.perf_counter() - t0) * 1000
            steps = 0
            meter.start()
            while env["status"] == "ready":
                e = env["ready"][0]
                t0 = time.perf_counter()
                is_error, env = c.call("stratum_step_done", {
                    "runId": env["runId"], "stepId": e["id"], "dispatchToken": e["dispatchToken"],
                    "result": {"value": e["id"]}})
                times.append((time.perf_counter() - t0) * 1000)
                steps += 1
                assert not is_error, env
            meter.stop()
            assert env["status"] == "completed" and steps == n, env["status"]
        cpu = meter.per_call(len(times))
        floor = []
        meter = CpuMeter(c.p.pid)
        meter.start()
        for _ in range(samples):
            t0 = time.perf_counter()
            is_error, _ = c.call("stratum_audit", {"runId": "x", "unknown": 1})
            floor.append((time.perf_counter() - t0) * 1000)
            assert is_error
        meter.stop()
        return plan_ms, times, floor, cpu, meter.per_call(samples)
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


def ms(v):
    return "-" if v is None else f"{v:.3f}"


async def main(a):
    binary = Path(a.binary).resolve()
    home = Path(tempfile.mkdtemp(prefix="stratum-mcp-bench-", dir=a.home_in))
    try:
        await cold_start(binary, home)  # creates the store; page cache warm
        starts = [await cold_start(binary, home) for _ in range(a.starts)]
        client = a.client + ("+uvloop" if a.uvloop else "")
        print(f"binary: {binary}  client: {client} (Python {sys.version.split()[0]})  "
              f"STRATUM_SYNC={os.environ.get('STRATUM_SYNC', 'full')}  store: {home}")
        print(f"cold start to tools/list: p50 {pct(starts, 50):.1f} ms, p95 {pct(starts, 95):.1f} ms "
              f"({a.starts} starts)")
        print(f"{'N':>6}  {'calls':>5}  {'plan ms':>8}  {'step_done p50':>13}  {'p95':>7}  {'max':>7}  "
              f"{'cpu client':>10}  {'server':>7}  {'floor p50':>9}  {'cpu client':>10}  {'server':>7}")
        for n in [int(x) for x in a.sizes.split(",")]:
            if a.client == "raw":
                plan_ms, times, floor, cpu, fcpu = run_flow_raw(binary, home, n, a.samples)
            else:
                plan_ms, times, floor, cpu, fcpu = await run_flow(binary, home, n, a.samples)
            print(f"{n:>6}  {len(times):>5}  {plan_ms:>8.2f}  {pct(times, 50):>13.3f}  {pct(times, 95):>7.3f}  "
                  f"{max(times):>7.3f}  {ms(cpu[0]):>10}  {ms(cpu[1]):>7}  {pct(floor, 50):>9.3f}  "
                  f"{ms(fcpu[0]):>10}  {ms(fcpu[1]):>7}")
        print("calls: timed step_done round trips (N-step flows repeated until --samples);")
        print("floor: round trip of a request refused before any engine work (client + transport + rmcp);")
        print("cpu: mean CPU time per call of the client process and of the server process")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=str(REPO / "target" / "release" / "stratumc"))
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--samples", type=int, default=1000,
                    help="least number of timed step_done calls per N (small N repeat the flow)")
    ap.add_argument("--client", choices=["sdk", "raw"], default="sdk",
                    help="sdk: the official Python MCP SDK; raw: JSON lines over blocking pipes")
    ap.add_argument("--uvloop", action="store_true",
                    help="run the client's event loop on uvloop (pip install uvloop)")
    ap.add_argument("--home-in", default=None,
                    help="directory for the temporary STRATUM_HOME (e.g. /dev/shm to leave out disk fsync)")
    args = ap.parse_args()
    if args.uvloop and args.client == "raw":
        ap.error("--uvloop applies to the SDK client only (the raw client has no event loop)")
    sys.exit(anyio.run(main, args, backend="asyncio", backend_options={"use_uvloop": args.uvloop}))
