#!/usr/bin/env python3
"""Tests of the research pipeline's scripts, without stratumc: the scripted
agent (every stage on hand-written ready entries, the artifacts, the knobs,
the dispatch log) and the fake judge (scores from content, judge errors,
statement form, shutdown). Standard library only:

    python3 examples/research-pipeline/test_scripts.py -v
"""
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
import zlib

sys.dont_write_bytecode = True  # importing the agent leaves no __pycache__ in the example
HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "agents", "research-agent.py")
JUDGE = os.path.join(HERE, "judge", "fake-openai-judge.py")
SPEC = os.path.join(HERE, "research.stratum.yaml")
WORKDIR = "runs/test"
TOPIC = "Final size of stochastic SIR epidemics"

spec_obj = importlib.util.spec_from_file_location("research_agent", AGENT)
agent_mod = importlib.util.module_from_spec(spec_obj)
spec_obj.loader.exec_module(agent_mod)


def entry(stage, attempt=1, analysis="succeeded", workdir=WORKDIR, **extra):
    """A ready entry as `stratumc run` writes it (README, "Running")."""
    e = {"id": stage,
         "do": "Do the %s stage.\n\nanalysis: %s\ntopic: %s\nworkdir: %s\n" % (
             stage, analysis, TOPIC, workdir),
         "agent": "claude", "attempt": attempt, "attemptsLeft": 0,
         "dispatchToken": "d%d-%s" % (attempt, stage), "dispatch": "step",
         "contract": None, "ensure": [], "previousFailure": None}
    e.update(extra)
    return e


class Workspace:
    def __init__(self, config=None):
        self.root = tempfile.mkdtemp(prefix="research-ws-")
        if config is not None:
            with open(os.path.join(self.root, "agent-config.json"), "w") as f:
                json.dump(config, f)

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def stage_path(self, stage, *parts):
        return self.path(WORKDIR, stage, *parts)

    def read(self, *parts):
        with open(self.path(*parts), encoding="utf-8") as f:
            return f.read()

    def json(self, *parts):
        return json.loads(self.read(*parts))

    def dispatch(self, e, env=None, timeout=60):
        """Runs the agent on entry e; returns its JSON answer."""
        proc = subprocess.run([sys.executable, AGENT], input=json.dumps(e), cwd=self.root,
                              capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **(env or {})))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def log(self, path=None):
        with open(path or self.path("agent-log.jsonl")) as f:
            return [json.loads(line) for line in f]

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


def png_info(data):
    """Checks a PNG's chunks and CRCs; returns (width, height, distinct colours)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, "bad CRC in %r" % kind
        chunks.append((kind, body))
        pos += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    w, h, depth, colour, _c, _f, _i = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour) == (8, 2), "expected 8-bit RGB"
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w)
    colours = set()
    for y in range(h):
        row = raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)]
        assert row[0] == 0
        for x in range(0, 3 * w, 3 * 7):
            colours.add(bytes(row[1 + x:4 + x]))
    return w, h, len(colours)


def spec_paths():
    """Every workdir path the spec names: templates and expression concatenations."""
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    found = set(re.findall(r"\$\{input\.workdir\}(/[^\"'\s()]*[^\"'\s().,:])", text))
    found |= set(re.findall(r"input\.workdir \+ '(/[^']+)'", text))
    return sorted(p for p in found if "<" not in p)  # not the comments' ${input.workdir}/<stage>/


class FullPipeline(unittest.TestCase):
    """All five stages in order, every gate's rules checked by hand."""

    @classmethod
    def setUpClass(cls):
        cls.ws = Workspace()
        cls.outputs = {}
        for stage in agent_mod.STAGES:
            cls.outputs[stage] = cls.ws.dispatch(entry(stage))

    @classmethod
    def tearDownClass(cls):
        cls.ws.remove()

    def test_every_stage_reports_a_stage_report(self):
        for stage, answer in self.outputs.items():
            out = answer["output"]
            self.assertEqual(set(out), {"stage", "artifacts", "summary", "open_issues"})
            self.assertEqual(out["stage"], stage)
            self.assertTrue(out["summary"])
            self.assertGreaterEqual(len(out["artifacts"]), 2)
            for rel in out["artifacts"]:
                self.assertTrue(rel.startswith(WORKDIR + "/" + stage + "/"), rel)
                self.assertTrue(os.path.isfile(self.ws.path(rel)), rel)
            self.assertEqual(set(answer["usage"]), {"tokens", "usd", "ms"})

    def test_every_path_the_spec_names_exists(self):
        paths = spec_paths()
        self.assertGreater(len(paths), 15)
        for p in paths:
            full = self.ws.path(WORKDIR + p)
            if "*" in p:
                self.assertTrue(glob.glob(full), p)
            elif p.endswith("/"):
                self.assertTrue(os.path.isdir(full), p)
            else:
                self.assertTrue(os.path.isfile(full), p)

    def test_plan_rules(self):
        plan = self.ws.read(WORKDIR, "plan", "plan.md")
        self.assertIn("## Method", plan)
        self.assertRegex(plan, r"(^|\n)## Hypothes")
        self.assertNotIn("## Revision", plan)
        qs = self.ws.json(WORKDIR, "plan", "questions.json")["questions"]
        self.assertGreaterEqual(len(qs), 3)
        self.assertTrue(all(len(q) >= 10 for q in qs))

    def test_literature_rules(self):
        papers = self.ws.json(WORKDIR, "literature", "papers.json")["papers"]
        self.assertGreaterEqual(len(papers), 10)
        for p in papers:
            self.assertRegex(p["doi"], r"^10[.][0-9]{4,9}/")
        self.assertEqual(len({p["doi"] for p in papers}), len(papers))
        bib = self.ws.read(WORKDIR, "literature", "refs.bib")
        self.assertEqual(re.findall(r"@\w+\{([^,]+),", bib), [p["key"] for p in papers])
        notes = self.ws.read(WORKDIR, "literature", "notes.md")
        self.assertRegex(notes, r"(^|\n)## Gap")
        self.assertNotIn(agent_mod.WEAK_MARKER, notes)

    def test_simulation_rules(self):
        res = self.ws.json(WORKDIR, "simulation", "results.json")
        self.assertEqual(res["status"], "ok")
        self.assertGreaterEqual(len(res["runs"]), 3)
        seeds = [r["seed"] for r in res["runs"]]
        self.assertEqual(len(set(seeds)), len(seeds))
        log = self.ws.read(WORKDIR, "simulation", "log.txt")
        for s in seeds:
            self.assertRegex(log, r"(^|\n)seed=%d " % s)
        config = self.ws.json(WORKDIR, "simulation", "config.json")
        self.assertEqual(len(res["runs"]), len(config["r0_values"]) * config["runs_per_r0"])
        for r in res["runs"]:
            self.assertEqual(r["final_size"], round(r["attack_rate"] * config["population"]))
            self.assertEqual(max(r["infected"]), r["peak_infected"])
            self.assertEqual(r["infected"][0], config["initial_infected"])

    def test_analysis_rules_and_figures(self):
        figs = sorted(glob.glob(self.ws.stage_path("analysis", "figures", "*.png")))
        self.assertGreaterEqual(len(figs), 2)
        for f in figs:
            with open(f, "rb") as fh:
                data = fh.read()
            self.assertGreater(len(data), 1000)
            w, h, colours = png_info(data)
            self.assertEqual((w, h), (720, 440))
            self.assertGreater(colours, 3, "%s looks blank" % f)
        summary = self.ws.json(WORKDIR, "analysis", "summary.json")
        self.assertGreaterEqual(len(summary["findings"]), 1)
        self.assertIsInstance(summary["supports_hypothesis"], bool)
        self.assertIn("## Conclusion", self.ws.read(WORKDIR, "analysis", "report.md"))

    def test_paper_rules(self):
        tex = self.ws.read(WORKDIR, "paper", "main.tex")
        for needle in (r"\begin{abstract}", r"\cite{", r"\begin{tabular}", "includegraphics",
                       r"\end{document}"):
            self.assertIn(needle, tex)
        self.assertNotIn("analysis stage did not pass", tex)
        bib_keys = set(re.findall(r"@\w+\{([^,]+),", self.ws.read(WORKDIR, "paper", "refs.bib")))
        cited = {k for group in re.findall(r"\\cite\{([^}]*)\}", tex) for k in group.split(",")}
        self.assertTrue(cited)
        self.assertLessEqual(cited, bib_keys)
        for fig in re.findall(r"\\includegraphics\[[^]]*\]\{([^}]*)\}", tex):
            self.assertTrue(os.path.isfile(self.ws.stage_path("paper", fig)), fig)

    def test_dispatch_log(self):
        log = self.ws.log()
        self.assertEqual([r["id"] for r in log], list(agent_mod.STAGES))
        for r in log:
            self.assertEqual(r["attempt"], 1)
            self.assertEqual(r["dispatchToken"], "d1-" + r["id"])
            self.assertNotIn("previousFailure", r)
            self.assertNotIn("previousRevise", r)


class SpecText(unittest.TestCase):
    """What can be checked of the spec without stratumc (stdlib has no YAML)."""

    def setUp(self):
        with open(SPEC, encoding="utf-8") as f:
            self.lines = f.read().splitlines()

    def test_no_templates_inside_expressions(self):  # C3: expressions have no ${...}
        for line in self.lines:
            st = line.strip()
            if st.startswith(("- expr:", "when:", "source:", "summary: \"coalesce")):
                self.assertNotIn("${", st, st)

    def test_the_weak_marker_comes_only_from_the_agent(self):
        self.assertFalse(any(agent_mod.WEAK_MARKER in line for line in self.lines))

    def test_every_stage_is_a_step_with_cost_and_artifacts(self):
        text = "\n".join(self.lines)
        for stage in agent_mod.STAGES:
            block = text.split("- id: %s\n" % stage, 1)[1].split("\n      - id: ", 1)[0]
            for key in ("do: |", "out: StageReport", "artifacts:", "ensure:", "attempts:",
                        "cost: {"):
                self.assertIn(key, block, "%s lacks %s" % (stage, key))


class Reproducibility(unittest.TestCase):
    def test_same_seed_same_run(self):
        a = agent_mod.simulate_sir(7, 2.0, 500, 5, 0.1, 400)
        b = agent_mod.simulate_sir(7, 2.0, 500, 5, 0.1, 400)
        c = agent_mod.simulate_sir(8, 2.0, 500, 5, 0.1, 400)
        self.assertEqual(a, b)
        self.assertNotEqual(a["infected"], c["infected"])

    def test_results_are_byte_identical_across_workspaces(self):
        one, two = Workspace(), Workspace()
        try:
            for ws in (one, two):
                ws.dispatch(entry("simulation"))
            for name in ("config.json", "results.json", "log.txt"):
                self.assertEqual(one.read(WORKDIR, "simulation", name),
                                 two.read(WORKDIR, "simulation", name))
        finally:
            one.remove()
            two.remove()

    def test_final_size_relation(self):
        for r0 in (1.5, 2.0, 3.0):
            z = agent_mod.final_size(r0)
            self.assertAlmostEqual(z, 1 - agent_mod.math.exp(-r0 * z), places=9)
        self.assertEqual(agent_mod.final_size(0.9), 0.0)

    def test_png_writer(self):
        c = agent_mod.Canvas(10, 4)
        c.line(0, 0, 9, 3, (255, 0, 0))
        self.assertEqual(png_info(c.png())[:2], (10, 4))


class Knobs(unittest.TestCase):
    def setUp(self):
        self.ws = None

    def tearDown(self):
        if self.ws:
            self.ws.remove()

    def test_us1_plan_without_hypotheses_then_fixed_from_previous_failure(self):
        self.ws = Workspace({"plan": {"omit_hypotheses_first": True}})
        out = self.ws.dispatch(entry("plan"))["output"]
        plan = self.ws.read(WORKDIR, "plan", "plan.md")
        self.assertNotRegex(plan, r"(^|\n)## Hypothes")
        self.assertIn("## Method", plan)
        failure = {"attempt": 1, "reason": "ensure \"matches(...)\" failed: predicate "
                   "evaluated to false", "violations": [{"kind": "ensure",
                                                         "message": "no hypotheses"}]}
        out2 = self.ws.dispatch(entry("plan", attempt=2, previousFailure=failure))["output"]
        plan = self.ws.read(WORKDIR, "plan", "plan.md")
        self.assertRegex(plan, r"(^|\n)## Hypothes")
        self.assertIn("## Revision", plan)
        self.assertIn("no hypotheses", plan)
        self.assertNotEqual(out, out2)  # not "identical evidence"
        log = self.ws.log()
        self.assertEqual([r["attempt"] for r in log], [1, 2])
        self.assertEqual(log[1]["previousFailure"], failure)

    def test_us2_broken_simulation_then_fixed(self):
        self.ws = Workspace({"simulation": {"broken": True}})
        outs = [self.ws.dispatch(entry("simulation", attempt=a))["output"] for a in (1, 2)]
        res = self.ws.json(WORKDIR, "simulation", "results.json")
        self.assertEqual(res["status"], "error")
        self.assertEqual(res["runs"], [])
        self.assertIn("error", res)
        self.assertNotEqual(outs[0], outs[1])
        self.assertTrue(os.path.isfile(self.ws.stage_path("simulation", "log.txt")))
        with open(self.ws.path("agent-config.json"), "w") as f:
            json.dump({"simulation": {"broken": False}}, f)
        self.ws.dispatch(entry("simulation"))
        self.assertEqual(self.ws.json(WORKDIR, "simulation", "results.json")["status"], "ok")

    def test_escalate_weak_notes_until_revised(self):
        self.ws = Workspace({"literature": {"weak_notes_until_revised": True}})
        self.ws.dispatch(entry("literature"))
        notes = self.ws.read(WORKDIR, "literature", "notes.md")
        self.assertIn("[weak]", notes)
        self.assertRegex(notes, r"(^|\n)## Gap")  # the rules still pass: the judge decides
        self.ws.dispatch(entry("literature", attempt=2, previousFailure={
            "attempt": 1, "reason": "judged: score 0.3 < 0.7"}))
        self.assertIn("[weak]", self.ws.read(WORKDIR, "literature", "notes.md"))
        note = "Answer each research question with the papers that address it."
        revise = {"gate": "escalate_literature", "round": 1, "note": note, "choice": None}
        self.ws.dispatch(entry("literature", previousRevise=revise))
        notes = self.ws.read(WORKDIR, "literature", "notes.md")
        self.assertNotIn("[weak]", notes)
        self.assertIn(note, notes)
        self.assertEqual(self.ws.log()[-1]["previousRevise"], revise)

    def test_skip_analysis_fails_and_paper_goes_on(self):
        self.ws = Workspace({"analysis": {"fail": True}})
        self.ws.dispatch(entry("simulation"))
        answer = self.ws.dispatch(entry("analysis"))
        self.assertIn("failure", answer)
        self.assertNotIn("output", answer)
        self.assertEqual(glob.glob(self.ws.stage_path("analysis", "figures", "*.png")), [])
        out = self.ws.dispatch(entry("paper", analysis="failed"))["output"]
        tex = self.ws.read(WORKDIR, "paper", "main.tex")
        self.assertIn("analysis stage did not pass", tex)
        self.assertNotIn("includegraphics", tex)
        self.assertIn(r"\begin{abstract}", tex)
        self.assertIn("the analysis stage did not pass", out["open_issues"])

    def test_hang_first_then_answers(self):
        self.ws = Workspace({"plan": {"hang_first": True}})
        proc = subprocess.Popen([sys.executable, AGENT], cwd=self.ws.root, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                start_new_session=True)
        proc.stdin.write(json.dumps(entry("plan")))
        proc.stdin.close()
        try:
            with self.assertRaises(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # what the driver does at the lease
            proc.wait()
            proc.stdout.close()
        again = entry("plan", dispatchToken="d1-plan-redispatched")
        self.assertIn("output", self.ws.dispatch(again, timeout=30))
        self.assertEqual([r["dispatchToken"] for r in self.ws.log()],
                         ["d1-plan", "d1-plan-redispatched"])

    def test_log_path_from_environment(self):
        self.ws = Workspace()
        log = self.ws.path("elsewhere", "log.jsonl")
        self.ws.dispatch(entry("plan"), env={"RESEARCH_AGENT_LOG": log})
        self.assertEqual(self.ws.log(log)[0]["id"], "plan")
        self.assertFalse(os.path.exists(self.ws.path("agent-log.jsonl")))

    def test_refusals(self):
        self.ws = Workspace()
        self.assertIn("not a path inside", self.ws.dispatch(
            entry("plan", workdir="../outside"))["failure"])
        self.assertIn("unknown stage", self.ws.dispatch(entry("review"))["failure"])
        self.assertIn("no usable simulation results",
                      self.ws.dispatch(entry("analysis"))["failure"])


HOST_STATEMENT_PROMPT = (  # vm/src/host.rs SYSTEM_PROMPT (v1 statement form)
    "You are a strict verifier inside a workflow engine. You are given a statement and a "
    "context (the step's result and the flow's input, as JSON). Decide whether the statement "
    "holds for that context. Judge only from the context: if it does not show that the "
    "statement holds, the statement does not hold. Answer with exactly one JSON object and "
    "nothing else: {\"holds\": true or false, \"reason\": \"one or two sentences explaining "
    "why\"}")
SCORE_PROMPT = ("You are a strict reviewer. Score the inputs against the rubric. Answer with "
                "one JSON object: {\"score\": number in [0,1], \"reasons\": [string]}")


class FakeJudge(unittest.TestCase):
    def start(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="fake-judge-")
        self.port_file = os.path.join(self.dir, "port")
        self.log = os.path.join(self.dir, "judge.jsonl")
        self.proc = subprocess.Popen(
            [sys.executable, JUDGE, "0", "--port-file", self.port_file, "--log", self.log]
            + list(extra), stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        with open(self.port_file) as f:
            self.assertEqual(int(f.read()), self.port)

    def tearDown(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def ask(self, system, user):
        body = json.dumps({"model": "qwen2.5:7b", "temperature": 0,
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": user}]}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % self.port,
                                     data=body, headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                reply = json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, None
        return 200, json.loads(reply["choices"][0]["message"]["content"])

    def judge_log(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def test_scores_from_the_content_of_real_notes(self):
        self.start()
        ws = Workspace({"literature": {"weak_notes_until_revised": True}})
        try:
            ws.dispatch(entry("literature"))
            weak = ws.read(WORKDIR, "literature", "notes.md")
            ws.dispatch(entry("literature", previousRevise={"note": "answer each question"}))
            strong = ws.read(WORKDIR, "literature", "notes.md")
        finally:
            ws.remove()
        rubric = "Rubric: the notes answer every research question.\n\nnotes.md:\n"
        code, verdict = self.ask(SCORE_PROMPT, rubric + weak)
        self.assertEqual(code, 200)
        self.assertEqual(verdict["score"], 0.3)
        self.assertTrue(verdict["reasons"] and all(isinstance(r, str) for r in verdict["reasons"]))
        self.assertEqual(set(verdict), {"score", "reasons"})
        code, verdict = self.ask(SCORE_PROMPT, rubric + strong)
        self.assertEqual((code, verdict["score"]), (200, 0.9))
        self.assertEqual([(r["form"], r["weak"], r["score"]) for r in self.judge_log()],
                         [("score", True, 0.3), ("score", False, 0.9)])

    def test_statement_form_as_fake_judge_py(self):
        self.start()
        code, verdict = self.ask(HOST_STATEMENT_PROMPT,
                                 "Statement: the notes are complete\nStakes: default\n"
                                 "Context:\n{\"result\": {\"score\": 1}}")
        self.assertEqual(code, 200)
        self.assertEqual(set(verdict), {"holds", "reason"})
        self.assertIs(verdict["holds"], True)
        code, verdict = self.ask(HOST_STATEMENT_PROMPT,
                                 "Statement: x\nStakes: cheap\nContext:\n\"[weak] draft\"")
        self.assertIs(verdict["holds"], False)

    def test_fail_n_answers_http_500_first(self):
        self.start("--fail", "2")
        codes = [self.ask(SCORE_PROMPT, "Rubric: r\nok")[0] for _ in range(3)]
        self.assertEqual(codes, [500, 500, 200])
        self.assertEqual([r["status"] for r in self.judge_log()], [500, 500, 200])

    def test_models_endpoint_and_sigterm(self):
        self.start()
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % self.port,
                                    timeout=10) as r:
            self.assertEqual(json.loads(r.read())["data"][0]["id"], "fake-judge")
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=10), 0)


if __name__ == "__main__":
    unittest.main()
