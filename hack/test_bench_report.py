"""Unit tests of hack/bench_report.py's parser and table, on synthetic logs written
with the very formats the benches print (benches/*.rs, hack/bench-api.sh) and made-up
numbers. Run: python3 -m unittest hack/test_bench_report.py"""

import io
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402

DASH = bench_report.DASH


# --- the benches' output, as their println!/echo/printf lines write it -------------

def api_log(rps=64613, p99=0.58, k8s_rps=2377, k8s_p99=21.09, bare=98975,
            list_rps=9095, list_k8s=324, list_bare=72599):
    """hack/bench-api.sh: the header echo lines, then awk's printf rows."""
    def row(name, a_rps, a_p50, a_p99, d_rps, d_p50, d_p99, b_rps, b_p99):
        return ("| %s | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %.1fx | %.1fx | %.0f | %.2f | %.2fx | %s |"
                % (name, a_rps, a_p50, a_p99, d_rps, d_p50, d_p99, a_rps / d_rps, d_p99 / a_p99,
                   b_rps, b_p99, a_rps / b_rps, "0.64x, 0.65x, 0.66x"))
    return "\n".join([
        "wrk, 1 thread, 16 connections, 8s per measurement, 100 workflows;",
        "/v1 and bare axum warmed up, then measured in 3 alternating rounds: the row shows the round",
        "with the median ratio, and the last column every round's ratio (this machine's noise)",
        "",
        "| read | /v1 req/s | /v1 p50 ms | /v1 p99 ms | apiserver req/s | apiserver p50 ms | apiserver p99 ms "
        "| req/s ratio | p99 ratio | bare axum req/s | bare axum p99 ms | /v1 vs bare req/s | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        row("one workflow", rps, 0.21, p99, k8s_rps, 5.0, k8s_p99, bare, 0.4),
        row("list of 100", list_rps, 1.5, 3.0, list_k8s, 40.0, 90.0, list_bare, 1.0),
        "",
        "API replicas, one workflow: two wrk processes (1 thread, 8 connections each), client-side split",
        "",
        "| API processes | reads/s | vs N=1 |",
        "|---|---|---|",
        "| 1 | 54302 | 1.00x |",
        "| 2 | 72301 | 1.33x |",
        "",
    ])


def engine_a(engine=0.511, bare=0.444):
    return ("(a) 40 sequential inline steps of 10 ms\n"
            f"    engine, create → finished: {engine:.3f} s; bare loop: {bare:.3f} s; ratio {engine / bare:.2f}x\n")


def engine_b(engine=157.0, raw=243.0, floor=180.0):
    return ("(b) 1000 runs of 3 no-op inline steps, 32 at a time\n"
            f"    engine: {engine:.0f} runs/s, 2.00 API writes per run (the create included)\n"
            f"    raw create + small status patch: {raw:.0f} runs/s, 2.00 writes per run; "
            f"ratio {engine / raw:.2f}x (goal: at least 0.75x)\n"
            f"    create + the engine's own final status (1843 bytes), no read, no watch: "
            f"{floor:.0f} runs/s, 2.00 writes per run; ratio {engine / floor:.2f}x (goal: at least 0.95x)\n")


def engine_c(bare=3082.0, exited=1046.0, run=926.0):
    return ("(c) one-step container run vs a bare Job of the same container on the real node, "
            "create → done (median of 10)\n"
            f"    bare Job complete: {bare:.0f} ms; its pod showing the container exited: {exited:.0f} ms; "
            f"run: {run:.0f} ms\n"
            f"    overhead per step: {run - bare:.0f} ms against the Job complete, "
            f"{run - exited:.0f} ms against the container exited\n")


def engine_d(queue=91.0, free=100.0, clients=72.0):
    return ("(d) 1000 runs of 3 no-op inline steps, at most 4 at a time\n"
            f"    limit 4, all created at once: {queue:.0f} runs/s; the same runs without a limit: "
            f"{free:.0f} runs/s; ratio {queue / free:.2f}x (goal: at least 0.9x); most running at once "
            "under the limit: 4\n"
            f"    4 clients, each waiting for its run, no limit: {clients:.0f} runs/s; the queue "
            f"{queue / clients:.2f}x of them\n"
            "    API writes per run (the create included): limit 4 3.00; without a limit 2.00; 4 clients 2.00\n")


def engine_efgh():
    return ("(e) 99 parallel 10 ms steps (parallelism 100) vs one, after a no-op root, median of 5\n"
            "    wide: 0.113 s; one step: 0.041 s; ratio 2.76x (goal: within 3x)\n"
            "(f) 50 runs parked on an approval for 10 s\n"
            "    writes to Runs while they waited: 0 (goal 0); approve all → all finished: 0.798 s\n"
            "(g) runs queued behind a parked run, the controller's CPU while nothing moves\n"
            "    1,000 queued: 0.4 % of a core; 3,000 queued: 1.4 %; ratio 3.00x (goal: at most 5x; "
            "linear growth is 3x, the square 9x)\n"
            "    CPU of the bench process while they were created and recorded queued (creates "
            "included): 0.69 s for 1,000, 2.31 s for 3,000 (3.35x)\n"
            "(h) a parent calling 10 children in sequence vs one run of the same 10 steps\n"
            "    median create → finished: nested 0.367 s, flat 0.132 s; ratio 2.78x (goal ≤ 1.5x)\n"
            "    writes per run: nested 21.6, flat 1.6; each child adds 2.00 (goal: its own create "
            "and final status)\n")


def engine_ijk(j_rate=63.8, most=100):
    return ("(i) event fan-out vs the same runs created directly\n"
            "    one event, 100 workflows: 100 runs; fan-out 0.75 s (133 runs/s), direct 0.55 s "
            "(182 runs/s); ratio 0.73x (goal ≥ 0.9x)\n"
            "    1,000 events, 10 workflows: 10000 runs; fan-out 74.50 s (134 runs/s), direct 62.54 s "
            "(160 runs/s); ratio 0.84x (goal ≥ 0.9x)\n"
            "(j) a rate-limited drain\n"
            f"    1000 runs at limit 100 per second: {j_rate:.1f} starts/s after the first window, "
            f"{j_rate / 100:.2f}x of the limit (goal: at least 0.95x); most starts in one second: {most} "
            "(must be at most 100); starts in each second from the first: [100, 64, 63, 65, 62]\n"
            "    API-server writes per run: 2.37 limited, 2.00 without a limit; the same runs without "
            "a limit start at 92.7/s\n"
            "(k) runs waiting for a rate limit's window\n"
            "    10,000 runs waiting for a rate limit's window, the controller's CPU while nothing "
            "moves: 0.2 % of a core, against 0.1 % holding the same runs finished: 1.33x (goal: at most 5x)\n")


def engine_l(start=(12.4, 30.1), finish=(20.2, 45.0), floor=(9.0, 14.0)):
    return ("(l) start latency, 1000 one-step runs one after another\n"
            f"    POST /v1/workflows/{{id}}/runs -> its step started: p50 {start[0]:.1f} ms, p99 "
            f"{start[1]:.1f} ms; -> the run seen finished: p50 {finish[0]:.1f} ms, p99 {finish[1]:.1f} ms\n"
            f"    a Run created and seen through a watch: p50 {floor[0]:.1f} ms, p99 {floor[1]:.1f} ms\n"
            f"    step started {start[0] / floor[0]:.2f}x p50, {start[1] / floor[1]:.2f}x p99; finished "
            f"{finish[0] / floor[0]:.2f}x p50, {finish[1] / floor[1]:.2f}x p99 (goal: p50 at most 1.5x, "
            "p99 at most 3x)\n")


CARGO = ("    Finished `bench` profile [optimized] target(s) in 0.31s\n"
         "     Running benches/engine.rs (target/release/deps/engine-0123456789abcdef)\n")


def engine_log(**kw):
    return (CARGO + engine_a() + engine_b(**kw.get("b", {})) + engine_c() + engine_d(**kw.get("d", {}))
            + engine_efgh() + engine_ijk(**kw.get("ijk", {})) + engine_l(**kw.get("l", {})))


def delivery_log(worker=13088, signed=(15700, 18100), written=35.0):
    rate = worker
    best = max(signed)
    return "\n".join([
        "bench-delivery: 50000 events of 1056 bytes, 16 in flight",
        "  raw hyper client (before): 42000 req/s, p99 <= 0.004 s, 50000 of 50000 over HTTP/2",
        f"  raw hyper client, signed (before): {signed[0]} req/s, p99 <= 0.008 s",
        "  the worker's sender alone (before): 14000 req/s, p99 <= 0.008 s",
        "  (the worker starts now)",
        f"  flowline start-up: first delivery 1.20 s after start (lists 1,000 workflows), 12000/s including it",
        f"  flowline worker:  {rate} deliveries/s from the first delivery, p99 <= 0.016 s, 50000 over HTTP/2",
        "  raw hyper client (after): 42100 req/s, p99 <= 0.004 s",
        f"  raw hyper client, signed (after): {signed[1]} req/s, p99 <= 0.008 s",
        "  the worker's sender alone (after): 15300 req/s, p99 <= 0.008 s",
        f"  ratio: {rate / 42100:.2f}x the raw rate; p99 4.00x the raw p99",
        f"  ratio: {rate / best:.2f}x the signed raw rate; p99 2.00x the signed raw p99",
        f"  ratio: {rate / 15300:.2f}x the sender-alone rate; p99 2.00x the sender-alone p99",
        f"  API writes: {written:g} during the drain = {written * 1000 / 50000:.2f} per 1,000 deliveries "
        "(worker's own count: 35); watermark now Some(\"evt_0000049999\"), consecutive failures 0",
        "",
    ])


def scale_log(trailer_seconds=None):
    text = "\n".join([
        "bench-scale: 10000 workflows, 100000 finished runs (1 in 100 with a ~60 KiB output)",
        "loaded in 700.1 s; 110000 objects, 434.1 MB of JSON (4.04 KB per object)",
        "",
        "| measure | Flowline | reference | ratio | goal |",
        "|---|---|---|---|---|",
        "| API memory for the cache (RSS less an empty API's 25 MB) vs JSON bytes | 489.6 MB | 434.1 MB | 1.13x | ≤ 1.5x |",
        "| API cold start to /readyz vs raw paginated LIST | 26.24 s | 32.99 s | 0.80x | ≤ 1.5x |",
        "| list 20 runs of a workflow, p50 / p99 ms | 0.21 / 0.33 | 139.79 / 239.92 | 0.00x / 0.00x | |",
        "| get one run, p50 / p99 ms | 2.14 / 3.69 | 1.72 / 3.30 | 1.24x / 1.12x | |",
        "| operator ready / writes settled | 0.03 s / 65.5 s (10000 writes) | | | |",
        "| operator RSS vs JSON bytes | 830.3 MB | 434.1 MB | 1.91x | |",
        "| etcd growth per run (incl. its workflow's share) | 7.1 KB | | | |",
        "",
    ])
    if trailer_seconds is not None:
        text += bench_report.TRAILER.format(name="scale", seconds=trailer_seconds, status=0) + "\n"
    return text


def shards_log(twice=(0, 0, 0), held=8.2):
    lines = ["P5: 1000 runs of 3 no-op inline steps, 32 created at a time, N replicas sharing N shards"]
    for replicas, (rate, t) in enumerate(zip((118, 99, 95), twice), start=1):
        lines.append(f"  {replicas} replica(s): {rate} runs/s ({rate / 118:.2f}x one replica), 3.20 API "
                     f"writes per run, runs executed twice: {t} (goal 0)")
    lines.append(f"  3 replicas, one killed (SIGKILL) after 333 runs finished: its shard held again after "
                 f"{held:.1f} s (goal ≤ 15 s); all 1000 finished in 13.6 s; runs resumed by a second execution: 12")
    return "\n".join(lines) + "\n"


# --- helpers ---------------------------------------------------------------------

def rows_of(logs):
    """The table's rows for `logs` (bench → list of texts), as dicts by figure."""
    lines, _ = bench_report.table(logs)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        row = dict(zip(header, cells))
        rows[(row["bench"], row["figure"])] = row
    return rows


def row(logs, bench, figure_start):
    rows = rows_of(logs)
    if (bench, figure_start) in rows:
        return rows[(bench, figure_start)]
    found = [r for (b, f), r in rows.items() if b == bench and f.startswith(figure_start)]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} rows of {bench} start with {figure_start!r}")
    return found[0]


class Template(unittest.TestCase):
    def test_placeholders(self):
        regex = re.compile(bench_report.template("ratio {}x (goal: at least {_}x); ... most: {}"))
        self.assertEqual(regex.search("  ratio 0.91x (goal: at least 0.9x); xyz most: 4").groups(),
                         ("0.91", "4"))

    def test_numbers(self):
        take = bench_report.Extractor("value {} end")
        for text, number in [("1,000", 1000), ("-120", -120), ("0.75", 0.75), ("12345", 12345),
                             ("inf", float("inf"))]:
            self.assertEqual(take(f"value {text} end"), number, text)
            self.assertEqual(take(f"value {text} end").text, text)
        self.assertIsNone(take("value  end"))
        self.assertIsNone(take("nothing here"))

    def test_combine(self):
        self.assertEqual(bench_report.ex(("a {} b", "max"))("a 1 b\na 3 b\na 2 b"), 3)
        self.assertEqual(bench_report.ex(("a {} b", "max"))("a 1 b\na 3 b\na 2 b").text, "3")
        self.assertEqual(bench_report.ex(("a {} b", "sum"))("a 1 b\na 3 b\na 2 b"), 6)
        self.assertEqual(bench_report.ex("a {} b")("a 1 b\na 3 b"), 1)

    def test_every_row_compiles_and_has_a_goal(self):
        for spec in bench_report.ROWS:
            self.assertIn("goal", spec, spec["figure"])
            self.assertTrue(spec.get("goal_text"), spec["figure"])
        with self.assertRaises(ValueError):
            bench_report.Row(dict(bench="engine", figure="x", value="a {}", gaol=("value", "<=", 1)))


class EveryFigure(unittest.TestCase):
    """One run of each bench, every line present: every row has every cell."""

    def test_every_row_parses(self):
        logs = {"api": [api_log()], "engine": [engine_log()], "delivery": [delivery_log()],
                "scale": [scale_log(trailer_seconds=999.5)], "shards": [shards_log()]}
        rows = rows_of(logs)
        self.assertEqual(len(rows), len(bench_report.ROWS))
        for spec, r in zip(bench_report.ROWS, rows.values()):
            self.assertNotIn(DASH, r["Flowline"], r)
            if spec.get("reference"):
                self.assertNotIn(DASH, r["reference"], r)
            if spec.get("ratio"):
                self.assertNotIn(DASH, r["ratio"], r)
            self.assertIn(r["met"], ("yes", "no (0 of 1)"), r)

    def test_api(self):
        logs = {"api": [api_log()]}
        get = row(logs, "api", "single GET, req/s")
        self.assertEqual((get["Flowline"], get["reference"], get["ratio"], get["met"]),
                         ("64613", "API server: 2377", "27.2×", "yes"))
        p99 = row(logs, "api", "single GET, p99")
        self.assertEqual((p99["Flowline"], p99["reference"], p99["ratio"], p99["met"]),
                         ("0.58", "API server: 21.09", "36.4×", "yes"))
        bare = row(logs, "api", "single GET, req/s vs a bare")
        self.assertEqual((bare["reference"], bare["ratio"], bare["goal"], bare["met"]),
                         ("bare axum: 98975", "0.65×", "≥ 0.65× (no regression)", "yes"))
        listed = row(logs, "api", "list of 100, req/s vs a bare")
        self.assertEqual((listed["Flowline"], listed["ratio"], listed["met"]), ("9095", "0.13×", "no (0 of 1)"))
        listed = rows_of(logs)[("api", "list of 100, req/s")]
        self.assertEqual((listed["reference"], listed["ratio"], listed["met"]),
                         ("API server: 324", "28.1×", "yes"))

    def test_engine(self):
        logs = {"engine": [engine_log()]}
        a = row(logs, "engine", "(a)")
        self.assertEqual((a["Flowline"], a["reference"], a["ratio"], a["met"]),
                         ("0.511", "bare loop: 0.444", "1.15×", "yes"))
        b = row(logs, "engine", "(b) 1,000 runs")
        self.assertEqual((b["Flowline"], b["reference"], b["ratio"], b["met"]),
                         ("157", "raw create + small status patch: 243", "0.65×", "no (0 of 1)"))
        floor = row(logs, "engine", "(b) runs/s vs the contract")
        self.assertEqual((floor["reference"], floor["ratio"]), ("create + final status: 180", "0.87×"))
        self.assertEqual(row(logs, "engine", "(b) API-server writes")["Flowline"], "2.00")
        c = row(logs, "engine", "(c)")
        self.assertEqual((c["Flowline"], c["ratio"], c["met"]), ("926", "-120 ms", "yes"))
        d = row(logs, "engine", "(d) `limit: 4` queue drain, runs/s")
        self.assertEqual((d["Flowline"], d["reference"], d["ratio"], d["met"]),
                         ("91", "the same runs without a limit: 100", "0.91×", "yes"))
        self.assertEqual(row(logs, "engine", "(d) `limit: 4` queue drain vs 4")["ratio"], "1.26×")
        self.assertEqual(row(logs, "engine", "(f)")["Flowline"], "0")
        self.assertEqual(row(logs, "engine", "(g)")["reference"], "1,000 queued: 0.4")
        self.assertEqual(row(logs, "engine", "(h) API")["met"], "yes")
        self.assertEqual(row(logs, "engine", "(i) 1,000 events")["Flowline"], "74.50")
        j = row(logs, "engine", "(j) 1,000 runs")
        self.assertEqual((j["Flowline"], j["reference"], j["ratio"], j["met"]),
                         ("63.8", "the limit: 100", "0.64×", "no (0 of 1)"))
        self.assertEqual(row(logs, "engine", "(j) most")["met"], "yes")
        self.assertEqual(row(logs, "engine", "(k)")["ratio"], "1.33×")
        l50 = row(logs, "engine", "(l) POST a run → its step started, p50")
        self.assertEqual((l50["Flowline"], l50["reference"], l50["ratio"], l50["met"]),
                         ("12.4", "a Run created and seen through a watch: 9.0", "1.38×", "yes"))
        l99 = row(logs, "engine", "(l) POST a run → the run seen finished, p99")
        self.assertEqual((l99["Flowline"], l99["reference"], l99["ratio"], l99["met"]),
                         ("45.0", "a Run created and seen through a watch: 14.0", "3.21×", "no (0 of 1)"))

    def test_engine_lines_belong_to_their_part(self):
        # (d)'s and (j)'s writes-per-run lines must not stand in for (b)'s.
        logs = {"engine": [CARGO + engine_d() + engine_ijk()]}
        self.assertEqual(row(logs, "engine", "(b) API-server writes")["Flowline"], DASH)

    def test_delivery_takes_the_better_reference(self):
        logs = {"delivery": [delivery_log(worker=13088, signed=(15700, 18100))]}
        r = row(logs, "delivery", "deliveries/s vs a signed")
        self.assertEqual((r["Flowline"], r["reference"], r["ratio"], r["met"]),
                         ("13088", "signed hyper (better of before and after): 18100", "0.72×", "no (0 of 1)"))
        self.assertEqual(row(logs, "delivery", "deliveries/s")["met"], "yes")
        self.assertEqual(row(logs, "delivery", "API-server writes")["Flowline"], "0.70")

    def test_scale(self):
        logs = {"scale": [scale_log(trailer_seconds=999.5)]}
        memory = row(logs, "scale", "API memory")
        self.assertEqual((memory["Flowline"], memory["reference"], memory["ratio"], memory["met"]),
                         ("489.6", "objects' JSON: 434.1", "1.13×", "yes"))
        self.assertEqual(row(logs, "scale", "API cold start")["ratio"], "0.80×")
        self.assertEqual(row(logs, "scale", "the whole bench")["Flowline"], "999.5")

    def test_scale_without_the_trailer(self):
        whole = row({"scale": [scale_log()]}, "scale", "the whole bench")
        self.assertEqual((whole["Flowline"], whole["met"]), (DASH, "n/a"))

    def test_shards_adds_the_replicas_lines(self):
        logs = {"shards": [shards_log(twice=(0, 1, 2), held=16.0)]}
        self.assertEqual(row(logs, "shards", "runs executed twice")["Flowline"], "3")
        self.assertEqual(row(logs, "shards", "runs executed twice")["met"], "no (0 of 1)")
        held = row(logs, "shards", "a killed")
        self.assertEqual((held["Flowline"], held["met"]), ("16.0", "no (0 of 1)"))


class SeveralRuns(unittest.TestCase):
    def test_each_run_joined_in_order(self):
        logs = {"engine": [engine_log(b=dict(engine=150, raw=200)),
                           engine_log(b=dict(engine=160, raw=200)),
                           engine_log(b=dict(engine=170, raw=200))]}
        b = row(logs, "engine", "(b) 1,000 runs")
        self.assertEqual(b["Flowline"], "150; 160; 170")
        self.assertEqual(b["reference"], "raw create + small status patch: 200; 200; 200")
        self.assertEqual(b["ratio"], "0.75×; 0.80×; 0.85×")
        self.assertEqual(b["met"], "yes")

    def test_met_in_one_of_three(self):
        logs = {"engine": [engine_log(b=dict(engine=160, raw=200)),
                           engine_log(b=dict(engine=140, raw=200)),
                           engine_log(b=dict(engine=120, raw=200))]}
        self.assertEqual(row(logs, "engine", "(b) 1,000 runs")["met"], "no (1 of 3)")
        logs = {"engine": [engine_log(ijk=dict(j_rate=96.0, most=100)),
                           engine_log(ijk=dict(j_rate=96.0, most=101)),
                           engine_log(ijk=dict(j_rate=90.0, most=100))]}
        self.assertEqual(row(logs, "engine", "(j) 1,000 runs")["met"], "no (2 of 3)")
        self.assertEqual(row(logs, "engine", "(j) most")["met"], "no (2 of 3)")

    def test_missing_lines(self):
        # Run 2 failed in (c): its log ends there, (d) onwards are missing.
        partial = CARGO + engine_a() + engine_b(engine=150, raw=200) + \
            "(c) one-step container run vs a bare Job\nthread 'main' panicked at benches/engine.rs:912:10:\n"
        logs = {"engine": [engine_log(d=dict(queue=95, free=100)), partial,
                           engine_log(d=dict(queue=80, free=100))]}
        d = row(logs, "engine", "(d) `limit: 4` queue drain, runs/s")
        self.assertEqual(d["Flowline"], f"95; {DASH}; 80")
        self.assertEqual(d["reference"], f"the same runs without a limit: 100; {DASH}; 100")
        self.assertEqual(d["ratio"], f"0.95×; {DASH}; 0.80×")
        self.assertEqual(d["met"], "no (1 of 3)")
        self.assertEqual(row(logs, "engine", "(b) 1,000 runs")["Flowline"], "157; 150; 157")
        c = row(logs, "engine", "(c)")
        self.assertEqual(c["Flowline"], f"926; {DASH}; 926")

    def test_missing_everywhere(self):
        no_l = CARGO + engine_a() + engine_b()
        logs = {"engine": [no_l, no_l, no_l]}
        l50 = row(logs, "engine", "(l) POST a run → its step started, p50")
        self.assertEqual(l50["Flowline"], f"{DASH}; {DASH}; {DASH}")
        self.assertEqual(l50["met"], "n/a")

    def test_api_row_cut_short(self):
        # A row without its closing "|" after a cell gives no figure from that cell.
        text = api_log().replace("| 2377 |", "| 23")
        get = row({"api": [text.split("| 23")[0] + "| 23\n"]}, "api", "single GET, req/s")
        self.assertEqual((get["Flowline"], get["reference"], get["met"]), ("64613", f"API server: {DASH}", "n/a"))

    def test_truncated_mid_line_and_empty(self):
        cut = engine_log()
        for end in (0, 1, 100, cut.index("ratio 0.65x") + 7, len(cut) // 2, len(cut) - 3):
            logs = {bench: [text[:end]] for bench, text in
                    [("engine", cut), ("api", api_log()), ("delivery", delivery_log()),
                     ("scale", scale_log()), ("shards", shards_log())]}
            rows = rows_of(logs)
            self.assertEqual(len(rows), len(bench_report.ROWS))
        empty = rows_of({"engine": [""]})
        self.assertTrue(all(r["met"] == "n/a" for r in empty.values()))

    def test_benches_without_logs_are_left_out(self):
        rows = rows_of({"shards": [shards_log()]})
        self.assertEqual({b for b, _ in rows}, {"shards"})


class Files(unittest.TestCase):
    def test_bench_of(self):
        self.assertEqual(bench_report.bench_of("/x/engine-2.log"), ("engine", 2))
        self.assertEqual(bench_report.bench_of("api-10.log"), ("api", 10))
        self.assertIsNone(bench_report.bench_of("engine.log"))
        self.assertIsNone(bench_report.bench_of("soak-1.log"))

    def test_report_of_files(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, text in [(2, engine_log(b=dict(engine=140, raw=200))), (1, engine_log()),
                            (10, engine_log(b=dict(engine=180, raw=200)))]:
                path = os.path.join(d, f"engine-{i}.log")
                with open(path, "w") as f:
                    f.write(text + bench_report.TRAILER.format(name="engine", seconds=12.0, status=i % 2) + "\n")
                paths.append(path)
            scale = os.path.join(d, "scale-1.log")
            with open(scale, "w") as f:
                f.write(scale_log(trailer_seconds=1300.0))
            stray = os.path.join(d, "notes.txt")
            with open(stray, "w") as f:
                f.write("x")
            out, err = io.StringIO(), io.StringIO()
            stderr, sys.stderr = sys.stderr, err
            try:
                failed = bench_report.report(paths + [scale, stray], out=out)
            finally:
                sys.stderr = stderr
            text = out.getvalue()
        self.assertEqual(failed, 1)  # engine-1's trailer says exit status 1
        self.assertIn("notes.txt", err.getvalue())
        self.assertRegex(text, r"Date: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\. Machine: \S+ \(uname -m\), \d+ CPUs, ")
        self.assertIn("engine-1.log", text)
        self.assertIn("exit status 1 (FAILED)", text)
        self.assertIn("bench-scale: 10000 workflows", text)
        # Runs in the order of their number: 1 (157), 2 (140), 10 (180).
        self.assertRegex(text, r"\| engine \| \(b\) 1,000 runs of 3 no-op steps, runs/s \| 157; 140; 180 \| "
                               r"[^\n]*\| 0\.65×; 0\.70×; 0\.90× \| ≥ 0\.75× \| no \(1 of 3\) \|")
        self.assertRegex(text, r"\| scale \| the whole bench[^\n]*\| 1300\.0 \|[^\n]*\| no \(0 of 1\) \|")
        self.assertIn("engine (c): the overhead is taken against the bare Job's pod", text)
        self.assertNotIn("| api |", text)


class Run(unittest.TestCase):
    """`run` with a stand-in `make` first on PATH (no bench runs): the logs, their
    trailers, and the report of them."""

    def test_run(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "bin")
            os.mkdir(fake)
            with open(os.path.join(fake, "make"), "w") as f:
                f.write("#!/bin/sh\n"
                        "[ \"$1 $2\" = \"-s bench-shards\" ] || exit 9\n"
                        "n=$(cat \"$COUNTER\" 2>/dev/null || echo 0); echo $((n + 1)) > \"$COUNTER\"\n"
                        "echo 'P5: 1000 runs'\n"
                        "echo '  1 replica(s): 118 runs/s (1.00x one replica), 3.20 API writes per run, "
                        "runs executed twice: 0 (goal 0)'\n"
                        "echo 'a warning' >&2\n"
                        "[ $n -eq 1 ] && exit 101\n"
                        "echo '  3 replicas, one killed (SIGKILL) after 333 runs finished: its shard held again "
                        "after 9.5 s (goal ≤ 15 s); all 1000 finished in 13.6 s; runs resumed by a second "
                        "execution: 3'\n")
            os.chmod(os.path.join(fake, "make"), 0o755)
            logs = os.path.join(d, "logs")
            env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"],
                       COUNTER=os.path.join(d, "counter"), BENCH_RUNS="3")
            import subprocess
            done = subprocess.run([sys.executable, bench_report.__file__, "run", "--only", "shards",
                                   "--log-dir", logs], env=env, capture_output=True, text=True)
            self.assertEqual(done.returncode, 1, done.stderr)  # run 2 failed
            self.assertEqual(sorted(os.listdir(logs)), ["shards-1.log", "shards-2.log", "shards-3.log"])
            with open(os.path.join(logs, "shards-2.log")) as f:
                second = f.read()
        self.assertIn("a warning\n", second)
        self.assertRegex(second, r"\[bench_report\] make -s bench-shards: \d+\.\d s, exit status 101\n$")
        self.assertIn("| shards | a killed replica's shard held again, s | 9.5; —; 9.5 |", done.stdout)
        self.assertIn("| ≤ 15 s | no (2 of 3) |", done.stdout)
        self.assertIn("exit status 101 (FAILED)", done.stdout)


if __name__ == "__main__":
    unittest.main()
