#!/usr/bin/env python3
"""The scripted agent of the research pipeline: one command for all five stages.

    stratumc run research.stratum.yaml --inputs @inputs.json \\
        --agent "python3 agents/research-agent.py"

It reads one ready entry (JSON) on stdin, with the workspace root as its
working directory, dispatches on the entry's `id` (plan, literature,
simulation, analysis, paper), writes REAL artifacts under
<workdir>/<stage>/ and prints `{"output": {...}, "usage": {...}}` (a
StageReport), or `{"failure": "..."}`. The workdir and the topic are read
from the `workdir: ...` and `topic: ...` lines the spec puts at the end of
every task.

  plan        plan/plan.md (## Questions, ## Hypotheses, ## Method, ## Risks),
              plan/questions.json
  literature  literature/papers.json (12 real papers with DOIs), refs.bib,
              notes.md
  simulation  a stochastic SIR epidemic (Gillespie's direct method), several
              R0 values x several seeds, each run from random.Random(seed):
              simulation/config.json, results.json, log.txt ("seed=N ..." lines)
  analysis    analysis/figures/*.png (line plot of every run's infected curve,
              attack rate against R0 with the final-size curve; drawn by a
              pure-Python PNG writer), summary.json, report.md
  paper       paper/main.tex (abstract, method, results table, \\cite of
              refs.bib, figures when the analysis passed), paper/refs.bib

Every dispatch appends one JSON line to $RESEARCH_AGENT_LOG (default
<workspace>/agent-log.jsonl) before it does anything:
  {"id", "attempt", "dispatchToken", "previousFailure"?, "previousRevise"?}

Behaviour knobs, read from <workspace>/agent-config.json (all default false:
every stage passes):
  {"plan":       {"omit_hypotheses_first": true},   # US1: no ## Hypotheses until
                                                    #   previousFailure is set
   "simulation": {"broken": true},                  # US2: results.json "status": "error"
   "literature": {"weak_notes_until_revised": true},# notes marked [weak] until the
                                                    #   entry has previousRevise.note
   "analysis":   {"fail": true},                    # skip: the stage reports a failure
   "<stage>":    {"hang_first": true}}              # the first dispatch of the stage
                                                    #   (none in the log) never answers
Standard library only.
"""
import json
import math
import os
import random
import re
import struct
import sys
import time
import zlib

STAGES = ("plan", "literature", "simulation", "analysis", "paper")
WEAK_MARKER = "[weak]"


class StageFailure(Exception):
    """The stage cannot produce its artifacts; reported as {"failure": ...}."""


# --------------------------------------------------------------------------
# entry, configuration, log


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def write_text(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, doc):
    write_text(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def task_field(task, name):
    """The value of a `name: value` line of the rendered task, or None."""
    m = re.search(r"(?m)^[ \t]*" + re.escape(name) + r":[ \t]*(.+?)[ \t]*$", task or "")
    return m.group(1) if m else None


def safe_workdir(workdir):
    """The workdir must stay inside the workspace (the engine's jail does too)."""
    norm = os.path.normpath(workdir)
    if os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
        raise StageFailure("workdir %r is not a path inside the workspace" % workdir)
    return norm


def log_path(ws):
    return os.environ.get("RESEARCH_AGENT_LOG") or os.path.join(ws, "agent-log.jsonl")


def dispatched_before(path, entry_id):
    """Whether the log already has a dispatch of this id."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    if json.loads(line).get("id") == entry_id:
                        return True
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return False


def log_dispatch(path, entry):
    rec = {"id": entry.get("id"), "attempt": entry.get("attempt"),
           "dispatchToken": entry.get("dispatchToken")}
    for key in ("previousFailure", "previousRevise"):
        if entry.get(key) is not None:
            rec[key] = entry[key]
    rec["pid"] = os.getpid()
    line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: lines never interleave
    finally:
        os.close(fd)


class Ctx:
    """What a stage handler needs."""

    def __init__(self, entry, ws, config):
        self.entry = entry
        self.ws = ws
        self.id = entry.get("id", "")
        self.stage = self.id.rsplit("/", 1)[-1]
        self.attempt = entry.get("attempt") or 1
        task = entry.get("do", "")
        self.task = task
        self.topic = task_field(task, "topic") or config.get("topic") or "an unnamed topic"
        self.workdir = safe_workdir(task_field(task, "workdir") or config.get("workdir")
                                    or "runs/demo")
        self.knobs = config.get(self.stage) or {}
        self.previous_failure = entry.get("previousFailure")
        self.previous_revise = entry.get("previousRevise")
        self.written = []

    def rel(self, *parts):
        """A workspace-relative path under the workdir (as the spec names it)."""
        return "/".join([self.workdir.replace(os.sep, "/")] + list(parts))

    def abs(self, rel):
        return os.path.join(self.ws, rel)

    def write_text(self, rel, text):
        write_text(self.abs(rel), text)
        self.written.append(rel)

    def write_json(self, rel, doc):
        write_json(self.abs(rel), doc)
        self.written.append(rel)

    def write_bytes(self, rel, data):
        write_bytes(self.abs(rel), data)
        self.written.append(rel)

    def read_json(self, rel, default=None):
        return read_json(self.abs(rel), default)

    def report(self, summary, open_issues=()):
        return {"stage": self.stage, "artifacts": list(self.written),
                "summary": summary, "open_issues": list(open_issues)}


def revise_note(ctx):
    """The note of the gate revision that sent the stage back, if any."""
    rev = ctx.previous_revise
    if isinstance(rev, dict) and isinstance(rev.get("note"), str) and rev["note"].strip():
        return rev["note"].strip()
    return None


def failure_text(failure):
    """A previous failure in one line: its reason and violation messages."""
    if not isinstance(failure, dict):
        return ""
    parts = [str(failure.get("reason", ""))]
    for v in failure.get("violations") or []:
        if isinstance(v, dict) and v.get("message"):
            parts.append(str(v["message"]))
    return "; ".join(p for p in parts if p)


# --------------------------------------------------------------------------
# plan

DEFAULT_QUESTIONS = [
    "How does the basic reproduction number R0 change the probability that a "
    "few initial cases cause a major outbreak?",
    "How closely does the mean final size of major outbreaks in a finite "
    "stochastic SIR population follow the Kermack-McKendrick final-size relation?",
    "How much do the peak size and the peak day vary between runs with the same R0?",
]


def stage_plan(ctx):
    omit = bool(ctx.knobs.get("omit_hypotheses_first")) and not ctx.previous_failure
    questions = list(DEFAULT_QUESTIONS)
    lines = ["# Research plan", "", "Topic: %s" % ctx.topic, "",
             "## Questions", ""]
    lines += ["%d. %s" % (i + 1, q) for i, q in enumerate(questions)]
    lines.append("")
    if not omit:
        lines += [
            "## Hypotheses", "",
            "- H1: the share of runs that become major outbreaks (attack rate above "
            "10%) is close to 1 - (1/R0)^I0, the branching-process approximation. "
            "Refuted if the observed share differs by more than 0.25 for some R0.",
            "- H2: for major outbreaks, the mean attack rate is within 0.05 of the "
            "solution z of z = 1 - exp(-R0 z). Refuted if it differs by more than "
            "0.05 for some R0.",
            "- H3: between runs with the same R0, the peak day varies more than the "
            "final size (larger coefficient of variation). Refuted if not.",
            "",
        ]
    lines += [
        "## Method", "",
        "A stochastic SIR model in a closed population of N = 1000 with I0 = 5 "
        "initial cases and recovery rate gamma = 0.1 per day, simulated exactly "
        "with Gillespie's direct method. Transmission rate beta = R0 * gamma for "
        "R0 in {1.5, 2.0, 3.0}, five runs per value, each from its own fixed seed "
        "(random.Random(seed)), so every run can be reproduced. Each run records "
        "the infected count per day, the final size, the peak and its day.",
        "",
        "## Risks", "",
        "- Five runs per R0 give wide intervals; the analysis reports them.",
        "- Minor outbreaks must be separated from major ones before comparing "
        "with the final-size relation (threshold: attack rate 10%).",
        "- The homogeneous-mixing model ignores contact structure.",
        "",
    ]
    if ctx.previous_failure:
        lines += ["## Revision", "",
                  "Attempt %d. The previous attempt failed its gate: %s" %
                  (ctx.attempt, failure_text(ctx.previous_failure) or "(no reason given)"),
                  "This version adds the testable hypotheses.", ""]
    note = revise_note(ctx)
    if note:
        lines += ["## Reviewer note", "", "> " + note, "", "Addressed in this version.", ""]
    ctx.write_text(ctx.rel("plan", "plan.md"), "\n".join(lines))
    ctx.write_json(ctx.rel("plan", "questions.json"), {"questions": questions})
    what = "without hypotheses" if omit else "with three testable hypotheses"
    return ctx.report("Attempt %d: a plan for %r %s, a stochastic SIR method (Gillespie, "
                      "3 R0 values x 5 seeds) and %d questions." %
                      (ctx.attempt, ctx.topic, what, len(questions)),
                      ["no hypotheses section"] if omit else [])


# --------------------------------------------------------------------------
# literature

# Real papers on (stochastic) epidemic models; a fixed list whatever the topic.
PAPERS = [
    ("kermack1927", "A contribution to the mathematical theory of epidemics",
     "W. O. Kermack and A. G. McKendrick", 1927,
     "Proceedings of the Royal Society of London. Series A 115(772):700-721",
     "10.1098/rspa.1927.0118", 1.0,
     "Derives the threshold theorem and the final-size relation of the SIR model.", "article"),
    ("hethcote2000", "The mathematics of infectious diseases", "H. W. Hethcote", 2000,
     "SIAM Review 42(4):599-653", "10.1137/S0036144500371907", 0.9,
     "Surveys threshold quantities (R0) and their estimation in compartmental models.",
     "article"),
    ("gillespie1977", "Exact stochastic simulation of coupled chemical reactions",
     "D. T. Gillespie", 1977, "The Journal of Physical Chemistry 81(25):2340-2361",
     "10.1021/j100540a008", 0.9,
     "The direct method: exact simulation of continuous-time Markov jump processes.",
     "article"),
    ("diekmann1990", "On the definition and the computation of the basic reproduction "
     "ratio R0 in models for infectious diseases in heterogeneous populations",
     "O. Diekmann and J. A. P. Heesterbeek and J. A. J. Metz", 1990,
     "Journal of Mathematical Biology 28:365-382", "10.1007/BF00178324", 0.8,
     "Defines R0 as the spectral radius of the next-generation operator.", "article"),
    ("vandendriessche2002", "Reproduction numbers and sub-threshold endemic equilibria "
     "for compartmental models of disease transmission",
     "P. van den Driessche and J. Watmough", 2002, "Mathematical Biosciences 180:29-48",
     "10.1016/S0025-5564(02)00108-6", 0.7,
     "The next-generation matrix recipe for R0 in compartmental models.", "article"),
    ("britton2010", "Stochastic epidemic models: a survey", "T. Britton", 2010,
     "Mathematical Biosciences 225(1):24-35", "10.1016/j.mbs.2010.01.006", 1.0,
     "Major-outbreak probability and final-size laws of stochastic SIR epidemics.",
     "article"),
    ("allen2008", "An introduction to stochastic epidemic models", "L. J. S. Allen", 2008,
     "Mathematical Epidemiology, Lecture Notes in Mathematics 1945:81-130",
     "10.1007/978-3-540-78911-6_3", 0.9,
     "Branching-process approximation: minor outbreak probability (1/R0)^I0.",
     "incollection"),
    ("ma2006", "Generality of the final size formula for an epidemic of a newly "
     "invading infectious disease", "J. Ma and D. J. D. Earn", 2006,
     "Bulletin of Mathematical Biology 68:679-702", "10.1007/s11538-005-9047-7", 0.9,
     "The final-size relation holds for a wide class of models.", "article"),
    ("miller2012", "A note on the derivation of epidemic final sizes", "J. C. Miller",
     2012, "Bulletin of Mathematical Biology 74:2125-2141",
     "10.1007/s11538-012-9749-6", 0.8,
     "Short derivations of final sizes, including heterogeneous populations.", "article"),
    ("lloydsmith2005", "Superspreading and the effect of individual variation on "
     "disease emergence", "J. O. Lloyd-Smith and S. J. Schreiber and P. E. Kopp and "
     "W. M. Getz", 2005, "Nature 438:355-359", "10.1038/nature04153", 0.6,
     "Individual variation in infectiousness lowers the major-outbreak probability.",
     "article"),
    ("pastorsatorras2001", "Epidemic spreading in scale-free networks",
     "R. Pastor-Satorras and A. Vespignani", 2001, "Physical Review Letters 86:3200",
     "10.1103/PhysRevLett.86.3200", 0.5,
     "Contact heterogeneity can remove the epidemic threshold.", "article"),
    ("ferguson2006", "Strategies for mitigating an influenza pandemic",
     "N. M. Ferguson and D. A. T. Cummings and C. Fraser and J. C. Cajka and "
     "P. C. Cooley and D. S. Burke", 2006, "Nature 442:448-452",
     "10.1038/nature04795", 0.5,
     "Large stochastic simulations of interventions; R0 drives attack rates.", "article"),
]

# Which papers answer which default question (indexes into DEFAULT_QUESTIONS).
ANSWERS = {0: ["allen2008", "britton2010", "lloydsmith2005"],
           1: ["kermack1927", "ma2006", "miller2012", "britton2010"],
           2: ["gillespie1977", "hethcote2000", "ferguson2006"]}


def bib_entry(p):
    key, title, authors, year, venue, doi, _rel, _finding, kind = p
    where = "booktitle" if kind == "incollection" else "journal"
    return ("@%s{%s,\n  title = {%s},\n  author = {%s},\n  year = {%d},\n"
            "  %s = {%s},\n  doi = {%s}\n}\n" % (kind, key, title, authors, year, where,
                                                  venue, doi))


def stage_literature(ctx):
    note = revise_note(ctx)
    weak = bool(ctx.knobs.get("weak_notes_until_revised")) and note is None
    papers = [{"key": p[0], "title": p[1], "authors": p[2], "year": p[3], "venue": p[4],
               "doi": p[5], "relevance": p[6], "finding": p[7]} for p in PAPERS]
    questions = (ctx.read_json(ctx.rel("plan", "questions.json"), {}) or {}).get(
        "questions") or DEFAULT_QUESTIONS
    ctx.write_json(ctx.rel("literature", "papers.json"), {"papers": papers})
    ctx.write_text(ctx.rel("literature", "refs.bib"), "\n".join(bib_entry(p) for p in PAPERS))
    by_key = {p["key"]: p for p in papers}
    if weak:
        lines = ["# Survey notes " + WEAK_MARKER, "",
                 WEAK_MARKER + " Draft: the papers are listed, the questions are not yet "
                 "answered one by one.", "",
                 "## Papers", ""]
        lines += ["- %s (%d)" % (p["title"], p["year"]) for p in papers]
        lines += ["", "## Gap", "", WEAK_MARKER + " To be written.", ""]
    else:
        lines = ["# Survey notes", "", "Topic: %s" % ctx.topic, ""]
        for i, q in enumerate(questions):
            lines += ["## Q%d: %s" % (i + 1, q), ""]
            for key in ANSWERS.get(i, ANSWERS[i % len(ANSWERS)]):
                p = by_key[key]
                lines.append("- [%s] %s (%d): %s" % (key, p["title"], p["year"], p["finding"]))
            lines.append("")
        lines += [
            "## Gap", "",
            "The final-size relation [kermack1927, ma2006] and the branching-process "
            "outbreak probability [allen2008, britton2010] are asymptotic results. "
            "How close a small population (N = 1000) with a handful of initial cases "
            "comes to them, and how variable the peak is meanwhile, is rarely shown "
            "side by side; this plan measures both from the same exact simulations "
            "[gillespie1977].", ""]
        if note:
            lines += ["## Reviewer note", "", "> " + note, "",
                      "Addressed: every question above now has its papers and findings, "
                      "and the gap is stated.", ""]
    ctx.write_text(ctx.rel("literature", "notes.md"), "\n".join(lines))
    state = "draft notes that do not answer the questions yet" if weak else \
        "notes answering all %d questions and the gap" % len(questions)
    return ctx.report("Attempt %d: %d papers with DOIs, refs.bib and %s." %
                      (ctx.attempt, len(papers), state),
                      ["notes are a draft"] if weak else [])


# --------------------------------------------------------------------------
# simulation: a stochastic SIR epidemic, Gillespie's direct method

SIM_CONFIG = {
    "model": "SIR",
    "method": "Gillespie direct method (exact continuous-time Markov chain)",
    "population": 1000,
    "initial_infected": 5,
    "gamma_per_day": 0.1,
    "r0_values": [1.5, 2.0, 3.0],
    "runs_per_r0": 5,
    "base_seed": 1000,
    "max_days": 400,
    "major_outbreak_attack_rate": 0.1,
}


def seeds_of(config):
    """One distinct seed per run: base + 100 * (index of R0) + run number."""
    out = []
    for i, r0 in enumerate(config["r0_values"]):
        for k in range(config["runs_per_r0"]):
            out.append((r0, config["base_seed"] + 100 * i + k + 1))
    return out


def simulate_sir(seed, r0, n, i0, gamma, max_days):
    """One run. Returns the run record; the same seed gives the same record."""
    rng = random.Random(seed)
    beta = r0 * gamma
    s, i, r = n - i0, i0, 0
    t = 0.0
    day = 0
    infected = [i]  # the count at the start of day 0, 1, 2, ...
    events = 0
    while i > 0:
        rate_inf = beta * s * i / n
        rate_rec = gamma * i
        total = rate_inf + rate_rec
        t += rng.expovariate(total)
        if t >= max_days:
            break
        while day + 1 <= t:  # days that passed before this event
            day += 1
            infected.append(i)
        if rng.random() * total < rate_inf:
            s, i = s - 1, i + 1
        else:
            i, r = i - 1, r + 1
        events += 1
    day += 1
    infected.append(i)  # the state when the epidemic ended (or at max_days)
    peak = max(infected)
    return {
        "seed": seed,
        "r0": r0,
        "final_size": r + i,
        "attack_rate": round((r + i) / n, 4),
        "peak_infected": peak,
        "peak_day": infected.index(peak),
        "duration_days": round(min(t, max_days), 3),
        "events": events,
        "infected": infected,
    }


def final_size(r0):
    """The z in (0, 1) with z = 1 - exp(-r0 z) (0 when r0 <= 1)."""
    if r0 <= 1:
        return 0.0
    z = 0.5
    for _ in range(200):
        z = 1 - math.exp(-r0 * z)
    return z


def mean_sd(xs):
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def summarize_runs(config, runs):
    out = []
    n, i0 = config["population"], config["initial_infected"]
    for r0 in config["r0_values"]:
        mine = [r for r in runs if r["r0"] == r0]
        major = [r for r in mine if r["attack_rate"] > config["major_outbreak_attack_rate"]]
        ar_mean, ar_sd = mean_sd([r["attack_rate"] for r in major])
        pd_mean, pd_sd = mean_sd([r["peak_day"] for r in major])
        fs_mean, fs_sd = mean_sd([r["final_size"] for r in major])
        rnd = (lambda x: None if x is None else round(x, 4))
        out.append({
            "r0": r0,
            "runs": len(mine),
            "major_outbreaks": len(major),
            "major_share": round(len(major) / len(mine), 4) if mine else None,
            "major_share_theory": round(1 - (1 / r0) ** i0, 4) if r0 > 1 else 0.0,
            "attack_rate_mean": rnd(ar_mean),
            "attack_rate_sd": rnd(ar_sd),
            "attack_rate_theory": round(final_size(r0), 4),
            "peak_infected_mean": rnd(mean_sd([r["peak_infected"] for r in major])[0]),
            "peak_day_mean": rnd(pd_mean),
            "peak_day_cv": rnd(pd_sd / pd_mean) if pd_mean else None,
            "final_size_cv": rnd(fs_sd / fs_mean) if fs_mean else None,
        })
    return {"population": n, "by_r0": out}


def run_simulation(config):
    runs = [simulate_sir(seed, r0, config["population"], config["initial_infected"],
                         config["gamma_per_day"], config["max_days"])
            for r0, seed in seeds_of(config)]
    return runs, summarize_runs(config, runs)


def stage_simulation(ctx):
    config = dict(SIM_CONFIG)
    for key in ("runs_per_r0", "base_seed", "population"):
        if isinstance(ctx.knobs.get(key), int) and ctx.knobs[key] > 0:
            config[key] = ctx.knobs[key]
    ctx.write_json(ctx.rel("simulation", "config.json"), config)
    if ctx.knobs.get("broken"):
        error = ("the simulation diverged: negative compartment sizes after the first "
                 "event (agent-config.json simulation.broken is true)")
        ctx.write_json(ctx.rel("simulation", "results.json"),
                       {"status": "error", "error": error, "runs": [], "metrics": {}})
        ctx.write_text(ctx.rel("simulation", "log.txt"), "error: %s\n" % error)
        return ctx.report("Attempt %d: the simulation failed: %s" % (ctx.attempt, error),
                          [error])
    runs, metrics = run_simulation(config)
    ctx.write_json(ctx.rel("simulation", "results.json"),
                   {"status": "ok", "model": config["model"], "runs": runs, "metrics": metrics})
    log = ["seed=%d r0=%s final_size=%d attack_rate=%.4f peak_infected=%d peak_day=%d "
           "events=%d" % (r["seed"], r["r0"], r["final_size"], r["attack_rate"],
                          r["peak_infected"], r["peak_day"], r["events"]) for r in runs]
    ctx.write_text(ctx.rel("simulation", "log.txt"), "\n".join(log) + "\n")
    parts = ["R0=%s: %d/%d major, mean attack rate %s (theory %.3f)" %
             (m["r0"], m["major_outbreaks"], m["runs"], m["attack_rate_mean"],
              m["attack_rate_theory"]) for m in metrics["by_r0"]]
    return ctx.report("Attempt %d: %d seeded SIR runs. %s." %
                      (ctx.attempt, len(runs), "; ".join(parts)))


# --------------------------------------------------------------------------
# a tiny PNG writer (zlib + struct) and a plotter

FONT = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001001001", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "=": "000111000111000", " ": "000000000000000", "/": "001001010100100",
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011",
    "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111",
    "K": "101101110101101", "L": "100100100100111", "M": "111111101101101",
    "N": "101111111111101", "O": "111101101101111", "P": "110101110100100",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "Y": "101101010010010",
    "X": "101101010101101", "Z": "111001010100111", ",": "000000000010100", "(": "010100100100010", ")": "010001001001010",
}


class Canvas:
    """An RGB raster; png() encodes it (8-bit truecolour, no interlace)."""

    def __init__(self, width, height, bg=(255, 255, 255)):
        self.width, self.height = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.px[i:i + 3] = bytes(color)

    def fill(self, x0, y0, x1, y1, color):
        x0, y0, x1, y1 = int(x0), int(y0), int(x1), int(y1)
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.set(x, y, color)

    def line(self, x0, y0, x1, y1, color, width=1):
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        half = width // 2
        while True:
            if width == 1:
                self.set(x0, y0, color)
            else:
                self.fill(x0 - half, y0 - half, x0 - half + width - 1, y0 - half + width - 1,
                          color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, color=(0, 0, 0), scale=2):
        for ch in str(s).upper():
            glyph = FONT.get(ch, FONT[" "])
            for k, bit in enumerate(glyph):
                if bit == "1":
                    gx, gy = k % 3, k // 3
                    self.fill(x + gx * scale, y + gy * scale,
                              x + gx * scale + scale - 1, y + gy * scale + scale - 1, color)
            x += 4 * scale

    @staticmethod
    def text_width(s, scale=2):
        return len(str(s)) * 4 * scale - scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.width * 3:(y + 1) * self.width * 3])
                       for y in range(self.height))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        ihdr = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def nice_ticks(lo, hi, count=5):
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    ticks, v = [], first
    while v <= hi + 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def fmt_tick(v):
    return ("%d" % v) if abs(v - round(v)) < 1e-9 else ("%g" % v)


class Plot:
    """Axes on a canvas: data coordinates to pixels, ticks, title, legend."""

    LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50

    def __init__(self, width, height, xr, yr, title, xlabel, ylabel, legend_rows=0):
        self.c = Canvas(width, height)
        self.xr, self.yr = xr, yr
        self.x0, self.x1 = self.LEFT, width - self.RIGHT
        self.y0, self.y1 = height - self.BOTTOM, self.TOP
        grey, black = (225, 225, 225), (0, 0, 0)
        for t in nice_ticks(*xr):
            px = self.px(t, yr[0])[0]
            self.c.line(px, self.y0, px, self.y1, grey)
            label = fmt_tick(t)
            self.c.text(px - Canvas.text_width(label) // 2, self.y0 + 8, label)
        for t in nice_ticks(*yr):
            py = self.px(xr[0], t)[1]
            self.c.line(self.x0, py, self.x1, py, grey)
            label = fmt_tick(t)
            self.c.text(self.x0 - 8 - Canvas.text_width(label), py - 5, label)
        self.c.line(self.x0, self.y0, self.x1, self.y0, black, 2)
        self.c.line(self.x0, self.y0, self.x0, self.y1, black, 2)
        self.c.text((width - Canvas.text_width(title)) // 2, 12, title)
        self.c.text((self.x0 + self.x1 - Canvas.text_width(xlabel)) // 2, height - 20, xlabel)
        self.c.text(6, self.y1 - 22, ylabel)
        # legend: top right, or bottom right when legend_rows says how many
        self.legend_y = self.y0 - 10 - 16 * legend_rows if legend_rows else self.y1 + 6

    def px(self, x, y):
        fx = (x - self.xr[0]) / ((self.xr[1] - self.xr[0]) or 1)
        fy = (y - self.yr[0]) / ((self.yr[1] - self.yr[0]) or 1)
        return (self.x0 + fx * (self.x1 - self.x0), self.y0 - fy * (self.y0 - self.y1))

    def polyline(self, points, color, width=2):
        pts = [self.px(x, y) for x, y in points]
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            self.c.line(ax, ay, bx, by, color, width)

    def marker(self, x, y, color, size=3):
        px, py = self.px(x, y)
        self.c.fill(int(px) - size, int(py) - size, int(px) + size, int(py) + size, color)

    def legend(self, label, color):
        x = self.x1 - 150
        self.c.fill(x, self.legend_y, x + 14, self.legend_y + 9, color)
        self.c.text(x + 20, self.legend_y, label)
        self.legend_y += 16


PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]


def figure_curves(results):
    runs = results["runs"]
    r0s = sorted({r["r0"] for r in runs})
    days = max(len(r["infected"]) for r in runs) - 1
    peak = max(r["peak_infected"] for r in runs)
    plot = Plot(720, 440, (0, max(days, 1)), (0, max(peak * 1.1, 1)),
                "INFECTED PER DAY, EVERY RUN", "DAY", "INFECTED")
    for k, r0 in enumerate(r0s):
        color = PALETTE[k % len(PALETTE)]
        for r in runs:
            if r["r0"] == r0:
                plot.polyline(list(enumerate(r["infected"])), color)
        plot.legend("R0=%s" % r0, color)
    return plot.c.png()


def figure_attack_rate(results):
    runs = results["runs"]
    r0s = sorted({r["r0"] for r in runs})
    lo, hi = 1.0, max(r0s) + 0.5
    plot = Plot(720, 440, (lo, hi), (0, 1), "ATTACK RATE AGAINST R0", "R0", "ATTACK RATE",
                legend_rows=1 + len(r0s))
    curve = [(lo + (hi - lo) * k / 200, final_size(lo + (hi - lo) * k / 200))
             for k in range(201)]
    plot.polyline(curve, (120, 120, 120), 2)
    plot.legend("FINAL SIZE", (120, 120, 120))
    for k, r0 in enumerate(r0s):
        color = PALETTE[k % len(PALETTE)]
        mine = [r for r in runs if r["r0"] == r0]
        for j, r in enumerate(mine):
            jitter = (j - (len(mine) - 1) / 2) * 0.03
            plot.marker(r0 + jitter, r["attack_rate"], color)
        plot.legend("RUNS R0=%s" % r0, color)
    return plot.c.png()


# --------------------------------------------------------------------------
# analysis


def stage_analysis(ctx):
    if ctx.knobs.get("fail"):
        raise StageFailure("attempt %d: the analysis could not be completed "
                           "(agent-config.json analysis.fail is true)" % ctx.attempt)
    results = ctx.read_json(ctx.rel("simulation", "results.json"))
    if not results or results.get("status") != "ok" or not results.get("runs"):
        raise StageFailure("no usable simulation results in %s" %
                           ctx.rel("simulation", "results.json"))
    ctx.write_bytes(ctx.rel("analysis", "figures", "infected_curves.png"),
                    figure_curves(results))
    ctx.write_bytes(ctx.rel("analysis", "figures", "attack_rate.png"),
                    figure_attack_rate(results))
    by_r0 = results["metrics"]["by_r0"]
    findings, h2 = [], True
    for m in by_r0:
        if m["attack_rate_mean"] is None:
            findings.append("R0=%s: no major outbreak in %d runs." % (m["r0"], m["runs"]))
            continue
        diff = abs(m["attack_rate_mean"] - m["attack_rate_theory"])
        h2 = h2 and diff <= 0.05
        findings.append(
            "R0=%s: %d of %d runs were major outbreaks (%.1f expected); their mean attack "
            "rate %.3f (sd %.3f) vs final-size theory %.3f (difference %.3f)." %
            (m["r0"], m["major_outbreaks"], m["runs"], m["major_share_theory"] * m["runs"],
             m["attack_rate_mean"], m["attack_rate_sd"], m["attack_rate_theory"], diff))
    cv = [(m["peak_day_cv"], m["final_size_cv"]) for m in by_r0
          if m["peak_day_cv"] is not None and m["final_size_cv"] is not None]
    h3 = bool(cv) and all(p > f for p, f in cv)
    h1 = all(abs(m["major_share"] - m["major_share_theory"]) <= 0.25 for m in by_r0)
    summary = {
        "findings": findings,
        "supports_hypothesis": h2,
        "hypotheses": {"H1_major_share": h1, "H2_final_size": h2,
                       "H3_peak_day_more_variable": h3},
        "figures": [ctx.rel("analysis", "figures", n)
                    for n in ("infected_curves.png", "attack_rate.png")],
        "metrics": by_r0,
    }
    ctx.write_json(ctx.rel("analysis", "summary.json"), summary)
    rows = ["| R0 | runs | major | mean attack rate (sd) | theory | peak day (mean) |",
            "| --- | --- | --- | --- | --- | --- |"]
    for m in by_r0:
        rows.append("| %s | %d | %d | %s | %.3f | %s |" % (
            m["r0"], m["runs"], m["major_outbreaks"],
            "-" if m["attack_rate_mean"] is None else
            "%.3f (%.3f)" % (m["attack_rate_mean"], m["attack_rate_sd"]),
            m["attack_rate_theory"],
            "-" if m["peak_day_mean"] is None else "%.1f" % m["peak_day_mean"]))
    report = [
        "# Analysis of the simulation", "",
        "Data: %s (%d runs)." % (ctx.rel("simulation", "results.json"), len(results["runs"])),
        "", "## Results", ""] + rows + ["", "## Findings", ""] + \
        ["- " + f for f in findings] + [
        "", "## Figures", "",
        "- figures/infected_curves.png: the infected count per day of every run, by R0.",
        "- figures/attack_rate.png: each run's attack rate against R0, with the "
        "final-size curve z = 1 - exp(-R0 z).", "",
        "## Conclusion", "",
        ("H1 is supported: the share of major outbreaks is within 0.25 of 1 - (1/R0)^I0 "
         "for every R0." if h1 else "H1 is not supported: for some R0 the share of major "
         "outbreaks differs from 1 - (1/R0)^I0 by more than 0.25."),
        ("H2 is supported: for every R0 the mean attack rate of major outbreaks is within "
         "0.05 of the final-size relation." if h2 else
         "H2 is not supported: for some R0 the mean attack rate of major outbreaks differs "
         "from the final-size relation by more than 0.05."),
        ("H3 is supported: the peak day varies more between runs than the final size."
         if h3 else "H3 is not supported by these runs."),
        "These are %d runs per R0; the intervals are wide." % by_r0[0]["runs"], ""]
    ctx.write_text(ctx.rel("analysis", "report.md"), "\n".join(report))
    return ctx.report("Attempt %d: two figures; the final-size hypothesis (H2) is %s. %s" %
                      (ctx.attempt, "supported" if h2 else "not supported", " ".join(findings)))


# --------------------------------------------------------------------------
# paper


def tex_escape(s):
    return (str(s).replace("\\", r"\textbackslash{}").replace("&", r"\&")
            .replace("%", r"\%").replace("_", r"\_").replace("#", r"\#")
            .replace("$", r"\$").replace("{", r"\{").replace("}", r"\}"))


def stage_paper(ctx):
    status = task_field(ctx.task, "analysis") or "unknown"
    analysed = status == "succeeded"
    results = ctx.read_json(ctx.rel("simulation", "results.json"))
    if not results or results.get("status") != "ok":
        raise StageFailure("no usable simulation results to write about")
    bib = None
    try:
        with open(ctx.abs(ctx.rel("literature", "refs.bib")), encoding="utf-8") as f:
            bib = f.read()
    except FileNotFoundError:
        pass
    if not bib or "@" not in bib:
        bib = "\n".join(bib_entry(p) for p in PAPERS)
    keys = re.findall(r"@\w+\{([^,\s]+),", bib)
    ctx.write_text(ctx.rel("paper", "refs.bib"), bib)

    def cite(*want):
        have = [k for k in want if k in keys] or keys[:1]
        return r"\cite{%s}" % ",".join(have)

    by_r0 = results["metrics"]["by_r0"]
    rows = []
    for m in by_r0:
        ar = "--" if m["attack_rate_mean"] is None else \
            "%.3f (%.3f)" % (m["attack_rate_mean"], m["attack_rate_sd"])
        rows.append(r"%s & %d & %d & %s & %.3f \\" % (m["r0"], m["runs"], m["major_outbreaks"],
                                                       ar, m["attack_rate_theory"]))
    summary = ctx.read_json(ctx.rel("analysis", "summary.json"), {}) if analysed else {}
    tex = [
        r"\documentclass[11pt]{article}",
        r"\usepackage[utf8]{inputenc}",
        r"\usepackage{graphicx}",
        r"\title{%s}" % tex_escape(ctx.topic),
        r"\author{The research pipeline (scripted agent)}",
        r"\date{}",
        r"\begin{document}",
        r"\maketitle",
        r"\begin{abstract}",
        "We simulate a stochastic SIR epidemic in a population of %d with Gillespie's "
        "direct method %s, %d seeded runs over %d values of the basic reproduction number, "
        "and compare the share of major outbreaks and their final size with the "
        "branching-process approximation %s and the final-size relation %s." % (
            results["metrics"]["population"], cite("gillespie1977"), len(results["runs"]),
            len(by_r0), cite("allen2008", "britton2010"), cite("kermack1927", "ma2006")),
        r"\end{abstract}",
        r"\section{Method}",
        "Transmission rate $\\beta = R_0\\gamma$, recovery rate $\\gamma = 0.1$ per day, "
        "five initial cases; each run is reproduced by its seed (see "
        r"\texttt{simulation/config.json}). Thresholds and $R_0$ follow %s." % cite(
            "hethcote2000", "diekmann1990"),
        r"\section{Results}",
        r"\begin{table}[h]",
        r"\centering",
        r"\begin{tabular}{rrrrr}",
        r"$R_0$ & runs & major & attack rate (sd) & theory \\",
        r"\hline",
    ] + rows + [
        r"\end{tabular}",
        r"\caption{Simulated attack rate of major outbreaks against the final-size "
        r"relation $z = 1 - e^{-R_0 z}$.}",
        r"\end{table}",
    ]
    if analysed:
        for fig in summary.get("figures") or []:
            name = fig.rsplit("/", 1)[-1]
            tex += [r"\begin{figure}[h]", r"\centering",
                    r"\includegraphics[width=0.8\linewidth]{../analysis/figures/%s}" % name,
                    r"\caption{%s}" % tex_escape(name), r"\end{figure}"]
        tex += ["The analysis finds: " + " ".join(tex_escape(f)
                                                  for f in summary.get("findings") or [])]
    else:
        tex += ["The analysis stage did not pass (its status: %s), so the table reports the "
                "raw simulation results of \\texttt{simulation/results.json} without the "
                "analysis's figures or tests; note the analysis stage did not pass before "
                "relying on them." % tex_escape(status)]
    tex += [r"\section{Discussion}",
            "Contact heterogeneity %s and individual variation %s would change both "
            "quantities; the homogeneous model is a baseline." % (
                cite("pastorsatorras2001"), cite("lloydsmith2005")),
            r"\bibliographystyle{plain}",
            r"\bibliography{refs}",
            r"\end{document}", ""]
    ctx.write_text(ctx.rel("paper", "main.tex"), "\n".join(tex))
    return ctx.report("Attempt %d: main.tex with abstract, results table and %d references; "
                      "the analysis %s." % (ctx.attempt, len(keys),
                                            "figures are included" if analysed else
                                            "did not pass (%s), raw results reported" % status),
                      [] if analysed else ["the analysis stage did not pass"])


HANDLERS = {"plan": stage_plan, "literature": stage_literature,
            "simulation": stage_simulation, "analysis": stage_analysis,
            "paper": stage_paper}


def hang():
    while True:  # never answers: the driver kills the process group at the lease
        time.sleep(3600)


def main():
    started = time.monotonic()
    try:
        entry = json.load(sys.stdin)
    except ValueError as e:
        print(json.dumps({"failure": "the ready entry is not JSON: %s" % e}))
        return 0
    ws = os.getcwd()
    config = read_json(os.path.join(ws, "agent-config.json"), {}) or {}
    path = log_path(ws)
    entry_id = entry.get("id", "")
    first = not dispatched_before(path, entry_id)
    log_dispatch(path, entry)
    try:
        ctx = Ctx(entry, ws, config)
        if ctx.stage not in HANDLERS:
            raise StageFailure("unknown stage %r (expected one of %s)" %
                               (ctx.stage, ", ".join(STAGES)))
        if ctx.knobs.get("hang_first") and first:
            hang()
        output = HANDLERS[ctx.stage](ctx)
    except StageFailure as e:
        print(json.dumps({"failure": str(e)}))
        return 0
    except Exception as e:  # a bug in this script: say so instead of printing nothing
        print(json.dumps({"failure": "research-agent.py crashed in stage %r: %s: %s" %
                          (entry_id, type(e).__name__, e)}))
        raise
    ms = int((time.monotonic() - started) * 1000)
    print(json.dumps({"output": output, "usage": {"tokens": 0, "usd": 0, "ms": ms}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
