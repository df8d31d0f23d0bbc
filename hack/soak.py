#!/usr/bin/env python3
"""make soak: an operator (`flowline operator --no-api`) and an API replica
(`flowline api`) under steady mixed load for SOAK_MINUTES (30 by default), in a
namespace of their own on the local cluster.

Each second the load starts two 3-step runs, a run that calls a child workflow and waits
for it, and a run that hands out a callback URL and parks until the soak calls it back;
posts an event that starts a run of an event-triggered workflow; and reads (the account's
run list, a run, the workflow list). Every run.succeeded and run.failed event is
delivered to a local receiver.

Posted events are kept for SOAK_EVENT_RETENTION (5m; the operator's default is 7d,
under which the events of the soak, one a second, would be a steady climb of both
processes' caches rather than a leak). Every SAMPLE seconds it records, for each process, its resident memory, open file
descriptors and threads (from /proc) and its live async tasks
(`flowline_runtime_tasks_alive` from its /metrics), the p99 of the
soak's own API calls in that window, and the API server's writes per run started in it
(an event's run and a child run count with the run that made them).
At the end it waits for every run to finish and prints a table and a verdict against
the goals: resident memory, descriptors and tasks flat after warm-up (at most 10 % growth
over the last two thirds; tasks may also move by 10 with the load in flight), p99 flat (the last third's within 1.5x of the second's, or
under 50 ms), no run failed or stuck, no delivery lost. The figures are also written
as JSON to .flowline/soak/report.json. Exit status 1 when a goal is missed.
"""

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINUTES = float(os.environ.get("SOAK_MINUTES", "30"))
SAMPLE = float(os.environ.get("SOAK_SAMPLE_SECONDS", "15"))
# The operator's --event-retention (see `run`); SOAK_EVENT_RETENTION=7d keeps the default.
EVENT_RETENTION = os.environ.get("SOAK_EVENT_RETENTION", "5m")
FLOWLINE = os.environ.get("FLOWLINE_BIN", os.path.join(REPO, "target/debug/flowline"))
OUT = os.path.join(REPO, ".flowline/soak")
KUBECTL = os.path.join(REPO, ".flowline/bin/kubectl")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubectl(*args, stdin=None):
    return subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True, check=True).stdout


class Api:
    """The /v1 API with the soak's key; every call's latency is kept for the window."""

    def __init__(self, base, key):
        self.base, self.key = base, key
        self.lock = threading.Lock()
        self.latencies = []

    def call(self, method, path, body=None, auth=True):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if auth:
            req.add_header("Authorization", f"Bearer {self.key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                status, text = res.status, res.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        with self.lock:
            self.latencies.append(time.monotonic() - started)
        return status, (json.loads(text) if text else None)

    def take_latencies(self):
        with self.lock:
            taken, self.latencies = self.latencies, []
        return taken


def p99(values):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Receiver(BaseHTTPRequestHandler):
    events = {}
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        event = json.loads(body)
        with Receiver.lock:
            Receiver.events.setdefault((event["event"], event["data"].get("run_id")), 0)
            Receiver.events[(event["event"], event["data"].get("run_id"))] += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def proc(pid, port):
    """Resident memory (MiB), open descriptors and threads of a process, and the live
    tasks of its async runtime."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(fields["Threads"]),
        "tasks": runtime_tasks(port),
    }


def runtime_tasks(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as res:
        for line in res.read().decode().splitlines():
            if line.startswith("flowline_runtime_tasks_alive "):
                return int(float(line.split()[1]))
    sys.exit("soak: flowline_runtime_tasks_alive is missing from /metrics")


def apiserver_writes():
    text = kubectl("get", "--raw", "/metrics")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        if not any(f'resource="{r}"' in line for r in ("runs", "workflows", "webhooks", "flowlineevents")):
            continue
        if any(f'verb="{v}"' in line for v in ("POST", "PATCH", "PUT", "DELETE", "APPLY")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_ready(port, proc_, what):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc_.poll() is not None:
            sys.exit(f"soak: {what} exited")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as res:
                if res.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"soak: {what} not ready within 60 s")


def main():
    os.makedirs(OUT, exist_ok=True)
    ns = f"flowline-soak-{random.randrange(10**8)}"
    kubectl("create", "namespace", ns)
    kubectl("annotate", "namespace", ns, "flowline.io/plan=enterprise")
    procs = []
    try:
        run(ns, procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([KUBECTL, "delete", "namespace", ns, "--wait=false"], capture_output=True)


def run(ns, procs):
    key = subprocess.run([FLOWLINE, "api-key", "create", "--namespace", ns, "--name", "soak", "--scopes", "admin"],
                         capture_output=True, text=True, check=True).stdout.strip()
    api_port, op_port = free_port(), free_port()
    common = ["--watch-namespace", ns, "--allow-http"]
    op_log = open(os.path.join(OUT, "operator.log"), "w")
    api_log = open(os.path.join(OUT, "api.log"), "w")
    # Events are kept for --event-retention (7 days by default): at one event a second
    # they would grow both processes' caches for the whole soak. A short retention
    # makes their number steady, as the runs' (kept per workflow) are.
    operator = subprocess.Popen([FLOWLINE, "operator", "--no-api", "--listen", f"127.0.0.1:{op_port}", *common,
                                 "--event-retention", EVENT_RETENTION,
                                 "--leader-election-namespace", ns, "--allow-cidr", "127.0.0.0/8",
                                 "--public-url", f"http://127.0.0.1:{api_port}"], stderr=op_log, stdout=op_log)
    procs.append(operator)
    api_proc = subprocess.Popen([FLOWLINE, "api", "--listen", f"127.0.0.1:{api_port}", *common,
                                 "--default-plan", "enterprise", "--enterprise-requests-per-minute", "100000",
                                 # Callbacks carry no key: they count against the address budget.
                                 "--unauthenticated-requests-per-minute", "100000"],
                                stderr=api_log, stdout=api_log)
    procs.append(api_proc)
    wait_ready(op_port, operator, "the operator")
    wait_ready(api_port, api_proc, "the API")
    api = Api(f"http://127.0.0.1:{api_port}/v1", key)

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    status, _ = api.call("POST", "/webhooks", {"url": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
                                              "events": ["run.succeeded", "run.failed"]})
    assert status == 201, status

    def workflow(name, patch):
        status, wf = api.call("POST", "/workflows", {"name": name, **({"trigger": patch.pop("trigger")} if "trigger" in patch else {})})
        assert status == 201, (status, wf)
        status, body = api.call("PATCH", f"/workflows/{wf['id']}", {"state": "active", **patch})
        assert status == 200, (status, body)
        return wf["id"]

    steady = workflow("Steady", {"steps": [
        {"id": "a", "action": "transform", "with": {"value": {"n": "{{ trigger.payload.n }}"}}},
        {"id": "b", "action": "transform", "with": {"value": "{{ steps.a.output.n }}"}},
        {"id": "c", "action": "transform", "with": {"value": 3}}], "output": {"n": "{{ steps.b.output }}"}})
    child = workflow("Child", {"steps": [{"id": "x", "action": "transform", "with": {"value": "{{ trigger.payload.n }}"}}],
                               "output": "{{ steps.x.output }}"})
    parent = workflow("Parent", {"steps": [{"id": "call", "action": "workflow",
                                            "with": {"workflow": child, "wait": True, "payload": {"n": "{{ trigger.payload.n }}"}}}]})
    called = workflow("Called back", {"steps": [
        {"id": "hand", "action": "transform", "with": {"value": "{{ callbacks.paid.url }}"}},
        {"id": "paid", "action": "callback", "needs": ["hand"], "with": {"timeout_ms": 600000}}]})
    workflow("On order", {"trigger": {"type": "event", "event": "soak.order"},
                          "steps": [{"id": "t", "action": "transform", "with": {"value": "{{ trigger.payload.n }}"}}]})

    started, callbacks, events_posted = [], [], 0
    stop_at = time.monotonic() + MINUTES * 60
    samples = []
    next_sample = time.monotonic() + SAMPLE
    writes_before, started_before = apiserver_writes(), 0
    n = 0
    print(f"soak: {MINUTES:g} min, namespace {ns}, a sample every {SAMPLE:g} s", flush=True)
    while time.monotonic() < stop_at:
        tick = time.monotonic()
        n += 1
        for wf in (steady, steady, parent, called):
            status, body = api.call("POST", f"/workflows/{wf}/runs", {"payload": {"n": n}})
            if status == 201:
                started.append(body["id"])
                if wf == called:
                    callbacks.append(body["id"])
        status, _ = api.call("POST", "/events", {"name": "soak.order", "payload": {"n": n}})
        events_posted += status == 202
        api.call("GET", "/runs?limit=20")
        api.call("GET", f"/runs/{started[-1]}")
        api.call("GET", "/workflows")
        # Call back the callback runs whose URL is out (the one before: its first step ran).
        for run_id in callbacks[:-1]:
            status, body = api.call("GET", f"/runs/{run_id}")
            url = (body or {}).get("steps", [{}])[0].get("output")
            if isinstance(url, str) and "/v1/callbacks/" in url:
                api.call("POST", url[url.index("/callbacks/"):], {"paid": True}, auth=False)
                callbacks.remove(run_id)
        if time.monotonic() >= next_sample:
            next_sample += SAMPLE
            writes = apiserver_writes()
            sample = {"t": round(MINUTES * 60 - (stop_at - time.monotonic())),
                      "operator": proc(operator.pid, op_port), "api": proc(api_proc.pid, api_port),
                      "p99_ms": round(p99(api.take_latencies()) * 1000, 1),
                      "writes_per_run": round((writes - writes_before) / max(1, len(started) - started_before), 2),
                      "runs": len(started)}
            writes_before, started_before = writes, len(started)
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        time.sleep(max(0, 1 - (time.monotonic() - tick)))

    # The end: every run finishes (the last callbacks are called back).
    deadline = time.monotonic() + 180
    unfinished = list(started)
    while unfinished and time.monotonic() < deadline:
        for run_id in list(callbacks):
            status, body = api.call("GET", f"/runs/{run_id}")
            url = (body or {}).get("steps", [{}])[0].get("output")
            if isinstance(url, str) and "/v1/callbacks/" in url:
                api.call("POST", url[url.index("/callbacks/"):], {"paid": True}, auth=False)
                callbacks.remove(run_id)
        still = []
        for run_id in unfinished:
            status, body = api.call("GET", f"/runs/{run_id}")
            # 404: finished and pruned by its workflow's retention.
            if status != 404 and (status != 200 or body["status"] in ("running", "queued")):
                still.append(run_id)
        unfinished = still
        if unfinished:
            time.sleep(2)
    failed = []
    for run_id in started:
        status, body = api.call("GET", f"/runs/{run_id}")
        if status == 200 and body["status"] not in ("succeeded", "running", "queued"):
            failed.append(run_id)
    time.sleep(10)
    with Receiver.lock:
        delivered = {run for (kind, run) in Receiver.events if kind in ("run.succeeded", "run.failed")}
    lost = [r for r in started if r not in unfinished and r not in delivered]
    report(samples, started, failed, unfinished, lost, events_posted)


def growth(samples, proc_name, field):
    """Growth over the last two thirds: the last sample's value against the first
    sample of the second third."""
    start = samples[len(samples) // 3][proc_name][field]
    end = samples[-1][proc_name][field]
    return (end - start) / max(start, 1e-9)


def report(samples, started, failed, unfinished, lost, events_posted):
    if len(samples) < 3:
        sys.exit("soak: too short for a verdict (fewer than three samples)")
    third = len(samples) // 3
    p99_second = p99([s["p99_ms"] for s in samples[third:2 * third]])
    p99_last = p99([s["p99_ms"] for s in samples[2 * third:]])
    figures = {
        "minutes": MINUTES, "runs": len(started), "events_posted": events_posted,
        "failed": len(failed), "stuck": len(unfinished), "lost_deliveries": len(lost),
        "rss_growth": {p: round(growth(samples, p, "rss_mib"), 3) for p in ("operator", "api")},
        "fd_growth": {p: round(growth(samples, p, "fds"), 3) for p in ("operator", "api")},
        "task_growth": {p: round(growth(samples, p, "tasks"), 3) for p in ("operator", "api")},
        "task_change": {p: samples[-1][p]["tasks"] - samples[third][p]["tasks"] for p in ("operator", "api")},
        "p99_ms_second_third": p99_second, "p99_ms_last_third": p99_last,
        "samples": samples,
    }
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print("\nt(s)  op RSS MiB  op fds  op thr  op tasks  api RSS MiB  api fds  api thr  api tasks  p99 ms  writes/run  runs")
    for s in samples:
        o, a = s["operator"], s["api"]
        print(f"{s['t']:>5}  {o['rss_mib']:>10.1f}  {o['fds']:>6}  {o['threads']:>6}  {o['tasks']:>8}  {a['rss_mib']:>11.1f}  "
              f"{a['fds']:>7}  {a['threads']:>7}  {a['tasks']:>9}  {s['p99_ms']:>6}  {s['writes_per_run']:>10}  {s['runs']:>4}")
    goals = {
        "RSS flat (<= 10 % growth over the last two thirds)": all(v <= 0.10 for v in figures["rss_growth"].values()),
        "fds flat (<= 10 % growth over the last two thirds)": all(v <= 0.10 for v in figures["fd_growth"].values()),
        "tasks flat (<= 10 % growth over the last two thirds, or <= 10 more)": all(
            figures["task_growth"][p] <= 0.10 or figures["task_change"][p] <= 10 for p in ("operator", "api")),
        "p99 flat (last third <= 1.5x the second, or < 50 ms)": p99_last <= max(1.5 * p99_second, 50),
        "no run failed": not failed,
        "no run stuck": not unfinished,
        "no delivery lost": not lost,
    }
    print(f"\n{len(started)} runs, {events_posted} events posted; failed {len(failed)}, stuck {len(unfinished)}, "
          f"deliveries lost {len(lost)}; RSS growth {figures['rss_growth']}, fd growth {figures['fd_growth']}, "
          f"task growth {figures['task_growth']}; "
          f"p99 {p99_second} ms then {p99_last} ms")
    for goal, met in goals.items():
        print(f"  {'met' if met else 'MISSED'}: {goal}")
    if not all(goals.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
