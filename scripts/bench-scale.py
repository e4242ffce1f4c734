#!/usr/bin/env python3
"""Scale, measured (issue 18 §5): several `stratumc mcp` servers on one run
store, each driving many runs at once, SIGKILLed at random and restarted.

usage: scripts/bench-scale.py [--binary target/release/stratumc] [--servers 3]
           [--runs 8] [--steps 5] [--seconds 60] [--kill-every 4] [--home DIR]

Each server stands for a machine: with STRATUM_STORE set (the store every
server uses, e.g. `postgres://…`), every server gets a STRATUM_HOME of its
own; without it they share one STRATUM_HOME, so one SQLite file
(`$STRATUM_HOME/stratum.db`). Every server is driven through the official
Python MCP SDK (`pip install mcp`) by `--runs` workers at once, each taking
runs of a flow of `--steps` sequential steps to completion and starting the
next. About every `--kill-every` seconds one server, chosen at random, is
SIGKILLed (no clean shutdown, calls in flight) and restarted; its workers
continue their runs with `stratum_resume`. After `--seconds` no new runs
start and no server is killed; the runs in flight finish.

Then every run's audit is read and checked: each step succeeded exactly once
(`result` with an output), the output recorded for a step is the one of the
report the server acknowledged (or, when the server died before answering,
of the report in flight), and the run completed. A step recorded twice is a
doubled transition, an acknowledged report that is not in the audit a lost
one: both must be 0 (exit status 1 otherwise).

Prints aggregate transitions per second (acknowledged `stratum_step_done`
calls over the storm's wall time), p50/p99 of `stratum_step_done` as the
client sees it, restarts, and the audit check. Not a timed test: run by
hand, its figures go to the README ("Scale").
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]
CALL_TIMEOUT = 60


def spec(steps):
    lines = [
        "version: 1",
        "contracts:",
        "  R: {value: string}",
        "flows:",
        "  entry: main",
        "  main:",
        "    input: {}",
        f'    output: {{from: "${{s{steps - 1}.output}}", contract: R}}',
        "    steps:",
    ]
    for i in range(steps):
        lines.append(f"      - id: s{i}")
        if i:
            lines.append(f"        after: [s{i - 1}]")
        lines.append(f'        do: "step {i}"')
        lines.append("        out: R")
    return "\n".join(lines) + "\n"


class ServerDied(Exception):
    """The server this call went to was killed."""


class Run:
    """What the client knows of one run."""

    def __init__(self, run_id, machine):
        self.id = run_id
        self.machine = machine
        self.acked = {}  # step -> value the server acknowledged
        self.in_flight = None  # (step, value) sent, not answered
        self.unacked = {}  # step -> value committed before the server died
        self.env = None
        self.done = False


class Stats:
    def __init__(self):
        self.latencies = []
        self.acked = 0
        self.restarts = 0
        self.plans_lost = 0  # stratum_plan calls in flight when a server died
        self.errors = []


class Machine:
    """One `stratumc mcp` server (restarted after each kill) and its workers."""

    def __init__(self, n, args, home, stats, stop):
        self.n = n
        self.args = args
        self.home = home
        self.stats = stats
        self.stop = stop
        self.killed = asyncio.Event()
        self.pidfile = home / f"server-{n}.pid"
        self.slots = [None] * args.runs  # the run each worker drives
        self.runs = []
        self.alive = False

    @contextlib.asynccontextmanager
    async def server(self):
        env = dict(os.environ, STRATUM_HOME=str(self.home / f"home-{self.n}"
                                               if os.environ.get("STRATUM_STORE")
                                               else self.home / "shared"))
        params = StdioServerParameters(
            command="sh",
            args=["-c", f'echo $$ > "{self.pidfile}"; exec "{self.args.binary}" mcp'],
            env=env, cwd=str(self.home))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), CALL_TIMEOUT)
                yield session

    def kill(self):
        if not self.alive:
            return False
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(self.pidfile.read_text().strip()), signal.SIGKILL)
        self.alive = False
        self.killed.set()
        return True

    async def call(self, session, tool, args):
        try:
            r = await asyncio.wait_for(session.call_tool(tool, args), CALL_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 — the SDK reports a dead server its own way
            if self.killed.is_set():
                raise ServerDied() from e
            raise
        text = r.content[0].text if r.content else ""
        if r.is_error:
            raise RuntimeError(f"{tool} failed: {text}")
        return json.loads(text)

    async def worker(self, session, slot, plan_spec):
        while True:
            run = self.slots[slot]
            if run is None:
                if self.stop.is_set():
                    return
                self.stats.plans_lost += 1  # until it is answered
                env = await self.call(session, "stratum_plan", {"spec": plan_spec})
                self.stats.plans_lost -= 1
                run = Run(env["runId"], self.n)
                run.env = env
                self.runs.append(run)
                self.slots[slot] = run
            if run.env["status"] == "completed":
                run.done = True
                self.slots[slot] = None
                continue
            if run.env["status"] != "ready" or not run.env["ready"]:
                raise RuntimeError(f"run {run.id} is {run.env['status']} with nothing ready")
            entry = run.env["ready"][0]
            step = entry["id"]
            value = f"{run.id}/{step}/{random.getrandbits(48):012x}"
            run.in_flight = (step, value)
            t = time.perf_counter()
            env = await self.call(session, "stratum_step_done", {
                "runId": run.id, "stepId": step, "dispatchToken": entry["dispatchToken"],
                "result": {"output": {"value": value}}})
            self.stats.latencies.append(time.perf_counter() - t)
            self.stats.acked += 1
            run.acked[step] = value
            run.in_flight = None
            run.env = env

    async def resume(self, session):
        """After a restart: where each of this machine's runs stands."""
        for run in self.slots:
            if run is None:
                continue
            env = await self.call(session, "stratum_resume", {"runId": run.id})
            if run.in_flight:
                step, value = run.in_flight
                still = any(e["id"] == step for e in env.get("ready", []))
                if not still:  # committed before the server died
                    run.unacked[step] = value
                run.in_flight = None
            run.env = env

    async def drive(self, plan_spec):
        while True:
            if self.stop.is_set() and all(s is None for s in self.slots):
                return
            self.killed.clear()
            try:
                async with self.server() as session:
                    self.alive = True
                    await self.resume(session)
                    workers = [asyncio.create_task(self.worker(session, k, plan_spec))
                               for k in range(len(self.slots))]
                    dead = asyncio.create_task(self.killed.wait())
                    pending = set(workers)
                    while pending and not self.killed.is_set():
                        done, pending = await asyncio.wait(
                            pending | {dead}, return_when=asyncio.FIRST_COMPLETED)
                        pending.discard(dead)
                        for t in done:
                            if t is not dead and t.exception() and not self.killed.is_set():
                                raise t.exception()
                    for t in workers:
                        t.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
                    dead.cancel()
                    if not self.killed.is_set():
                        self.alive = False
                        return  # every worker finished: the storm is over
            except (ServerDied, Exception) as e:  # noqa: BLE001
                if not self.killed.is_set():
                    raise
                del e
            self.stats.restarts += 1
            # plans in flight at the kill may have started runs nobody knows
            # of; they are counted, not driven


async def killer(machines, args, stop):
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), random.expovariate(1 / args.kill_every))
        if stop.is_set():
            return
        live = [m for m in machines if m.alive]
        if live:
            random.choice(live).kill()


async def check(machines, args, home):
    """Reads every run's audit through a fresh server and counts problems."""
    runs = [r for m in machines for r in m.runs]
    lost = doubled = unfinished = 0
    problems = []
    probe = Machine(len(machines), args, home, Stats(), asyncio.Event())
    async with probe.server() as session:
        for run in runs:
            audit = await probe.call(session, "stratum_audit", {"runId": run.id})
            succeeded = {}
            for ev in audit["events"]:
                if ev["type"] == "result" and "output" in ev.get("detail", {}):
                    succeeded.setdefault(ev.get("stepId"), []).append(
                        ev["detail"]["output"]["value"])
            if audit["status"] != "completed":
                unfinished += 1
                problems.append(f"{run.id}: {audit['status']}")
            for step in (f"s{i}" for i in range(args.steps)):
                values = succeeded.get(step, [])
                if len(values) > 1:
                    doubled += len(values) - 1
                    problems.append(f"{run.id}: {step} succeeded {len(values)} times")
                expect = run.acked.get(step) or run.unacked.get(step)
                if step in run.acked and run.acked[step] not in values:
                    lost += 1
                    problems.append(f"{run.id}: the acknowledged report of {step} is not recorded")
                elif expect is None and values:
                    problems.append(f"{run.id}: {step} recorded a report nobody sent")
                elif not values:
                    problems.append(f"{run.id}: {step} never succeeded")
    return len(runs), lost, doubled, unfinished, problems


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "stratumc"))
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--runs", type=int, default=8, help="runs each server drives at once")
    ap.add_argument("--steps", type=int, default=5, help="steps per run")
    ap.add_argument("--seconds", type=float, default=60, help="how long the storm lasts")
    ap.add_argument("--kill-every", type=float, default=4,
                    help="mean seconds between SIGKILLs (0: never)")
    ap.add_argument("--home", help="scratch directory (default: a new temporary one)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    args.binary = str(Path(args.binary).resolve())
    if args.seed is not None:
        random.seed(args.seed)
    home = Path(args.home or tempfile.mkdtemp(prefix="stratum-bench-scale-")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    store = os.environ.get("STRATUM_STORE") or f"sqlite: {home / 'shared' / 'stratum.db'}"
    print(f"store: {store.split('@')[-1]}")  # never a password
    print(f"{args.servers} servers × {args.runs} runs at once, {args.steps} steps per run, "
          f"{args.seconds:.0f} s, a SIGKILL every ~{args.kill_every:g} s")

    stats = Stats()
    stop = asyncio.Event()
    machines = [Machine(n, args, home, stats, stop) for n in range(args.servers)]
    plan_spec = spec(args.steps)
    t0 = time.perf_counter()
    drivers = [asyncio.create_task(m.drive(plan_spec)) for m in machines]
    kills = asyncio.create_task(killer(machines, args, stop)) if args.kill_every > 0 else None
    await asyncio.sleep(args.seconds)
    stop.set()
    storm = time.perf_counter() - t0
    acked_in_storm = stats.acked
    if kills:
        await kills
    await asyncio.gather(*drivers)
    drain = time.perf_counter() - t0 - storm

    runs, lost, doubled, unfinished, problems = await check(machines, args, home)
    lat = [x * 1000 for x in stats.latencies]
    print(f"transitions: {stats.acked} acknowledged step_done "
          f"({acked_in_storm} in the storm, the rest finishing in {drain:.1f} s)")
    print(f"throughput: {acked_in_storm / storm:.0f} transitions/s over {storm:.0f} s "
          f"({args.servers} servers)")
    print(f"step_done: p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms, "
          f"mean {statistics.fmean(lat) if lat else float('nan'):.1f} ms")
    print(f"restarts after SIGKILL: {stats.restarts}; stratum_plan calls cut off: "
          f"{stats.plans_lost}")
    print(f"audit check of {runs} runs: lost {lost}, doubled {doubled}, unfinished {unfinished}")
    for p in problems[:20]:
        print(f"  {p}")
    ok = lost == 0 and doubled == 0 and unfinished == 0 and not problems
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
