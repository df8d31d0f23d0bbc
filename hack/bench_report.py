#!/usr/bin/env python3
"""make bench: every bench, several runs each, one table against the goals.

  bench_report.py run [--runs N] [--only api,engine,...] [--log-dir DIR]
      runs `make -s bench-<name>` N times for each selected bench (N: --runs, else
      BENCH_RUNS, else 3), from the repository's root, copying each run's output
      (stdout and stderr) to the terminal and to DIR/<name>-<i>.log (DIR defaults to
      .flowline/bench-logs/<UTC timestamp>), then prints the report.
  bench_report.py report LOGFILE...
      prints the report of logs written before (a log's bench is its file name's
      prefix: <bench>-<i>.log).

The report is one Markdown table: bench | figure | Flowline | reference | ratio | goal |
met. A cell holds each run's figure, in the order of the runs, joined by "; "; "—"
where a run printed no such line (a bench that failed midway, or parts left out).
"met" is "yes" when the goal was met in every run, "no (k of N)" when it was met in k
of the N runs (a run without the figure counts as not met), "n/a" when no run printed
the figure.

Each row is one entry of ROWS. Its figures are found with templates written like the
bench's own println!/echo line: literal text, "{}" for the number the row takes, "{_}"
for any other number and "..." for anything else on the line (see `template`). The
goals are those of docs/benchmarks.md, "## Goals", and of the performance issue.
Benchmarks are not tests: a missed goal does not change the exit status; a bench run
that failed does (1). Python 3 standard library only.
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHES = ["api", "engine", "delivery", "scale", "shards"]
DASH = "—"
# What `run` appends to every log: the wall time and exit status of the make run.
TRAILER = "[bench_report] make -s bench-{name}: {seconds:.1f} s, exit status {status}"

# A number as the benches print it: Rust's {} and {:.N} of integers and floats
# (negative, inf, NaN included), awk's %.Nf, and thousands separated by commas.
NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?inf|NaN"


def template(text):
    """A regular expression from a line as the bench prints it: "{}" is the number
    to take (the one capture group), "{_}" any other number, "..." anything on the
    same line, a run of spaces any run of spaces; the rest is literal."""
    out = []
    for token in re.split(r"(\{\}|\{_\}|\.\.\.|\s+)", text):
        if token == "{}":
            out.append(f"({NUMBER})")
        elif token == "{_}":
            out.append(f"(?:{NUMBER})")
        elif token == "...":
            out.append(r"[^\n]*?")
        elif token and token.isspace():
            out.append(r"[ \t]+")
        else:
            out.append(re.escape(token))
    return "".join(out)


def cell(row, column):
    """The number at the start of the `column`-th cell (1: the first after the row's
    name) of the Markdown table row named `row` (a template), as hack/bench-api.sh and
    benches/scale.rs print them."""
    return re.compile(r"^\|[ \t]*" + template(row) + r"[ \t]*\|" + r"[^|\n]*\|" * (column - 1)
                      + rf"[ \t]*({NUMBER})[^|\n]*\|", re.MULTILINE)


class Num(float):
    """A figure: its value, and its text as the bench printed it."""

    def __new__(cls, value, text=None):
        number = super().__new__(cls, value)
        number.text = text
        return number


def parse_number(text):
    try:
        return Num(float(text.replace(",", "")), text)
    except ValueError:
        return None


COMBINE = {
    "first": lambda v: v[0],
    "last": lambda v: v[-1],
    "max": max,
    "min": min,
    "sum": lambda v: Num(sum(v)),
}


class Extractor:
    """One figure of a log: the number "{}" stands for in `text` (a template, or a
    compiled expression with one group), from the first line it matches, or
    `combine` ("max", "sum", ...) of every line it matches."""

    def __init__(self, text, combine="first"):
        self.regex = text if isinstance(text, re.Pattern) else re.compile(template(text), re.MULTILINE)
        if combine not in COMBINE:
            raise ValueError(f"combine: {combine!r} is none of {', '.join(COMBINE)}")
        self.combine = COMBINE[combine]

    def __call__(self, log):
        found = [parse_number(m) for m in self.regex.findall(log)]
        found = [v for v in found if v is not None]
        return self.combine(found) if found else None


def ex(spec):
    if spec is None or isinstance(spec, Extractor):
        return spec
    if isinstance(spec, tuple):
        return Extractor(*spec)
    return Extractor(spec)


# Every row of the table. Keys:
#   bench, figure     the table's first two cells
#   part              the engine's part, "(x)": its lines are looked for only between
#                     the "(x) ..." heading and the next heading
#   value, reference  templates (or (template, combine)) of Flowline's figure and the
#                     reference's; ref_label names the reference in its cell
#   ratio             a template of the ratio the bench prints, or computed:
#                     "value/reference", "reference/value", "value-reference";
#                     ratio_unit follows each ratio ("×" unless set)
#   goal              (on, op, threshold): on "ratio" or "value", op "<=" or ">=",
#                     threshold a number or "reference"; goal_text as shown
#   note              printed under the table
ROWS = [
    # hack/bench-api.sh: `| read | /v1 req/s | /v1 p50 ms | /v1 p99 ms | apiserver req/s |
    # apiserver p50 ms | apiserver p99 ms | req/s ratio | p99 ratio | bare axum req/s |
    # bare axum p99 ms | /v1 vs bare req/s | rounds |`, the median round of three.
    dict(bench="api", figure="single GET, req/s", value=cell("one workflow", 1),
         ref_label="API server", reference=cell("one workflow", 4),
         ratio=cell("one workflow", 7), goal=("ratio", ">=", 20), goal_text="≥ 20×"),
    dict(bench="api", figure="single GET, p99 ms (ratio: how many times lower)",
         value=cell("one workflow", 3), ref_label="API server",
         reference=cell("one workflow", 6), ratio=cell("one workflow", 8),
         goal=("ratio", ">=", 10), goal_text="≥ 10× lower"),
    dict(bench="api", figure="single GET, req/s vs a bare axum handler",
         value=cell("one workflow", 1), ref_label="bare axum",
         reference=cell("one workflow", 9), ratio=cell("one workflow", 11),
         goal=("ratio", ">=", 0.65), goal_text="≥ 0.65× (no regression)",
         note="api, single GET vs bare axum: docs/benchmarks.md's goal is 0.7×; the "
              "issue asks 0.65× (no regression from the latest figures), which this "
              "row checks."),
    dict(bench="api", figure="list of 100, req/s", value=cell("list of 100", 1),
         ref_label="API server", reference=cell("list of 100", 4),
         ratio=cell("list of 100", 7), goal=("ratio", ">=", 10), goal_text="≥ 10×"),
    dict(bench="api", figure="list of 100, req/s vs a bare axum handler",
         value=cell("list of 100", 1), ref_label="bare axum",
         reference=cell("list of 100", 9), ratio=cell("list of 100", 11),
         goal=("ratio", ">=", 0.3), goal_text="≥ 0.3×"),
    # benches/engine.rs
    dict(bench="engine", part="a", figure="(a) 40 sequential 10 ms steps, s",
         value="engine, create → finished: {} s; bare loop: {_} s",
         ref_label="bare loop", reference="bare loop: {} s",
         ratio="bare loop: {_} s; ratio {}x", goal=("value", "<=", 0.6),
         goal_text="≤ 0.6 s"),
    dict(bench="engine", part="b", figure="(b) 1,000 runs of 3 no-op steps, runs/s",
         value="engine: {} runs/s", ref_label="raw create + small status patch",
         reference="raw create + small status patch: {} runs/s",
         ratio="raw create + small status patch: ... ratio {}x",
         goal=("ratio", ">=", 0.75), goal_text="≥ 0.75×"),
    dict(bench="engine", part="b",
         figure="(b) runs/s vs the contract's floor (create + the engine's own final status)",
         value="engine: {} runs/s", ref_label="create + final status",
         reference="create + the engine's own final status ... no watch: {} runs/s",
         ratio="create + the engine's own final status ... ratio {}x",
         goal=("ratio", ">=", 0.95), goal_text="≥ 0.95×"),
    dict(bench="engine", part="b", figure="(b) API-server writes per run",
         value="engine: {_} runs/s, {} API writes per run",
         ref_label="raw create + small status patch",
         reference="raw create + small status patch: {_} runs/s, {} writes per run",
         goal=("value", "<=", 2), goal_text="≤ 2 (the create and one status write)"),
    dict(bench="engine", part="c",
         figure="(c) one-step container run on the real node, create → done, median of 10, ms "
                "(ratio: the overhead)",
         value="run: {} ms", ref_label="bare Job's pod showing the container exited",
         reference="its pod showing the container exited: {} ms",
         ratio="against the Job complete, {} ms against the container exited",
         ratio_unit=" ms", goal=("ratio", "<=", 250), goal_text="overhead ≤ 250 ms",
         note="engine (c): the overhead is taken against the bare Job's pod showing its "
              "container exited, as in docs/benchmarks.md's latest figures; the log also "
              "has it against the Job marked complete."),
    dict(bench="engine", part="d", figure="(d) `limit: 4` queue drain, runs/s",
         value="limit 4, all created at once: {} runs/s", ref_label="the same runs without a limit",
         reference="the same runs without a limit: {} runs/s",
         ratio="the same runs without a limit: {_} runs/s; ratio {}x",
         goal=("ratio", ">=", 0.9), goal_text="≥ 0.9×"),
    dict(bench="engine", part="d", figure="(d) `limit: 4` queue drain vs 4 clients, runs/s",
         value="limit 4, all created at once: {} runs/s", ref_label="4 clients",
         reference="4 clients, each waiting for its run, no limit: {} runs/s",
         ratio="the queue {}x of them", goal=("ratio", ">=", 0.9),
         goal_text="≥ 0.9× (±10 %; faster met)",
         note="engine (d) vs 4 clients: docs/benchmarks.md asks a drain within ±10 % of "
              "the clients' rate and reads a faster drain as met; this row checks the "
              "lower bound."),
    dict(bench="engine", part="e", figure="(e) 99 parallel 10 ms steps, s",
         value="wide: {} s", ref_label="one step", reference="one step: {} s",
         ratio="one step: {_} s; ratio {}x", goal=("ratio", "<=", 3), goal_text="≤ 3×"),
    dict(bench="engine", part="f", figure="(f) writes to Runs while 50 runs wait 10 s",
         value="writes to Runs while they waited: {}", goal=("value", "<=", 0),
         goal_text="0"),
    dict(bench="engine", part="g", figure="(g) idle CPU, 3,000 queued runs, % of a core",
         value="3,000 queued: {} %", ref_label="1,000 queued",
         reference="1,000 queued: {} % of a core", ratio="3,000 queued: {_} %; ratio {}x",
         goal=("ratio", "<=", 5), goal_text="≤ 5×"),
    dict(bench="engine", part="h",
         figure="(h) a parent calling 10 children in sequence, median create → finished, s",
         value="median create → finished: nested {} s", ref_label="one run of the same 10 steps",
         reference="median create → finished: nested {_} s, flat {} s",
         ratio="flat {_} s; ratio {}x", goal=("ratio", "<=", 1.5), goal_text="≤ 1.5×"),
    dict(bench="engine", part="h", figure="(h) API-server writes each child adds",
         value="each child adds {}", goal=("value", "<=", 2),
         goal_text="≤ 2 (its create and final status)"),
    dict(bench="engine", part="i",
         figure="(i) one event to 100 subscribed workflows, event create → 100 runs finished, s",
         value="one event, 100 workflows: {_} runs; fan-out {} s",
         ref_label="the same runs created directly",
         reference="one event, 100 workflows: ... direct {} s",
         ratio="one event, 100 workflows: ... ratio {}x", goal=("ratio", ">=", 0.9),
         goal_text="≥ 0.9×"),
    dict(bench="engine", part="i", figure="(i) 1,000 events to 10 workflows (10,000 runs), s",
         value="1,000 events, 10 workflows: {_} runs; fan-out {} s",
         ref_label="the same runs created directly",
         reference="1,000 events, 10 workflows: ... direct {} s",
         ratio="1,000 events, 10 workflows: ... ratio {}x", goal=("ratio", ">=", 0.9),
         goal_text="≥ 0.9×"),
    dict(bench="engine", part="j",
         figure="(j) 1,000 runs created at once at `rate_limit` 100 a second, starts/s after the first window",
         value="runs at limit {_} per second: {} starts/s", ref_label="the limit",
         reference="runs at limit {} per second", ratio="starts/s after the first window, {}x of the limit",
         goal=("ratio", ">=", 0.95), goal_text="≥ 0.95×"),
    dict(bench="engine", part="j", figure="(j) most starts in one second",
         value="most starts in one second: {}", ref_label="the limit",
         reference="(must be at most {})", goal=("value", "<=", "reference"),
         goal_text="≤ the limit"),
    dict(bench="engine", part="k",
         figure="(k) idle CPU, 10,000 runs waiting for a rate limit's window, % of a core",
         value="the controller's CPU while nothing moves: {} % of a core",
         ref_label="the same runs finished", reference="against {} % holding the same runs finished",
         ratio="holding the same runs finished: {}x", goal=("ratio", "<=", 5), goal_text="≤ 5×"),
    dict(bench="engine", part="l", figure="(l) POST a run → its step started, p50 ms",
         value="-> its step started: p50 {} ms", ref_label="a Run created and seen through a watch",
         reference="a Run created and seen through a watch: p50 {} ms",
         ratio="step started {}x p50", goal=("ratio", "<=", 1.5), goal_text="≤ 1.5×"),
    dict(bench="engine", part="l", figure="(l) POST a run → its step started, p99 ms",
         value="-> its step started: p50 {_} ms, p99 {} ms",
         ref_label="a Run created and seen through a watch",
         reference="a Run created and seen through a watch: p50 {_} ms, p99 {} ms",
         ratio="step started {_}x p50, {}x p99", goal=("ratio", "<=", 3), goal_text="≤ 3×"),
    dict(bench="engine", part="l", figure="(l) POST a run → the run seen finished, p50 ms",
         value="-> the run seen finished: p50 {} ms", ref_label="a Run created and seen through a watch",
         reference="a Run created and seen through a watch: p50 {} ms",
         ratio="finished {}x p50", goal=("ratio", "<=", 1.5), goal_text="≤ 1.5×"),
    dict(bench="engine", part="l", figure="(l) POST a run → the run seen finished, p99 ms",
         value="-> the run seen finished: p50 {_} ms, p99 {} ms",
         ref_label="a Run created and seen through a watch",
         reference="a Run created and seen through a watch: p50 {_} ms, p99 {} ms",
         ratio="finished {_}x p50, {}x p99", goal=("ratio", "<=", 3), goal_text="≤ 3×"),
    # benches/delivery.rs: each reference runs before and after the worker; the
    # better run counts, as the bench's own ratio lines do.
    dict(bench="delivery", figure="deliveries/s vs a signed hyper client", value="flowline worker: {} deliveries/s",
         ref_label="signed hyper (better of before and after)",
         reference=("raw hyper client, signed (...): {} req/s", "max"),
         ratio="ratio: {}x the signed raw rate", goal=("ratio", ">=", 0.9),
         goal_text="≥ 0.9×"),
    dict(bench="delivery", figure="deliveries/s", value="flowline worker: {} deliveries/s",
         goal=("value", ">=", 5000), goal_text="≥ 5,000/s"),
    dict(bench="delivery", figure="API-server writes per 1,000 deliveries",
         value="API writes: {_} during the drain = {} per 1,000 deliveries",
         goal=("value", "<=", 10), goal_text="≤ 10"),
    # benches/scale.rs
    dict(bench="scale", figure="API memory for its caches (RSS less an empty API's), MB",
         value=cell("API memory for the cache (RSS less an empty API's {_} MB) vs JSON bytes", 1),
         ref_label="objects' JSON",
         reference=cell("API memory for the cache (RSS less an empty API's {_} MB) vs JSON bytes", 2),
         ratio=cell("API memory for the cache (RSS less an empty API's {_} MB) vs JSON bytes", 3),
         goal=("ratio", "<=", 1.5), goal_text="≤ 1.5×"),
    dict(bench="scale", figure="API cold start to /readyz, s",
         value=cell("API cold start to /readyz vs raw paginated LIST", 1),
         ref_label="raw paginated LIST",
         reference=cell("API cold start to /readyz vs raw paginated LIST", 2),
         ratio=cell("API cold start to /readyz vs raw paginated LIST", 3),
         goal=("ratio", "<=", 1.5), goal_text="≤ 1.5×"),
    dict(bench="scale", figure="the whole bench (`make -s bench-scale`, builds included), s",
         value="[bench_report] make -s bench-scale: {} s", goal=("value", "<=", 1200),
         goal_text="≤ 20 min",
         note="scale, the whole bench: bench-scale does not print it; `run` times each "
              "`make -s bench-scale` (its release builds included) and appends the time "
              "to the log. Its goals are for 10,000 workflows and 100,000 runs: see each "
              "log's sizes in the list above the table."),
    # benches/shards.rs
    dict(bench="shards", figure="runs executed twice, 1, 2 and 3 replicas together",
         value=("{_} replica(s): ... runs executed twice: {} (goal 0)", "sum"),
         goal=("value", "<=", 0), goal_text="0"),
    dict(bench="shards", figure="a killed replica's shard held again, s",
         value="its shard held again after {} s", goal=("value", "<=", 15),
         goal_text="≤ 15 s"),
]

# A line of each bench's log shown with it in the list of logs (its sizes).
HEADLINES = {
    "delivery": re.compile(r"^bench-delivery: .*$", re.MULTILINE),
    "scale": re.compile(r"^bench-scale: .*$", re.MULTILINE),
    "shards": re.compile(r"^P5: .*$", re.MULTILINE),
}
TRAILER_RE = re.compile(
    r"^\[bench_report\] make -s bench-[a-z]+: (?P<seconds>[\d.]+) s, exit status (?P<status>-?\d+)$",
    re.MULTILINE)
PART_HEADING = re.compile(r"^\(([a-z])\) ", re.MULTILINE)


KEYS = {"bench", "part", "figure", "value", "reference", "ref_label", "ratio", "ratio_unit",
        "goal", "goal_text", "note"}


class Row:
    """One entry of ROWS, its templates compiled."""

    def __init__(self, spec):
        unknown = set(spec) - KEYS
        if unknown or spec.get("bench") not in BENCHES:
            raise ValueError(f"row {spec.get('figure')!r}: unknown keys {sorted(unknown)} "
                             f"or bench {spec.get('bench')!r}")
        goal = spec.get("goal")
        if goal and (goal[0] not in ("ratio", "value") or goal[1] not in ("<=", ">=")
                     or (goal[0] == "ratio" and not spec.get("ratio"))):
            raise ValueError(f"row {spec['figure']!r}: goal {goal!r}")
        self.bench = spec["bench"]
        self.part = spec.get("part")
        self.figure = spec["figure"]
        self.value = ex(spec["value"])
        self.reference = ex(spec.get("reference"))
        self.ref_label = spec.get("ref_label", "")
        ratio = spec.get("ratio")
        self.ratio = ratio if ratio in ("value/reference", "reference/value",
                                        "value-reference", None) else ex(ratio)
        self.ratio_unit = spec.get("ratio_unit", "×")
        self.goal = spec.get("goal")
        self.goal_text = spec.get("goal_text", "")
        self.note = spec.get("note")


TABLE_ROWS = [Row(spec) for spec in ROWS]


def parts(log):
    """The log's engine parts: the text from each "(x) ..." heading to the next."""
    found = {}
    headings = list(PART_HEADING.finditer(log))
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(log)
        found.setdefault(heading.group(1), log[heading.start():end])
    return found


def measure(row, log):
    """(value, reference, ratio, met) of `row` in one log; None where it has none
    (met is None when its operand is missing)."""
    text = parts(log).get(row.part, "") if row.part else log
    value = row.value(text)
    reference = row.reference(text) if row.reference else None
    if row.ratio is None:
        ratio = None
    elif isinstance(row.ratio, str):
        ratio = computed_ratio(row.ratio, value, reference)
    else:
        ratio = row.ratio(text)
    met = None
    if row.goal:
        on, op, threshold = row.goal
        operand = ratio if on == "ratio" else value
        if threshold == "reference":
            threshold = reference
        if operand is not None and threshold is not None:
            met = operand <= threshold if op == "<=" else operand >= threshold
    return value, reference, ratio, met


def computed_ratio(how, value, reference):
    if value is None or reference is None:
        return None
    if how == "value-reference":
        return value - reference
    top, bottom = (value, reference) if how == "value/reference" else (reference, value)
    return top / bottom if bottom else None


def fmt(number):
    """A figure as the bench printed it; one the report computed with two decimals
    (or none from 100 on)."""
    if number is None:
        return DASH
    if getattr(number, "text", None):
        return number.text
    if number != number or abs(number) == float("inf"):
        return str(number)
    if number == int(number):
        return str(int(number))
    return f"{number:.0f}" if abs(number) >= 100 else f"{number:.2f}"


def met_cell(results):
    """"yes" when met in every run, "no (k of N)" when met in k of the N runs (a run
    without the figure counts as not met), "n/a" when no run had the figure."""
    if all(r is None for r in results):
        return "n/a"
    k = sum(1 for r in results if r)
    return "yes" if k == len(results) else f"no ({k} of {len(results)})"


def bench_of(path):
    """(bench, run number) from a log's file name, <bench>-<i>.log; None if not one."""
    m = re.fullmatch(r"([a-z]+)-(\d+)\.log", os.path.basename(path))
    if not m or m.group(1) not in BENCHES:
        return None
    return m.group(1), int(m.group(2))


def read_log(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        print(f"bench_report: {path}: {e.strerror}", file=sys.stderr)
        return ""


def table(logs, rows=None):
    """The report's Markdown table (a list of lines) and its notes, for `logs`: a
    dict bench → the text of each of its runs, in order. Rows of benches without a
    log are left out."""
    rows = TABLE_ROWS if rows is None else rows
    out = ["| bench | figure | Flowline | reference | ratio | goal | met |",
           "|---|---|---|---|---|---|---|"]
    notes = []
    for row in rows:
        runs = logs.get(row.bench)
        if not runs:
            continue
        measured = [measure(row, log) for log in runs]
        values = "; ".join(fmt(m[0]) for m in measured)
        reference = ""
        if row.reference:
            reference = "; ".join(fmt(m[1]) for m in measured)
            if row.ref_label:
                reference = f"{row.ref_label}: {reference}"
        ratio = ""
        if row.ratio:
            ratio = "; ".join(
                DASH if m[2] is None else fmt(m[2]) + row.ratio_unit for m in measured)
        met = met_cell([m[3] for m in measured]) if row.goal else ""
        cells = [row.bench, row.figure, values, reference, ratio, row.goal_text, met]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        if row.note:
            notes.append(row.note)
    return out, notes


def machine():
    """The date (UTC), and this machine's `uname -m`, CPUs and memory, one line."""
    memory = "unknown"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except (OSError, ValueError, IndexError):
        pass
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"Date: {now}. Machine: {os.uname().machine} (uname -m), {os.cpu_count()} CPUs, "
            f"{memory} memory (/proc/meminfo MemTotal).")


def commit():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + (" with uncommitted changes" if dirty else "")


def report(paths, out=None):
    """Prints the report of the logs at `paths` (to `out`, else stdout); returns the
    number of logs of a failed run (a non-zero exit status in their trailer)."""
    out = out or sys.stdout
    found = []
    for path in paths:
        name = bench_of(path)
        if name is None:
            print(f"bench_report: {path}: not a <bench>-<i>.log of {', '.join(BENCHES)}; left out",
                  file=sys.stderr)
            continue
        found.append((BENCHES.index(name[0]), name[1], name[0], path))
    found.sort()
    logs, failed = {}, 0
    listing = []
    for _, _, bench, path in found:
        text = read_log(path)
        logs.setdefault(bench, []).append(text)
        about = []
        try:
            written = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
            about.append(written.strftime("written %Y-%m-%d %H:%M UTC"))
        except OSError:
            pass
        trailer = TRAILER_RE.search(text)
        if trailer:
            status = int(trailer.group("status"))
            failed += status != 0
            about.append(f"exit status {status}" + (" (FAILED)" if status else "")
                         + f", {float(trailer.group('seconds')):.0f} s")
        headline = HEADLINES.get(bench)
        if headline and headline.search(text):
            about.append(headline.search(text).group(0).strip())
        shown = os.path.relpath(path)
        shown = path if shown.startswith("..") else shown
        listing.append(f"- {shown}" + (f": {'; '.join(about)}" if about else ""))
    lines, notes = table(logs)
    print("## Flowline benchmarks", file=out)
    print(file=out)
    print(machine(), file=out)
    revision = commit()
    if revision:
        print(f"Commit: {revision}.", file=out)
    counts = ", ".join(f"{b} {len(logs[b])}" for b in BENCHES if b in logs)
    print(f"Runs: {counts or 'none'}; each cell holds every run's figure, in order, "
          f"joined by \"; \" ({DASH}: that run printed no such line).", file=out)
    print(file=out)
    print("Logs:", file=out)
    print(file=out)
    for line in listing or ["- none"]:
        print(line, file=out)
    print(file=out)
    for line in lines:
        print(line, file=out)
    print(file=out)
    print("met: yes, the goal met in every run; no (k of N), met in k of the N runs (a run "
          "without the figure counts as not met); n/a, no run printed the figure.", file=out)
    for note in notes:
        print(f"- {note}", file=out)
    return failed


def run(args):
    selected = BENCHES if not args.only else [b.strip() for b in args.only.split(",") if b.strip()]
    selected = list(dict.fromkeys(selected))
    unknown = [b for b in selected if b not in BENCHES]
    if unknown or not selected:
        sys.exit(f"bench_report: unknown bench {', '.join(unknown)} (known: {', '.join(BENCHES)})")
    if args.runs is None:
        try:
            args.runs = int(os.environ.get("BENCH_RUNS") or 3)
        except ValueError:
            sys.exit(f"bench_report: BENCH_RUNS={os.environ['BENCH_RUNS']!r} is not a number")
    if args.runs < 1:
        sys.exit("bench_report: --runs must be at least 1")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    log_dir = args.log_dir or os.path.join(REPO, ".flowline", "bench-logs", stamp)
    os.makedirs(log_dir, exist_ok=True)
    paths = []
    try:
        for name in selected:
            for i in range(1, args.runs + 1):
                path = os.path.join(log_dir, f"{name}-{i}.log")
                paths.append(path)
                print(f"[bench_report] make -s bench-{name}, run {i} of {args.runs} → {path}",
                      file=sys.stderr, flush=True)
                one_run(name, path)
    except KeyboardInterrupt:
        print("[bench_report] interrupted: the report of the runs so far", file=sys.stderr)
    print(flush=True)
    return 1 if report([p for p in paths if os.path.exists(p)]) else 0


def one_run(name, path):
    """`make -s bench-<name>` from the repository's root, its stdout and stderr copied
    to the terminal and to `path`, followed by the trailer (time, exit status; a
    negative status is the signal that ended it)."""
    started = time.monotonic()
    status = 127
    with open(path, "wb") as log:
        try:
            child = subprocess.Popen(["make", "-s", f"bench-{name}"], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as e:
            log.write(f"bench_report: cannot run make: {e}\n".encode())
            child = None
        try:
            if child:
                for line in iter(child.stdout.readline, b""):
                    log.write(line)
                    log.flush()
                    sys.stdout.buffer.write(line)
                    sys.stdout.buffer.flush()
        finally:
            if child:
                # On Ctrl-C the child, in our process group, had the interrupt too.
                status = child.wait()
            trailer = TRAILER.format(name=name, seconds=time.monotonic() - started, status=status)
            log.write((trailer + "\n").encode())
    return status


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="run the benches, then print the report")
    running.add_argument("--runs", type=int,
                         help="runs of each bench (default: BENCH_RUNS, else 3)")
    running.add_argument("--only", help="a comma-separated list of " + ",".join(BENCHES))
    running.add_argument("--log-dir", help="where the logs go (default: "
                         ".flowline/bench-logs/<UTC timestamp>)")
    reporting = commands.add_parser("report", help="print the report of existing logs")
    reporting.add_argument("logs", nargs="+", metavar="LOGFILE")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args)
    report(args.logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
