"""End-to-end tests of the Flowline console in headless Chromium (run by
hack/console-test.sh, which starts the operator and passes its URL and two keys).

Every wait is on a positive signal (WebDriverWait on an element or a state), never a
sleep. After each scenario the browser log must hold no JavaScript error, CSP
violation or console.error: only the network lines Chromium prints for the 4xx
answers the console asks for on purpose (a refused save, say) are
allowed. Each page is saved as a screenshot under $FLOWLINE_CONSOLE_OUT/screenshots,
and checked with axe-core ($FLOWLINE_AXE, npm's axe-core, injected into the page): a
critical or serious violation fails the scenario.
"""

import http.server
import json
import os
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["FLOWLINE_CONSOLE_URL"]
NAMESPACE = os.environ["FLOWLINE_CONSOLE_NAMESPACE"]
ADMIN_KEY = os.environ["FLOWLINE_ADMIN_KEY"]
READ_KEY = os.environ["FLOWLINE_READ_KEY"]
OUT = os.environ.get("FLOWLINE_CONSOLE_OUT", ".flowline/console-test")
with open(os.environ["FLOWLINE_AXE"], encoding="utf-8") as axe_file:
    AXE = axe_file.read()
# The violations that fail a scenario.
BLOCKING = ("critical", "serious")
WAIT = 15


def api(method, path, body=None, key=ADMIN_KEY):
    """The /v1 API directly (setup and checks); returns (status, parsed body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + "/v1" + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            raw = res.read()
            return res.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that records what it got and answers 200."""

    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


class Console(unittest.TestCase):
    driver = None
    shots = 0
    diamond_id = None

    @classmethod
    def setUpClass(cls):
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        cls.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        # Views redraw what they show (polling, a save): a stale element is retried.
        cls.wait = WebDriverWait(cls.driver, WAIT, ignored_exceptions=(StaleElementReferenceException,))
        cls.receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=cls.receiver.serve_forever, daemon=True).start()
        cls.workflow_id = None

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.receiver.shutdown()

    def tearDown(self):
        errors = [
            e for e in self.driver.get_log("browser")
            if e["level"] == "SEVERE" and e.get("source") != "network"
        ]
        self.assertEqual(errors, [], "browser console errors")

    # helpers -------------------------------------------------------------------

    def shot(self, name):
        Console.shots += 1
        self.driver.save_screenshot(f"{OUT}/screenshots/{Console.shots:02d}-{name}.png")
        self.audit(name)

    def audit(self, name):
        """axe-core over the page as it is now: no critical or serious violation."""
        self.driver.execute_script(AXE)
        found = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, { resultTypes: ['violations'] })"
            "  .then((r) => done(r.violations.filter((v) => arguments[0].includes(v.impact))"
            "    .map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`)))"
            "  .catch((e) => done([`axe failed: ${e}`]));",
            list(BLOCKING))
        self.assertEqual(found, [], f"accessibility of {name}")

    def find(self, css):
        return self.wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, css)))

    def click(self, css):
        # A run page redraws as the run changes: an element found just before a redraw
        # is gone when it is clicked, so it is found again (its replacement is the same
        # control).
        for attempt in range(3):
            try:
                return self.press(self.wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, css))))
            except StaleElementReferenceException:
                if attempt == 2:
                    raise

    def press(self, element):
        # Centred first: the builder's sticky save bar may cover the bottom of the view.
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def text_in(self, css, text):
        self.wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))

    def go(self, path, ready_css):
        self.driver.get(BASE + path)
        return self.find(ready_css)

    def sign_in(self, key):
        self.driver.get(BASE + "/workflows")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get(BASE + "/workflows")
        self.find("#api-key").send_keys(key)
        self.click("form button[type=submit]")
        self.find("#sign-out")

    def ensure_admin(self):
        self.driver.get(BASE + "/workflows")
        scopes = self.driver.execute_script("return sessionStorage.getItem('flowline.scopes')")
        if not scopes or "admin" not in scopes:
            self.sign_in(ADMIN_KEY)

    def set_value(self, element, text):
        element.clear()
        element.send_keys(text)

    def step_field(self, index, name):
        return self.find(f'[data-field="steps[{index}].{name}"]')

    def step_ids(self):
        return [
            c.find_element(By.CSS_SELECTOR, '[data-field$=".id"]').get_attribute("value")
            for c in self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")
        ]

    def add_step(self, action, step_id):
        Select(self.find("#new-step-action")).select_by_value(action)
        before = len(self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card"))
        self.click("#add-step")
        self.wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps .step-card")) == before + 1)
        self.set_value(self.step_field(before, "id"), step_id)
        return before

    def answer_confirm(self, answer):
        """Answers the page's next confirmations with `answer`, and from now on counts the
        requests it sends (see `sent`)."""
        self.driver.execute_script(
            "window.confirm = () => arguments[0];"
            "if (!window.sentUrls) { window.sentUrls = []; const f = window.fetch;"
            "  window.fetch = (u, o) => { window.sentUrls.push(String(u)); return f(u, o); }; }",
            answer)

    def sent(self, fragment):
        """How many requests the page sent, since `answer_confirm`, to a URL holding `fragment`."""
        return self.driver.execute_script(
            "return (window.sentUrls || []).filter((u) => u.includes(arguments[0])).length", fragment)

    def node(self, graph, step):
        return self.find(f'#{graph} [data-node="{step}"]')

    def edges(self, graph):
        return sorted(e.get_attribute("data-edge") for e in self.driver.find_elements(By.CSS_SELECTOR, f"#{graph} [data-edge]"))

    def keys(self, *keys):
        """Presses keys together on whatever has the focus (Ctrl+Z: `self.keys(Keys.CONTROL, "z")`)."""
        chain = ActionChains(self.driver)
        for k in keys[:-1]:
            chain.key_down(k)
        chain.send_keys(keys[-1])
        for k in reversed(keys[:-1]):
            chain.key_up(k)
        chain.perform()

    def lane_is(self, step, status):
        """Waits until the run page's timeline shows `step` in `status`."""
        self.wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, f'#timeline .lane[data-step="{step}"]').get_attribute("data-status") == status)

    def make_workflow(self, name, steps, state="active"):
        status, wf = api("POST", "/workflows", {"name": name})
        self.assertEqual(status, 201, wf)
        status, wf = api("PATCH", f"/workflows/{wf['id']}", {"steps": steps, "state": state})
        self.assertEqual(status, 200, wf)
        return wf["id"]

    def module(self, name, body):
        """Runs `body` (JS, with the module bound to `m`) against a console module as
        the browser loaded it; returns what it returns."""
        base = self.driver.find_element(By.CSS_SELECTOR, "script[type=module]").get_attribute("src").rsplit("/", 1)[0]
        return self.driver.execute_async_script(
            f"const done = arguments[arguments.length - 1];"
            f"import('{base}/{name}').then((m) => done((() => {{ {body} }})()), (e) => done('import failed: ' + e));")

    # scenarios -----------------------------------------------------------------

    def test_00_pure_modules_known_answers(self):
        self.driver.get(BASE + "/")
        self.find("#api-key")
        # cron.js: fixed instants, a timezone, day-of-month OR day-of-week, errors.
        from_ = "new Date('2026-03-27T23:30:00Z')"
        self.assertEqual(self.module("cron.js", f"return m.nextTimes('0 9 * * *', 'Europe/Paris', 3, {from_})"),
                         ["Sat, 28 Mar 2026, 09:00", "Sun, 29 Mar 2026, 09:00", "Mon, 30 Mar 2026, 09:00"])
        self.assertEqual(self.module("cron.js", f"return m.nextTimes('*/20 * * * *', 'UTC', 3, {from_})"),
                         ["Fri, 27 Mar 2026, 23:40", "Sat, 28 Mar 2026, 00:00", "Sat, 28 Mar 2026, 00:20"])
        self.assertEqual(self.module("cron.js", f"return m.nextTimes('0 0 1 * MON', 'UTC', 2, {from_})"),
                         ["Mon, 30 Mar 2026, 00:00", "Wed, 1 Apr 2026, 00:00"])
        self.assertEqual(self.module("cron.js", f"return m.nextTimes('@monthly', 'UTC', 1, {from_})"),
                         ["Wed, 1 Apr 2026, 00:00"])
        for bad, why in [("* * * *", "expected 5 fields"), ("5-1 * * * *", "runs backwards"),
                         ("* * * * * *", "expected 5 fields"), ("*/0 * * * *", "bad step")]:
            self.assertIn(why, self.module("cron.js", f"try {{ m.parse({json.dumps(bad)}); return 'parsed'; }} catch (e) {{ return e.message; }}"))
        self.assertEqual(self.module("cron.js", "try { m.nextTimes('* * * * *', 'Mars/Olympus'); return 'ok'; } catch (e) { return e.name; }"),
                         "RangeError")
        # templates.js: sample payload paths, earlier steps' outputs.
        self.assertEqual(self.module("templates.js", "return m.paths({a: {b: [1, {c: 2}]}}, 'trigger.payload')"),
                         ["trigger.payload.a", "trigger.payload.a.b", "trigger.payload.a.b.0",
                          "trigger.payload.a.b.1", "trigger.payload.a.b.1.c"])
        refs = self.module("templates.js", "return m.references([{id: 'f', action: 'http.request'}, {id: 't', action: 'transform', with: {value: {x: 1}}}, {id: 'me', action: 'fail'}], 2, null)")
        self.assertEqual(refs[1]["items"], ["steps.f.output", "steps.f.output.status", "steps.f.output.headers",
                                            "steps.f.output.body", "steps.t.output", "steps.t.output.x"])
        # A callback's URL is offered to every step, also those before it.
        refs = self.module("templates.js", "return m.references([{id: 'send', action: 'http.request'}, {id: 'paid', action: 'callback'}], 0, null)")
        self.assertIn({"group": "Callback URLs", "items": ["callbacks.paid.url"]}, refs)
        # yaml.js: CRD field names, quoting of what YAML would read as something else
        # (a bare N or yes is a boolean to YAML 1.1 parsers).
        yaml = self.module("yaml.js", "return m.toYaml(m.manifest({id: 'wf-1', name: 'N', description: null, state: 'draft', "
                           "trigger: {type: 'manual'}, executor: null, timeout_ms: 5, steps: [{id: 's', action: 'delay', "
                           "with: {ms: 1, note: 'yes', tpl: '{{ run.id }}'}, retry: {max_attempts: 2}, timeout_ms: null, when: null}]}))")
        self.assertEqual(yaml, "\n".join([
            "apiVersion: flowline.io/v1", "kind: Workflow", "metadata:", "  name: wf-1", "spec:", "  name: \"N\"",
            "  state: draft", "  trigger:", "    type: manual", "  timeoutMs: 5", "  steps:", "  - id: s",
            "    action: delay", "    with:", "      ms: 1", '      note: "yes"', '      tpl: "{{ run.id }}"',
            "    retry:", "      maxAttempts: 2", ""]))
        # Flow control settings and a forEach's concurrency in the CRD's spelling.
        yaml = self.module("yaml.js", "return m.toYaml(m.manifest({id: 'wf-1', name: 'n', "
                           "rate_limit: {limit: 5, period_ms: 1000}, debounce: {key: 'k', period_ms: 2000, max_wait_ms: 9000}, "
                           "steps: [{id: 's', action: 'delay', with: {ms: 1}, for_each: '{{ trigger.payload.xs }}', for_each_concurrency: 2}]}))")
        for line in ["  rateLimit:", "    limit: 5", "    periodMs: 1000", "  debounce:", "    key: k",
                     "    periodMs: 2000", "    maxWaitMs: 9000", "    forEachConcurrency: 2"]:
            self.assertIn(line, yaml.split("\n"), yaml)
        # yaml.js reads back what it writes, and the block and flow forms people write.
        self.assertEqual(self.module("yaml.js", "const m0 = m.manifest({id: 'w', name: 'N', output: {aB: 1}, steps: [{id: 's', action: 'transform', "
                                     "with: {value: {k: ['yes', 1.5, -2, null, '{{ run.id }}', 'a: b', 'x # y', {}]}}, for_each: '{{ trigger.payload.xs }}'}]});"
                                     "return JSON.stringify(m.parseYaml(m.toYaml(m0))) === JSON.stringify(m0)"), True)
        hand = ("# a manifest\nkind: Workflow\nspec:\n  name: Hand\n  timeoutMs: 9\n  steps:\n    - id: a\n      action: container\n"
                "      with: {command: [sh, -c], env: {A: \"1\"}}\n      forEach: '{{ x }}'\n    - id: b\n      needs: [a]\n      with:\n"
                "        script: |\n          echo one\n          echo two\n")
        self.assertEqual(self.module("yaml.js", f"return m.fromManifest(m.parseYaml({json.dumps(hand)}))"), {
            "name": "Hand", "timeout_ms": 9, "steps": [
                {"id": "a", "action": "container", "with": {"command": ["sh", "-c"], "env": {"A": "1"}}, "for_each": "{{ x }}"},
                {"id": "b", "needs": ["a"], "with": {"script": "echo one\necho two\n"}}]})
        for bad, why in [("a: [1, 2", "line 1"), ("a: 1\na: 2", "given twice"), ("a: *x", "not supported"), ("a:\n\tb: 1", "tabs")]:
            self.assertIn(why, self.module("yaml.js", f"try {{ m.parseYaml({json.dumps(bad)}); return 'parsed'; }} catch (e) {{ return e.message; }}"))
        # graph.js: a chain without needs; with needs, longest-path layers (a diamond).
        self.assertEqual(self.module("graph.js", "return m.layout([{id: 'a'}, {id: 'b'}, {id: 'c'}]).place.map((p) => p.layer)"), [0, 1, 2])
        diamond = "[{id: 'a'}, {id: 'b', needs: ['a']}, {id: 'c', needs: ['a']}, {id: 'd', needs: ['c', 'b']}, {id: 'e'}]"
        self.assertEqual(self.module("graph.js", f"return m.layout({diamond}).layers"), [[0, 4], [1, 2], [3]])
        self.assertEqual(self.module("graph.js", f"return [m.waitsFor({diamond}, 3, 0), m.waitsFor({diamond}, 0, 3), m.waitsFor({diamond}, 4, 0)]"),
                         [True, False, False])
        # diff.js: a line diff keeps the common lines and orders removals first.
        self.assertEqual(self.module("diff.js", "return m.diffLines('a\\nb\\nc\\nd', 'a\\nc\\nx\\nd').map((l) => l.op + l.text)"),
                         [" a", "-b", " c", "+x", " d"])
        # templates.js: a template goes into JSON in quotes unless in a string; the
        # preview keeps a lone template's type.
        self.assertEqual(self.module("templates.js", "return [m.quoteAt('{\"a\": ', 6, 'T'), m.quoteAt('{\"a\": \"x', 8, 'T')]"), ['"T"', "T"])
        self.assertEqual(self.module("templates.js", "return m.preview({u: '{{ trigger.payload.c }}', s: 'hi {{ trigger.payload.c.n }}', k: '{{ steps.x.output }}'}, {c: {n: 1}})"),
                         {"u": {"n": 1}, "s": "hi 1", "k": "{{ steps.x.output }}"})


    def test_01_first_page_is_fast_compressed_cached_and_locked_down(self):
        self.driver.get(BASE + "/")
        self.find("#api-key")
        interactive = self.driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "return n.domContentLoadedEventEnd - n.startTime;")
        self.assertLess(interactive, 1000, "first page interactive in well under a second")
        self.shot("sign-in")
        with urllib.request.urlopen(urllib.request.Request(BASE + "/", headers={"Accept-Encoding": "gzip"})) as res:
            self.assertEqual(res.headers["Cache-Control"], "no-cache")
            self.assertIn("default-src 'self'", res.headers["Content-Security-Policy"])
            self.assertEqual(res.headers["Content-Encoding"], "gzip")
        script = self.driver.find_element(By.CSS_SELECTOR, "script[type=module]").get_attribute("src")
        self.assertRegex(script, r"/assets/[0-9a-f]{12}/app\.js$")
        with urllib.request.urlopen(urllib.request.Request(script, headers={"Accept-Encoding": "gzip"})) as res:
            self.assertEqual(res.headers["Cache-Control"], "public, max-age=31536000, immutable")
            self.assertEqual(res.headers["Content-Encoding"], "gzip")
        # /v1 is untouched: an unknown route there is still the API's JSON 404.
        status, body = api("GET", "/nope")
        self.assertEqual((status, body["error"]["code"]), (404, "not_found"))

    def test_02_a_wrong_key_is_refused_on_the_sign_in_form(self):
        self.driver.get(BASE + "/workflows")
        self.find("#api-key").send_keys("flk_" + "x" * 40)
        self.click("form button[type=submit]")
        self.text_in("#sign-in-error", "not valid")
        self.assertEqual(self.find("#api-key").get_attribute("aria-invalid"), "true")

    def test_03_sign_in_and_out(self):
        # Signing in asks the key's scopes once (GET /v1/me): no refused request is
        # left in the browser's log, for any key.
        for key, scope in ((READ_KEY, "read"), (ADMIN_KEY, "admin")):
            self.driver.get_log("browser")
            self.sign_in(key)
            self.text_in("#scopes", scope)
            failed = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
            self.assertEqual(failed, [], f"signing in with the {scope} key")
        self.text_in("#scopes", "admin")
        self.find('nav a[href="/api-keys"]')
        self.click("#sign-out")
        self.find("#api-key")
        self.assertIsNone(self.driver.execute_script("return sessionStorage.getItem('flowline.key')"))
        self.sign_in(ADMIN_KEY)
        self.find("h1")
        self.shot("workflows-empty")

    def test_03b_the_empty_state_offers_starter_templates_that_run(self):
        self.ensure_admin()
        self.go("/workflows", "#starters")
        cards = self.driver.find_elements(By.CSS_SELECTOR, "#starters li[data-template]")
        self.assertEqual([c.get_attribute("data-template") for c in cards], ["diamond", "approval", "fan-out"])
        self.shot("workflows-starters")
        self.click('#starters a[href="/workflows/new?template=diamond"]')
        self.wait.until(lambda d: self.step_ids() == ["start", "left", "right", "join"])
        self.assertEqual(self.edges("builder-graph"), ["left>join", "right>join", "start>left", "start>right"])
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        steps = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1]["steps"])
        self.assertEqual([(s["id"], s["needs"]) for s in steps],
                         [("start", []), ("left", ["start"]), ("right", ["start"]), ("join", ["left", "right"])])
        # It runs as it is: no payload needed.
        self.assertEqual(api("PATCH", f"/workflows/{wf}", {"state": "active"})[0], 200)
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["status"] != "running")
        view = api("GET", f"/runs/{run['id']}")[1]
        self.assertEqual(view["status"], "succeeded", view)
        self.assertEqual(view["steps"][3]["output"], {"left": f"left of {run['id']}", "right": f"right of {run['id']}"})

    def test_04_build_a_three_step_workflow_with_drag_and_keyboard_reorder(self):
        self.ensure_admin()
        self.click('a[href="/workflows/new"]')
        self.set_value(self.find("#wf-name"), "Greeting")
        # The actions offered are the ones this server's OpenAPI document lists.
        with urllib.request.urlopen(BASE + "/v1/openapi.json") as res:
            actions = json.load(res)["components"]["schemas"]["Action"]["enum"]
        offered = [o.get_attribute("value") for o in Select(self.find("#new-step-action")).options]
        self.assertEqual(offered, actions)
        self.set_value(self.find("#sample-payload"), '{"name": "Ada", "order": {"id": 7}}')
        # Added out of order on purpose: the drag and the keyboard put them right.
        first = self.add_step("transform", "shout")
        self.add_step("delay", "pause")
        hello = self.add_step("transform", "hello")
        self.set_value(self.step_field(1, "with.ms"), "400")
        # The template helper lists the sample's paths and inserts one at the cursor.
        value = self.step_field(hello, "with.value")
        self.set_value(value, '{"greeting": ""}')
        value.send_keys(Keys.LEFT, Keys.LEFT)
        card = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[hello]
        self.press(card.find_element(By.CSS_SELECTOR, "details.refs summary"))
        chip = WebDriverWait(card, WAIT).until(
            lambda c: c.find_element(By.XPATH, ".//button[text()='trigger.payload.name']"))
        self.assertTrue(card.find_elements(By.XPATH, ".//button[text()='trigger.payload.order.id']"))
        self.press(chip)
        self.assertEqual(value.get_attribute("value"), '{"greeting": "{{ trigger.payload.name }}"}')
        self.set_value(self.step_field(first, "with.value"), '{"loud": "{{ steps.hello.output.greeting }}!"}')
        self.shot("builder")
        # Drag "hello" (last) above "shout" (first) by its handle, in a window tall
        # enough to show both.
        self.driver.set_window_size(1280, 1600)
        try:
            cards = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")
            handle = cards[2].find_element(By.CSS_SELECTOR, ".handle")
            target = cards[0]
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", target)
            ActionChains(self.driver).click_and_hold(handle).move_to_element_with_offset(
                target, 0, -target.size["height"] // 2 + 4).release().perform()
            self.wait.until(lambda d: self.step_ids() == ["hello", "shout", "pause"])
        finally:
            self.driver.set_window_size(1280, 1000)
        # Keyboard: focus the handle of "pause" and press Arrow Up once.
        handle = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card .handle")[2]
        handle.send_keys(Keys.ARROW_UP)
        self.wait.until(lambda d: self.step_ids() == ["hello", "pause", "shout"])
        self.assertEqual(self.driver.switch_to.active_element.get_attribute("class"), "handle",
                         "focus stays on the moved step's handle")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        self.find("#activate")
        Console.workflow_id = self.driver.current_url.rsplit("/", 1)[1]
        status, wf = api("GET", f"/workflows/{Console.workflow_id}")
        self.assertEqual(status, 200)
        self.assertEqual([s["id"] for s in wf["steps"]], ["hello", "pause", "shout"])
        self.assertEqual(wf["steps"][0]["with"], {"value": {"greeting": "{{ trigger.payload.name }}"}})
        self.assertEqual(wf["steps"][1]["with"], {"ms": 400})

    def test_04b_a_diamond_is_built_by_connecting_nodes_of_the_graph(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Diamond")
        for step_id, action in [("a", "transform"), ("b", "delay"), ("c", "delay"), ("d", "transform")]:
            self.add_step(action, step_id)
        for index in (1, 2):
            self.set_value(self.step_field(index, "with.ms"), "3000")
        # No needs yet: a chain, drawn and said so.
        self.wait.until(lambda d: self.edges("builder-graph") == ["a>b", "b>c", "c>d"])
        self.text_in("#steps-help", "Steps run in order")
        self.assertEqual(self.node("builder-graph", "b").get_attribute("data-kind"), "wait")
        # Click a's connect handle, then b: b needs a, and the steps are a graph now.
        self.click('#builder-graph [data-port="a"]')
        self.text_in("#builder-graph .graph-hint", "Connecting from a")
        self.click('#builder-graph [data-node="b"]')
        self.wait.until(lambda d: self.edges("builder-graph") == ["a>b"])
        self.text_in("#steps-help", "form a graph")
        self.click('#builder-graph [data-port="a"]')
        self.click('#builder-graph [data-node="c"]')
        # Drag from b's handle onto d (held by their drawn parts: chromedriver places an
        # SVG group's pointer position poorly).
        port = self.find('#builder-graph [data-port="b"] circle')
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", port)
        ActionChains(self.driver).click_and_hold(port).move_by_offset(20, 10).move_to_element(
            self.find('#builder-graph [data-node="d"] .shape')).release().perform()
        self.wait.until(lambda d: self.edges("builder-graph") == ["a>b", "a>c", "b>d"])
        # The keyboard: Enter on c's handle, then Enter on d.
        self.driver.execute_script("arguments[0].focus()", self.find('#builder-graph [data-port="c"]'))
        self.keys(Keys.ENTER)
        self.wait.until(lambda d: d.switch_to.active_element.get_attribute("data-port") == "c")
        self.driver.execute_script("arguments[0].focus()", self.node("builder-graph", "d"))
        self.keys(Keys.ENTER)
        self.wait.until(lambda d: self.edges("builder-graph") == ["a>b", "a>c", "b>d", "c>d"])
        # A connection that would close a cycle is refused.
        self.click('#builder-graph [data-port="d"]')
        self.click('#builder-graph [data-node="a"]')
        self.text_in("#toasts", "would be a cycle")
        self.assertEqual(self.edges("builder-graph"), ["a>b", "a>c", "b>d", "c>d"])
        self.text_in('#steps .step-card:nth-child(4) .needs', "b")
        self.text_in('#steps .step-card:nth-child(4) .needs', "c")
        self.driver.execute_script("document.getElementById('steps-title').scrollIntoView()")
        self.shot("builder-graph")
        # Clicking a node selects its card and puts the focus in it.
        self.click('#builder-graph [data-node="c"]')
        self.wait.until(lambda d: "selected" in d.find_elements(By.CSS_SELECTOR, "#steps .step-card")[2].get_attribute("class"))
        self.assertEqual(self.driver.switch_to.active_element.get_attribute("data-field"), "steps[2].id")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        Console.diamond_id = self.driver.current_url.rsplit("/", 1)[1]
        steps = self.wait.until(lambda d: api("GET", f"/workflows/{Console.diamond_id}")[1]["steps"])
        self.assertEqual([(s["id"], s["needs"]) for s in steps], [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])])

    def test_04c_an_inserted_template_keeps_the_json_valid_and_produces_an_object(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Reshape")
        self.set_value(self.find("#sample-payload"), '{"customer": {"email": "ada@example.com"}}')
        index = self.add_step("transform", "pick")
        value = self.step_field(index, "with.value")
        # Text that is not JSON is said to be one string.
        self.set_value(value, '{"who": {{ trigger.payload.customer }}}')
        self.text_in(f"#steps .step-card:nth-child({index + 1}) .value-preview", "Not valid JSON")
        self.assertEqual(value.get_attribute("aria-invalid"), "true")
        self.set_value(value, '{"who": }')
        value.send_keys(Keys.LEFT)
        card = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[index]
        self.press(card.find_element(By.CSS_SELECTOR, "details.refs summary"))
        chip = WebDriverWait(card, WAIT).until(lambda c: c.find_element(By.XPATH, ".//button[text()='trigger.payload.customer']"))
        self.press(chip)
        self.assertEqual(value.get_attribute("value"), '{"who": "{{ trigger.payload.customer }}"}')
        self.assertIsNone(value.get_attribute("aria-invalid"))
        # The preview shows the object the step receives with the sample payload.
        preview = self.find(f"#steps .step-card:nth-child({index + 1}) .preview-value")
        self.assertEqual(json.loads(preview.text), {"who": {"email": "ada@example.com"}})
        self.shot("builder-template-preview")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        self.assertEqual(api("PATCH", f"/workflows/{wf}", {"state": "active"})[0], 200)
        status, run = api("POST", f"/workflows/{wf}/runs", {"payload": {"customer": {"email": "ada@example.com"}}})
        self.assertEqual(status, 201, run)
        self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["status"] == "succeeded")
        self.assertEqual(api("GET", f"/runs/{run['id']}")[1]["steps"][0]["output"], {"who": {"email": "ada@example.com"}})

    def test_04d_the_graph_sits_beside_the_cards_on_a_wide_window(self):
        self.ensure_admin()
        chain = [{"id": f"s{i}", "action": "transform", "with": {"value": {"n": i}}} for i in range(1, 7)]
        chain[2]["needs"] = ["s1"]
        for i in (1, 3, 4, 5):
            chain[i]["needs"] = [f"s{i}"]
        wf = self.make_workflow("Beside", chain, state="draft")
        rect = "const r = arguments[0].getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, h: innerHeight, w: innerWidth};"
        in_view = lambda r: r["top"] < r["h"] and r["bottom"] > 0 and r["left"] < r["w"] and r["right"] > 0
        self.driver.set_window_size(1400, 900)
        try:
            self.go(f"/workflows/{wf}", "#steps .step-card")
            graph = self.find("#builder-graph")
            self.assertEqual(graph.tag_name, "section")
            self.assertEqual(graph.get_attribute("aria-label"), "Graph of the steps")
            self.driver.execute_script("document.getElementById('steps-title').scrollIntoView()")
            # The graph is to the right of the cards, and both are in view at once.
            g = self.driver.execute_script(rect, graph)
            cards = self.driver.execute_script(rect, self.find("#steps"))
            first = self.driver.execute_script(rect, self.find("#steps .step-card"))
            self.assertGreaterEqual(g["left"], cards["right"], (g, cards))
            self.assertTrue(in_view(g) and in_view(first), (g, first))
            # Beside the cards its layers go down the column, as the cards do.
            node = lambda step: self.driver.execute_script(rect, self.node("builder-graph", step))
            self.assertLess(node("s1")["bottom"], node("s2")["top"])
            self.assertGreater(cards["bottom"], g["h"], "the cards are taller than the window")
            self.shot("builder-graph-beside")
            # Scrolled to the last card, the graph is still in view (sticky).
            last = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[-1]
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'end'})", last)
            self.wait.until(lambda d: in_view(d.execute_script(rect, graph)) and d.execute_script(rect, graph)["top"] >= 0)
            self.assertTrue(in_view(self.driver.execute_script(rect, last)))
            self.assertGreater(self.driver.execute_script("return scrollY"), 0)
            self.shot("builder-graph-beside-scrolled")
            # A node chosen with the keyboard selects its card and puts the focus in it;
            # the node of the card being edited is marked.
            self.driver.execute_script("arguments[0].focus()", self.node("builder-graph", "s2"))
            self.keys(Keys.ENTER)
            self.wait.until(lambda d: d.switch_to.active_element.get_attribute("data-field") == "steps[1].id")
            self.assertIn("selected", self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[1].get_attribute("class"))
            self.wait.until(lambda d: "current" in self.node("builder-graph", "s2").get_attribute("class"))
            self.assertTrue(in_view(self.driver.execute_script(rect, graph)))
            # A narrower window stacks them again: the graph above the cards.
            self.driver.set_window_size(1000, 900)

            def stacked(d):
                d.execute_script("document.getElementById('steps-title').scrollIntoView()")
                return d.execute_script(rect, graph)["bottom"] <= d.execute_script(rect, d.find_element(By.ID, "steps"))["top"]
            self.wait.until(stacked)
            self.assertLess(node("s1")["right"], node("s2")["left"], "layers left to right again")
        finally:
            self.driver.set_window_size(1280, 1000)

    def test_04e_a_name_value_field_previews_an_inserted_template(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Headers")
        self.set_value(self.find("#sample-payload"), '{"customer": {"id": "c-42"}}')
        index = self.add_step("http.request", "call")
        self.set_value(self.step_field(index, "with.url"), "https://example.test/hook")
        headers = self.step_field(index, "with.headers")
        self.set_value(headers, "Accept: application/json\nX-Customer: ")
        card = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[index]
        self.press(card.find_element(By.CSS_SELECTOR, "details.refs summary"))
        chip = WebDriverWait(card, WAIT).until(lambda c: c.find_element(By.XPATH, ".//button[text()='trigger.payload.customer.id']"))
        self.press(chip)
        # Inserted as a template (no quotes: this is not JSON), previewed as the step
        # receives it, written as the field is.
        self.assertEqual(headers.get_attribute("value"), "Accept: application/json\nX-Customer: {{ trigger.payload.customer.id }}")
        preview = self.find(f"#steps .step-card:nth-child({index + 1}) [id$='-with-headers-preview'] .preview-value")
        self.assertEqual(preview.text, "Accept: application/json\nX-Customer: c-42")
        self.shot("builder-name-value-preview")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        steps = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1]["steps"])
        self.assertEqual(steps[0]["with"]["headers"], {"Accept": "application/json", "X-Customer": "{{ trigger.payload.customer.id }}"})

    def test_04f_a_single_line_field_previews_an_inserted_template(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Single line")
        self.set_value(self.find("#sample-payload"), '{"order": {"id": 7}}')
        index = self.add_step("http.request", "fetch")
        url = self.step_field(index, "with.url")
        self.set_value(url, "https://api.example.test/orders/")
        # No template yet: nothing to preview.
        said = f"#steps .step-card:nth-child({index + 1}) [id$='-with-url-preview']"
        self.assertEqual(self.driver.find_element(By.CSS_SELECTOR, said).get_attribute("textContent"), "")
        card = self.driver.find_elements(By.CSS_SELECTOR, "#steps .step-card")[index]
        self.press(card.find_element(By.CSS_SELECTOR, "details.refs summary"))
        chip = WebDriverWait(card, WAIT).until(lambda c: c.find_element(By.XPATH, ".//button[text()='trigger.payload.order.id']"))
        self.press(chip)
        # Inserted at the cursor as a bare template; the preview fills in the sample's value.
        self.assertEqual(url.get_attribute("value"), "https://api.example.test/orders/{{ trigger.payload.order.id }}")
        preview = self.find(f"{said} .preview-value")
        self.assertEqual(preview.text, "https://api.example.test/orders/7")
        # A one-line output does not overflow its box: no Tab stop.
        self.assertIsNone(preview.get_attribute("tabindex"))
        self.shot("builder-url-preview")
        # Typed by hand, the preview follows; a value only the run knows stays a template.
        self.set_value(url, "https://api.example.test/{{ trigger.payload.order.id }}/{{ run.id }}")
        self.text_in(f"{said} .preview-value", "https://api.example.test/7/{{ run.id }}")

    def test_05_api_validation_errors_show_on_their_field(self):
        self.ensure_admin()
        self.go(f"/workflows/{Console.workflow_id}", "#steps .step-card")
        index = self.add_step("http.request", "call")
        self.set_value(self.step_field(index, "with.url"), "not a url")
        self.click("#save")
        error = self.find(f'[data-field="steps[{index}].with.url"] + .field-error')
        self.assertIn("http(s) URL", error.text)
        self.assertNotIn("steps[", error.text, "under its field, no API path")
        self.assertEqual(self.step_field(index, "with.url").get_attribute("aria-invalid"), "true")
        self.text_in("#form-error", "1 problem")
        self.shot("validation-error")
        status, wf = api("GET", f"/workflows/{Console.workflow_id}")
        self.assertEqual(len(wf["steps"]), 3, "nothing was saved")

    def test_05b_a_refused_new_workflow_leaves_no_draft_behind(self):
        self.ensure_admin()
        named = lambda: [w for w in api("GET", "/workflows?limit=100")[1]["data"] if w["name"] == "Half saved"]
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Half saved")
        index = self.add_step("http.request", "call")
        self.set_value(self.step_field(index, "with.url"), "not a url")
        self.click("#save")
        self.text_in("#form-error", "1 problem")
        self.assertIn("http(s) URL", self.find(f'[data-field="steps[{index}].with.url"] + .field-error').text)
        self.assertTrue(self.driver.current_url.endswith("/workflows/new"), self.driver.current_url)
        self.assertEqual(named(), [], "the refused workflow left no draft behind")
        self.set_value(self.step_field(index, "with.url"), "http://127.0.0.1:9/x")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        # The steps land with the PATCH that follows the create.
        steps = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1]["steps"])
        self.assertEqual(steps[0]["with"]["url"], "http://127.0.0.1:9/x")
        self.assertEqual([w["id"] for w in named()], [wf])

    def test_05c_the_builder_guards_unsaved_edits_saves_on_ctrl_s_and_warns_on_a_needed_step(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "Guarded")
        self.add_step("transform", "first")
        second = self.add_step("transform", "second")
        Select(self.step_field(second, "needs")).select_by_value("first")
        self.click(f'[data-field="steps[{second}].needs"] + button')
        self.text_in(f'#steps .step-card:nth-child({second + 1}) .needs', "first")
        # Removing a step another one needs asks first; refused, nothing changes.
        self.answer_confirm(False)
        self.click('[aria-label="Remove step 1"]')
        self.assertEqual(self.step_ids(), ["first", "second"])
        # Leaving with edits not saved asks first; refused, the page stays.
        self.click('#nav a[href="/workflows"]')
        self.assertTrue(self.driver.current_url.endswith("/workflows/new"), self.driver.current_url)
        self.assertEqual(self.sent("/v1/workflows"), 0)
        # Ctrl+S saves.
        self.find("#wf-name").send_keys(Keys.CONTROL, "s")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        steps = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1]["steps"])
        self.assertEqual([(s["id"], s.get("needs")) for s in steps], [("first", []), ("second", ["first"])])
        # Accepted, the removal takes the step out of the other's needs too.
        self.answer_confirm(True)
        self.click('[aria-label="Remove step 1"]')
        self.assertEqual(self.step_ids(), ["second"])
        self.find("#wf-name").send_keys(Keys.CONTROL, "s")
        self.wait.until(lambda d: [(s["id"], s.get("needs")) for s in api("GET", f"/workflows/{wf}")[1]["steps"]] == [("second", [])])
        # Nothing unsaved: leaving asks nothing (a question would be refused here).
        self.answer_confirm(False)
        self.click('#nav a[href="/workflows"]')
        self.wait.until(EC.url_matches(r"/workflows$"))

    def test_05d_undo_and_redo_in_the_builder(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.assertFalse(self.find("#undo").is_enabled())
        self.set_value(self.find("#wf-name"), "Undone")
        self.add_step("transform", "one")
        two = self.add_step("transform", "two")
        Select(self.step_field(two, "needs")).select_by_value("one")
        self.click(f'[data-field="steps[{two}].needs"] + button')
        self.wait.until(lambda d: self.edges("builder-graph") == ["one>two"])
        # Ctrl+Z: the dependency goes, then the typed id, then the step.
        self.keys(Keys.CONTROL, "z")
        self.wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#steps .needs"))
        self.assertEqual(self.step_ids(), ["one", "two"])
        self.text_in("#steps-help", "Steps run in order")
        self.keys(Keys.CONTROL, "z")
        self.wait.until(lambda d: self.step_ids() == ["one", "step-2"])
        self.click("#undo")
        self.wait.until(lambda d: self.step_ids() == ["one"])
        self.assertEqual(self.find("#wf-name").get_attribute("value"), "Undone")
        # Redo, by the keys and by the button, gives them back.
        self.keys(Keys.CONTROL, Keys.SHIFT, "z")
        self.wait.until(lambda d: self.step_ids() == ["one", "step-2"])
        self.keys(Keys.CONTROL, "y")
        self.wait.until(lambda d: self.step_ids() == ["one", "two"])
        self.click("#redo")
        self.text_in("#steps .step-card:nth-child(2) .needs", "one")
        self.text_in("#steps-help", "form a graph")
        self.assertEqual(self.edges("builder-graph"), ["one>two"])
        self.assertFalse(self.find("#redo").is_enabled())
        self.shot("builder-undo")
        # An edit after an undo drops what could have been redone.
        self.click("#undo")
        self.wait.until(lambda d: self.find("#redo").is_enabled())
        self.set_value(self.find("#wf-name"), "Undone again")
        self.wait.until(lambda d: not d.find_element(By.ID, "redo").is_enabled())
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        saved = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1])
        self.assertEqual((saved["name"], [(s["id"], s["needs"]) for s in saved["steps"]]),
                         ("Undone again", [("one", []), ("two", [])]))

    def test_06_schedule_preview_lists_the_next_fire_times(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-trigger-type")
        Select(self.find("#wf-trigger-type")).select_by_value("schedule")
        self.set_value(self.find("#wf-trigger-cron"), "30 9 * * 1")
        self.set_value(self.find("#wf-trigger-timezone"), "Europe/Paris")
        self.text_in("#schedule-preview", "Europe/Paris")
        times = self.driver.find_elements(By.CSS_SELECTOR, "#schedule-preview li")
        self.assertEqual(len(times), 5)
        for t in times:
            self.assertIn("Mon", t.text)
            self.assertIn("09:30", t.text)
        self.set_value(self.find("#wf-trigger-cron"), "61 * * * *")
        self.text_in("#schedule-preview", "outside 0-59")
        self.set_value(self.find("#wf-trigger-cron"), "*/15 * * * *")
        self.text_in("#schedule-preview", "Every 15 minutes")
        self.shot("schedule-preview")

    def test_06h_a_schedule_sets_overlap_catch_up_and_priority_and_backfills_past_ticks(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-trigger-type")
        self.set_value(self.find("#wf-name"), "Hourly report")
        Select(self.find("#wf-trigger-type")).select_by_value("schedule")
        self.set_value(self.find("#wf-trigger-cron"), "0 * * * *")
        Select(self.find("#trigger-overlap")).select_by_value("skip")
        self.set_value(self.find("#wf-trigger-catchup_window_ms"), "3600000")
        Select(self.find("#wf-priority")).select_by_value("2")
        self.add_step("transform", "stamp")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        saved = self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1])
        self.assertEqual(saved["trigger"]["overlap"], "skip", saved)
        self.assertEqual(saved["trigger"]["catchup_window_ms"], 3600000, saved)
        self.assertEqual(saved["priority"], 2, saved)
        # Backfill the last three hours from the schedule editor: three runs, then none.
        self.driver.execute_script(
            "const d = new Date(Date.now() - 3 * 3600000 + 60000);"
            "const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);"
            "const f = document.getElementById('backfill-from'); f.value = local;"
            "f.dispatchEvent(new Event('input', { bubbles: true }));")
        self.click("#backfill")
        self.text_in("#backfill-status", "3 runs started")
        self.click("#backfill")
        self.text_in("#backfill-status", "0 runs started")
        status, page = api("GET", f"/workflows/{wf}/runs?limit=100")
        self.assertEqual(status, 200, page)
        self.assertEqual(len(page["data"]), 3)
        self.shot("schedule-backfill")

    def test_06b_a_webhook_trigger_shows_its_url_and_secret_once(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-trigger-type")
        self.set_value(self.find("#wf-name"), "Inbound")
        Select(self.find("#wf-trigger-type")).select_by_value("webhook")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        secret = self.find("#once input[data-secret]").get_attribute("value")
        self.assertTrue(secret.startswith("whsec_"), secret)
        self.text_in("#hook-url", f"/v1/hooks/{wf}")
        self.shot("webhook-trigger")
        # Activating redraws the page: the secret stays until the page is left.
        self.click("#activate")
        self.wait.until(EC.presence_of_element_located((By.ID, "pause")))
        self.assertEqual(self.find("#once input[data-secret]").get_attribute("value"), secret)
        self.go(f"/workflows/{wf}", "#hook-url")
        self.assertNotIn(secret, self.driver.page_source, "the inbound secret is shown only once")

    def test_06c_an_event_trigger_takes_its_name_and_filter(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-trigger-type")
        self.set_value(self.find("#wf-name"), "On orders")
        Select(self.find("#wf-trigger-type")).select_by_value("event")
        self.set_value(self.find("#wf-trigger-event"), "order.created")
        self.set_value(self.find("#wf-trigger-filter"), "event.payload.total > 100")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        self.go(f"/workflows/{wf}", "#wf-trigger-event")
        self.assertEqual(self.find("#wf-trigger-event").get_attribute("value"), "order.created")
        self.assertEqual(
            self.find("#wf-trigger-filter").get_attribute("value"), "event.payload.total > 100"
        )
        self.shot("event-trigger")

    def test_06d_events_list_and_detail_link_the_runs_an_event_started(self):
        self.ensure_admin()
        wf = self.make_workflow("On paid", [{"id": "s", "action": "transform", "with": {"value": 1}}])
        status, _ = api("PATCH", f"/workflows/{wf}", {"trigger": {"type": "event", "event": "console.paid"}})
        self.assertEqual(status, 200)
        sent = {"name": "console.paid", "id": "order-3-paid", "payload": {"total": 3}}
        status, posted = api("POST", "/events", sent)
        self.assertEqual(status, 202, posted)
        # The same id again: the first event answers, nothing new is stored or started.
        status, again = api("POST", "/events", sent)
        self.assertEqual((status, again["id"]), (200, posted["id"]), again)
        self.go("/events?name=console.paid", "#events")
        rows = self.driver.find_elements(By.CSS_SELECTOR, "#events tbody tr")
        self.assertEqual([r.get_attribute("data-id") for r in rows], [posted["id"]])
        row = self.find(f'#events tr[data-id="{posted["id"]}"]')
        self.assertIn("console.paid", row.text)
        self.click(f'#events a[href="/events/{posted["id"]}"]')
        self.text_in("#event-name", "console.paid")
        # The fan-out lands shortly after the 202: the page shows it once reloaded.
        self.wait.until(lambda d: api("GET", f"/events/{posted['id']}")[1]["runs"])
        self.go(f"/events/{posted['id']}", "#event-runs")
        run = api("GET", f"/events/{posted['id']}")[1]["runs"][0]
        self.shot("event")
        self.click(f'#event-runs a[href="/runs/{run}"]')
        self.wait.until(EC.url_contains(run))
        self.text_in("#run-event", posted["id"])

    def test_06e_an_event_resumes_a_waiting_run_and_lists_it(self):
        self.ensure_admin()
        wf = self.make_workflow("Await shipping", [
            {"id": "shipped", "action": "wait_for_event",
             "with": {"event": "console.shipped", "match": "event.payload.order == trigger.payload.order"}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {"payload": {"order": 4}})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#timeline")
        self.lane_is("shipped", "waiting")
        # Another order's event is fanned out without touching this run.
        status, other = api("POST", "/events", {"name": "console.shipped", "payload": {"order": 5}})
        self.assertEqual(status, 202, other)
        self.wait.until(lambda d: api("GET", f"/events/{other['id']}")[1].get("resumed") == [])
        self.wait.until(lambda d: api("GET", f"/events/{other['id']}")[1].get("runs") is not None)
        self.assertEqual(api("GET", f"/runs/{run['id']}")[1]["steps"][0]["status"], "waiting")
        status, posted = api("POST", "/events", {"name": "console.shipped", "payload": {"order": 4}})
        self.assertEqual(status, 202, posted)
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.go(f"/events/{posted['id']}", "#event-name")
        self.wait.until(lambda d: api("GET", f"/events/{posted['id']}")[1]["resumed"])
        self.go(f"/events/{posted['id']}", "#event-resumed")
        self.find(f'#event-resumed a[href="/runs/{run["id"]}"]')
        self.shot("event-resumed")

    def test_06f_cancel_on_set_in_the_builder_cancels_the_matching_run(self):
        self.ensure_admin()
        wf = self.make_workflow("Cancellable", [{"id": "hold", "action": "delay", "with": {"ms": 60000}}])
        self.go(f"/workflows/{wf}", "#cancel-on-add")
        self.click("#cancel-on-add")
        event = self.find('[data-field="cancel_on[0].event"]')
        self.set_value(event, "console.stop")
        match = self.find('[data-field="cancel_on[0].match"]')
        self.set_value(match, "event.payload.order ==")
        self.click("#save")
        # The API's refusal lands on the field that caused it.
        self.wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '[data-field="cancel_on[0].match"]').get_attribute("aria-invalid") == "true")
        self.set_value(self.find('[data-field="cancel_on[0].match"]'), "event.payload.order == trigger.payload.order")
        self.click("#save")
        self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1].get("cancel_on"))
        self.assertEqual(api("GET", f"/workflows/{wf}")[1]["cancel_on"],
                         [{"event": "console.stop", "match": "event.payload.order == trigger.payload.order"}])
        status, mine = api("POST", f"/workflows/{wf}/runs", {"payload": {"order": 1}})
        self.assertEqual(status, 201, mine)
        status, other = api("POST", f"/workflows/{wf}/runs", {"payload": {"order": 2}})
        self.assertEqual(status, 201, other)
        self.go(f"/runs/{mine['id']}", "#timeline")
        self.lane_is("hold", "running")
        status, posted = api("POST", "/events", {"name": "console.stop", "payload": {"order": 1}})
        self.assertEqual(status, 202, posted)
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "cancelled")
        self.text_in("#run-error", f"cancelled by event {posted['id']}")
        self.shot("run-cancelled-by-event")
        self.wait.until(lambda d: api("GET", f"/events/{posted['id']}")[1]["cancelled"])
        self.go(f"/events/{posted['id']}", "#event-cancelled")
        self.find(f'#event-cancelled a[href="/runs/{mine["id"]}"]')
        self.assertEqual(api("GET", f"/runs/{other['id']}")[1]["status"], "running")
        self.assertEqual(api("POST", f"/runs/{other['id']}/cancel")[0], 202)

    def test_06g_a_callback_called_twice_completes_its_step_once(self):
        self.ensure_admin()
        wf = self.make_workflow("Await reply", [
            {"id": "hand", "action": "transform", "with": {"value": "{{ callbacks.reply.url }}"}},
            {"id": "reply", "action": "callback", "with": {"timeout_ms": 600000}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#timeline")
        self.lane_is("reply", "waiting")
        url = api("GET", f"/runs/{run['id']}")[1]["steps"][0]["output"]
        self.assertTrue(url.startswith(BASE + "/v1/callbacks/"), url)
        answers = []
        for body in ({"approved_by": "ops"}, {"approved_by": "someone else"}):
            req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as res:
                    answers.append((res.status, json.loads(res.read())))
            except urllib.error.HTTPError as e:
                answers.append((e.code, json.loads(e.read())))
        self.assertEqual(answers[0], (200, {"run_id": run["id"], "step_id": "reply"}))
        self.assertEqual((answers[1][0], answers[1][1]["error"]["code"]), (409, "callback_used"))
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.click("#step-reply summary")
        self.text_in("#step-reply", "ops")
        self.assertNotIn("someone else", self.find("#step-reply").text)
        self.shot("run-callback")

    def test_07_yaml_view_of_the_manifest(self):
        self.ensure_admin()
        self.go(f"/workflows/{Console.workflow_id}", "#steps .step-card")
        # The builder's tab panel wraps its form (a form may not be a tab panel); Arrow
        # Right and Arrow Left move between the tabs and show their panels.
        tab = self.find("#tab-builder")
        self.assertEqual(tab.get_attribute("aria-controls"), "builder-panel")
        self.assertEqual(self.find("#builder-panel").get_attribute("role"), "tabpanel")
        self.assertIsNone(self.find("#builder").get_attribute("role"))
        self.assertEqual(self.driver.execute_script("return document.getElementById('builder').parentElement.id"), "builder-panel")
        self.driver.execute_script("arguments[0].focus()", tab)
        self.keys(Keys.ARROW_RIGHT)
        self.wait.until(lambda d: d.switch_to.active_element.get_attribute("id") == "tab-yaml")
        self.find("#yaml-panel")
        self.assertEqual(self.find("#tab-yaml").get_attribute("aria-selected"), "true")
        self.assertFalse(self.driver.find_element(By.ID, "builder-panel").is_displayed())
        self.keys(Keys.ARROW_LEFT)
        self.find("#builder-panel #steps .step-card")
        self.assertEqual(self.driver.switch_to.active_element.get_attribute("id"), "tab-builder")
        self.assertFalse(self.driver.find_element(By.ID, "yaml-panel").is_displayed())
        self.click("#tab-yaml")
        yaml = self.find("#yaml").text
        self.assertIn("apiVersion: flowline.io/v1", yaml)
        self.assertIn("kind: Workflow", yaml)
        self.assertIn(f"name: {Console.workflow_id}", yaml)
        self.assertIn('greeting: "{{ trigger.payload.name }}"', yaml)
        self.assertLess(yaml.index("id: hello"), yaml.index("id: pause"))
        # The manifest is what kubectl would apply: the API server accepts it, strictly.
        check = subprocess.run(
            ["kubectl", "apply", "--server-side", "--dry-run=server", "--force-conflicts",
             "--validate=strict", "-n", NAMESPACE, "-f", "-"],
            input=yaml, capture_output=True, text=True, timeout=30)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.find("#copy-yaml")
        # A download from a blob: URL; the log check after the scenario sees no CSP refusal.
        self.click("#download-yaml")
        self.shot("yaml")

    def test_07b_a_manifest_is_imported_checked_by_the_server_and_applied_or_refused_whole(self):
        self.ensure_admin()
        wf = self.make_workflow("Imported", [{"id": "old", "action": "transform", "with": {"value": 1}}], state="paused")
        self.go(f"/workflows/{wf}", "#tab-yaml")
        self.click("#tab-yaml")
        self.click("#yaml-edit")
        self.assertIn("id: old", self.find("#yaml-import").get_attribute("value"))
        manifest = "\n".join([
            "apiVersion: flowline.io/v1", "kind: Workflow", "metadata:", "  name: ignored", "spec:",
            "  name: Imported twice   # renamed", "  timeoutMs: 60000", "  steps:",
            "    - id: fetch", "      action: transform", "      with: {value: {order: \"{{ trigger.payload.order }}\", n: 2}}",
            "    - id: check", "      action: transform", "      needs: [fetch]", "      with:", "        value: |", "          two", "          lines", ""])
        self.set_value(self.find("#yaml-import"), manifest)
        self.click("#yaml-apply")
        self.text_in("#toasts", "Manifest applied")
        saved = api("GET", f"/workflows/{wf}")[1]
        self.assertEqual((saved["name"], saved["timeout_ms"]), ("Imported twice", 60000))
        self.assertEqual([(s["id"], s["needs"], s["with"]) for s in saved["steps"]], [
            ("fetch", [], {"value": {"order": "{{ trigger.payload.order }}", "n": 2}}),
            ("check", ["fetch"], {"value": "two\nlines\n"})])
        # The builder shows what was applied.
        self.wait.until(lambda d: self.step_ids() == ["fetch", "check"])
        # Refused by the server: its reasons in words, nothing changed.
        self.click("#tab-yaml")
        bad = "\n".join(["kind: Workflow", "spec:", "  name: Broken", "  steps:", "  - id: call", "    action: http.request",
                         "    with: {method: GET, url: not a url}", ""])
        self.set_value(self.find("#yaml-import"), bad)
        self.click("#yaml-apply")
        self.text_in("#yaml-error", "nothing was changed")
        self.text_in("#yaml-error", "step 1 (call), with.url")
        self.assertIn("http(s) URL", self.find("#yaml-error").text)
        self.assertNotIn("steps[0]", self.find("#yaml-error").text)
        self.shot("yaml-refused")
        self.assertEqual(api("GET", f"/workflows/{wf}")[1]["name"], "Imported twice")
        # Not YAML the console reads: said with its line, nothing sent.
        self.answer_confirm(True)
        self.set_value(self.find("#yaml-import"), "kind: Workflow\nspec: {name: [x\n")
        self.click("#yaml-apply")
        self.text_in("#yaml-error", "line 2")
        self.assertEqual(self.sent(f"/v1/workflows/{wf}"), 0)

    def test_08_activate_pause_and_the_delete_rule(self):
        self.ensure_admin()
        self.go(f"/workflows/{Console.workflow_id}", "#activate")
        self.click("#activate")
        self.text_in("#delete-why", "cannot be deleted")
        self.assertFalse(self.find("#delete").is_enabled())
        self.assertEqual(api("GET", f"/workflows/{Console.workflow_id}")[1]["state"], "active")
        self.shot("active-workflow")
        self.click("#pause")
        self.find("#activate")
        self.assertTrue(self.find("#delete").is_enabled())
        self.assertFalse(self.driver.find_elements(By.ID, "delete-why"))
        self.click("#activate")
        self.find("#pause")
        # Deleting, on a workflow of its own: confirmed, gone, back to the list.
        doomed = self.make_workflow("Doomed", [{"id": "a", "action": "fail"}], state="paused")
        self.go(f"/workflows/{doomed}", "#delete")
        self.driver.execute_script("window.confirm = () => true")
        self.click("#delete")
        self.wait.until(EC.url_matches(r"/workflows$"))
        self.assertEqual(api("GET", f"/workflows/{doomed}")[0], 404)

    def test_09_start_a_run_and_watch_the_live_timeline(self):
        self.ensure_admin()
        self.go(f"/workflows/{Console.workflow_id}/runs", "#payload")
        self.driver.execute_script("window.__sameDocument = true")
        payload = self.find("#payload")
        self.set_value(payload, "{not json")
        self.text_in("#payload-status", "Not valid")
        self.assertFalse(self.find("#start-run").is_enabled())
        self.set_value(payload, '{"name": "Ada"}')
        self.click("#start-run")
        self.wait.until(EC.url_contains("/runs/"))
        # Live: the lanes appear while running and turn green without a reload.
        self.find('#timeline .lane[data-step="hello"]')
        self.shot("run-running")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.assertTrue(self.driver.execute_script("return window.__sameDocument === true"),
                        "the page updated in place")
        lanes = self.driver.find_elements(By.CSS_SELECTOR, "#timeline .lane")
        self.assertEqual([l.get_attribute("data-status") for l in lanes], ["succeeded"] * 3)
        self.assertEqual(len(self.driver.find_elements(By.CSS_SELECTOR, "#timeline .bar.s-succeeded")), 3)
        self.click("#step-shout summary")
        self.text_in("#step-shout", '"loud": "Ada!"')
        self.shot("run-succeeded")

    def test_09b_the_run_page_draws_the_graph_with_live_status(self):
        self.ensure_admin()
        self.assertEqual(api("PATCH", f"/workflows/{Console.diamond_id}", {"state": "active"})[0], 200)
        status, run = api("POST", f"/workflows/{Console.diamond_id}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#run-graph")
        self.driver.execute_script("window.__sameDocument = true")
        self.assertEqual(self.edges("run-graph"), ["a>b", "a>c", "b>d", "c>d"])
        # b and c run together, while d waits for both.
        self.wait.until(lambda d: self.node("run-graph", "b").get_attribute("data-status") == "running"
                        and self.node("run-graph", "c").get_attribute("data-status") == "running")
        self.assertIn(self.node("run-graph", "d").get_attribute("data-status"), ("pending", None))
        self.assertIn("running", self.node("run-graph", "b").find_element(By.TAG_NAME, "title").get_attribute("textContent"))
        self.shot("run-graph-running")
        self.wait.until(lambda d: all(self.node("run-graph", s).get_attribute("data-status") == "succeeded" for s in "abcd"))
        self.assertTrue(self.driver.execute_script("return window.__sameDocument === true"), "the page updated in place")
        # A node opens its step's panel.
        self.click('#run-graph [data-node="d"]')
        self.wait.until(lambda d: d.find_element(By.ID, "step-d").get_attribute("open") is not None)
        # Its input: as rendered (a server that records it), else from the run's version.
        self.wait.until(lambda d: "Input (as run)" in d.find_element(By.ID, "step-d").text
                        or "version" in d.find_element(By.ID, "step-d").text)
        self.shot("run-graph-succeeded")

    def test_10_cancel_a_running_run(self):
        self.ensure_admin()
        wf = self.make_workflow("Slow", [{"id": "wait", "action": "delay", "with": {"ms": 60000}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#cancel")
        self.lane_is("wait", "running")
        # Cancel asks first: dismissed, nothing is sent; accepted, the run is cancelled.
        self.answer_confirm(False)
        self.click("#cancel")
        self.assertEqual(self.sent("/cancel"), 0)
        self.assertTrue(self.find("#cancel").is_enabled())
        self.answer_confirm(True)
        self.click("#cancel")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "cancelled")
        self.shot("run-cancelled")
        self.click("#retry-start")
        self.wait.until(lambda d: not d.current_url.endswith(run["id"]))
        retry = self.driver.current_url.rsplit("/", 1)[1]
        self.text_in("main", "Retry of")
        self.assertEqual(api("GET", f"/runs/{retry}")[1]["retry_of"], run["id"])
        self.assertEqual(api("POST", f"/runs/{retry}/cancel")[0], 202)

    def test_10b_a_container_steps_log_follows_then_reads_whole(self):
        self.ensure_admin()
        wf = self.make_workflow("Talk", [{"id": "talk", "action": "container", "with": {
            "image": "flowline.local/toolbox:1",
            "command": ["sh", "-c", "echo hello from the pod; sleep 4; echo done"]}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#step-talk")
        self.lane_is("talk", "running")
        self.click("#step-talk summary")
        # While the step runs, the log is followed: its first line shows before the end.
        self.click("#log-show-talk")
        self.text_in("#log-talk", "hello from the pod")
        self.assertEqual(api("GET", f"/runs/{run['id']}")[1]["status"], "running",
                         "the first line arrived while the step ran")
        self.shot("run-log-following")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.text_in("#log-talk", "done")
        self.assertEqual(self.find("#log-talk").text, "hello from the pod\ndone")
        self.assertEqual([o.text for o in self.driver.find_elements(By.CSS_SELECTOR, "#log-attempt-talk option")], ["#1"])
        self.shot("run-log")

    def test_10c_a_workflow_step_built_in_the_builder_links_parent_and_child(self):
        self.ensure_admin()
        child = self.make_workflow("Invoice", [
            {"id": "total", "action": "transform", "with": {"value": "{{ trigger.payload.n }}"}}])
        self.click('a[href="/workflows/new"]')
        self.set_value(self.find("#wf-name"), "Order")
        index = self.add_step("workflow", "invoice")
        # The id field suggests the account's workflows.
        suggested = self.wait.until(lambda d: [o.get_attribute("value") for o in
                                               d.find_elements(By.CSS_SELECTOR, "#workflow-ids option")] or None)
        self.assertIn(child, suggested)
        self.set_value(self.step_field(index, "with.workflow"), child)
        self.set_value(self.step_field(index, "with.payload"), '{"n": 7}')
        self.assertEqual(Select(self.step_field(index, "with.wait")).first_selected_option.text, "yes")
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        parent = self.driver.current_url.rsplit("/", 1)[1]
        status, wf = api("GET", f"/workflows/{parent}")
        self.assertEqual(wf["steps"][0]["with"], {"workflow": child, "payload": {"n": 7}, "wait": True})
        status, run = api("POST", f"/workflows/{parent}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#timeline")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.click("#step-invoice summary")
        kid = api("GET", f"/runs/{run['id']}")[1]["steps"][0]["child_run_id"]
        # The graph draws a sub-workflow as one, linked to its child run.
        self.assertEqual(self.node("run-graph", "invoice").get_attribute("data-kind"), "sub")
        self.find(f'#run-graph a[href="/runs/{kid}"]')
        self.shot("run-with-child")
        self.click(f'#step-invoice .child-runs a[href="/runs/{kid}"]')
        self.wait.until(EC.url_contains(kid))
        self.text_in("#parent-run", f"{run['id']} (step invoice)")
        self.click(f'#parent-run a[href="/runs/{run["id"]}"]')
        self.wait.until(EC.url_contains(run["id"]))

    def test_10d_a_failing_child_is_retried_then_fails_its_parent_and_a_cancel_cascades(self):
        self.ensure_admin()
        broken = self.make_workflow("Broken", [
            {"id": "read", "action": "transform", "with": {"value": "{{ trigger.payload.missing }}"}}])
        caller = self.make_workflow("Caller", [{"id": "call", "action": "workflow",
                                                "with": {"workflow": broken},
                                                "retry": {"max_attempts": 2, "backoff_ms": 100}}])
        status, run = api("POST", f"/workflows/{caller}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#timeline")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "failed")
        self.text_in("#run-error", "child run")
        view = api("GET", f"/runs/{run['id']}")[1]
        self.assertEqual(view["steps"][0]["attempts"], 2, view)
        kid = view["steps"][0]["child_run_id"]
        self.click("#step-call summary")
        self.shot("run-child-failed")
        self.click(f'#step-call .child-runs a[href="/runs/{kid}"]')
        self.wait.until(EC.url_contains(kid))
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "failed")
        self.text_in("#parent-run", f"{run['id']} (step call)")

        # A parent cancelled while its child runs cancels the child.
        slow = self.make_workflow("Slow child", [{"id": "hold", "action": "delay", "with": {"ms": 60000}}])
        waiting = self.make_workflow("Waiting parent", [{"id": "call", "action": "workflow", "with": {"workflow": slow}}])
        status, run = api("POST", f"/workflows/{waiting}/runs", {})
        self.assertEqual(status, 201, run)
        self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["steps"][0].get("child_run_id"))
        kid = api("GET", f"/runs/{run['id']}")[1]["steps"][0]["child_run_id"]
        self.go(f"/runs/{run['id']}", "#cancel")
        self.answer_confirm(True)
        self.click("#cancel")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "cancelled")
        self.go(f"/runs/{kid}", "#run-status")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "cancelled")
        self.shot("run-child-cancelled")

    def test_10e_an_approval_is_rejected_with_a_comment_after_a_confirmation(self):
        self.ensure_admin()
        wf = self.make_workflow("Gate", [{"id": "gate", "action": "approval"}])
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#timeline")
        self.lane_is("gate", "waiting")
        self.click("#step-gate summary")
        comment = self.wait.until(EC.visibility_of_element_located((By.ID, "comment-gate")))
        comment.send_keys("not this week")
        # The page redraws the run at every poll (about a second now): the comment and
        # its focus survive it.
        summary = self.find("#step-gate summary")
        self.wait.until(EC.staleness_of(summary))
        self.assertEqual(self.find("#comment-gate").get_attribute("value"), "not this week")
        self.assertEqual(self.driver.switch_to.active_element.get_attribute("id"), "comment-gate")
        self.answer_confirm(False)
        self.click("#reject-gate")
        self.assertEqual(self.sent("/reject"), 0, "a dismissed confirmation rejects nothing")
        self.answer_confirm(True)
        self.click("#reject-gate")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "failed")
        error = api("GET", f"/runs/{run['id']}")[1]["steps"][0]["error"]
        self.assertTrue(error.startswith("rejected by ") and error.endswith(": not this week"), error)
        self.shot("run-rejected")

    def test_10f_an_approval_is_decided_from_the_banner_and_a_run_reruns_with_an_edited_payload(self):
        self.ensure_admin()
        wf = self.make_workflow("Banner", [
            {"id": "ok", "action": "approval"},
            {"id": "echo", "action": "transform", "with": {"value": "{{ trigger.payload.n }}"}},
        ])
        status, run = api("POST", f"/workflows/{wf}/runs", {"payload": {"n": 1}, "tags": {"src": "banner"}, "priority": 2})
        self.assertEqual(status, 201, run)
        self.go(f"/runs/{run['id']}", "#banner-approve")
        self.text_in("#decision-banner", "waits for a decision")
        self.shot("run-decision-banner")
        self.click("#banner-approve")
        self.wait.until(lambda d: d.find_element(By.ID, "run-status").text == "succeeded")
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "#decision-banner section"), [])
        self.assertEqual(api("GET", f"/runs/{run['id']}")[1]["steps"][1]["output"], 1)
        # Run again with an edited payload: a bad one is refused in place, a good one starts.
        self.click("#rerun-edit")
        self.set_value(self.find("#rerun-payload"), "[1]")
        self.click("#rerun-start")
        self.text_in("#rerun-status", "must be a JSON object")
        self.set_value(self.find("#rerun-payload"), '{"n": 2}')
        self.click("#rerun-start")
        self.wait.until(lambda d: not d.current_url.endswith(run["id"]))
        again = self.driver.current_url.rsplit("/", 1)[1]
        status, view = api("GET", f"/runs/{again}")
        self.assertEqual((view["payload"], view["tags"], view["priority"]), ({"n": 2}, {"src": "banner"}, 2), view)
        self.assertEqual(api("POST", f"/runs/{again}/cancel")[0], 202)

    def test_10g_a_run_shows_its_own_version_and_compares_it_with_the_workflow_now(self):
        self.ensure_admin()
        wf = self.make_workflow("Versioned", [{"id": "s1", "action": "transform", "with": {"value": {"v": "old-value"}}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {})
        self.assertEqual(status, 201, run)
        self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["status"] == "succeeded")
        status, _ = api("PATCH", f"/workflows/{wf}", {"steps": [
            {"id": "s1", "action": "transform", "with": {"value": {"v": "new-value"}}},
            {"id": "s2", "action": "delay", "with": {"ms": 5}}]})
        self.assertEqual(status, 200)
        self.go(f"/runs/{run['id']}", "#compare-version")
        # The input shown is the one that ran, not today's.
        self.click("#step-s1 summary")
        self.text_in("#step-s1", "old-value")
        self.assertNotIn("new-value", self.find("#step-s1").text)
        self.click("#compare-version")
        self.text_in("#diff-summary", "1 line removed, 7 added")
        lines = lambda css: [e.get_attribute("textContent").rstrip("\n") for e in self.driver.find_elements(By.CSS_SELECTOR, css)]
        self.assertEqual(lines("#diff .del"), ["− " + " " * 8 + "v: old-value"])
        self.assertIn("+ " + " " * 8 + "v: new-value", lines("#diff .ins"))
        self.assertIn("+   - id: s2", lines("#diff .ins"))
        self.assertEqual(self.find("#compare-version").get_attribute("aria-expanded"), "true")
        self.shot("run-version-diff")

    def test_10h_the_workflow_page_lists_its_versions_and_compares_any_two(self):
        self.ensure_admin()
        self.go("/workflows/new", "#wf-name")
        self.set_value(self.find("#wf-name"), "History")
        index = self.add_step("transform", "t")
        self.set_value(self.step_field(index, "with.value"), '{"v": "first"}')
        self.click("#save")
        self.wait.until(EC.url_matches(r"/workflows/wf-[a-z0-9]+$"))
        wf = self.driver.current_url.rsplit("/", 1)[1]
        self.click("#activate")
        self.find("#pause")
        runs = []

        def run_once():
            status, run = api("POST", f"/workflows/{wf}/runs", {})
            self.assertEqual(status, 201, run)
            self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["status"] == "succeeded")
            runs.append(run["id"])

        run_once()
        # A server without the endpoint (404): the page says so and goes on.
        self.driver.execute_script(
            "const f = window.fetch; window.__realFetch = f;"
            "window.fetch = (u, o) => String(u).includes('/versions') ? Promise.resolve(new Response("
            "  JSON.stringify({error: {code: 'not_found', message: 'no such route'}}), {status: 404, headers: {'Content-Type': 'application/json'}}))"
            "  : f(u, o);")
        self.click("#tab-versions")
        self.text_in("#versions-unavailable", "not available")
        self.driver.execute_script("window.fetch = window.__realFetch")
        self.click("#tab-builder")
        self.set_value(self.step_field(0, "with.value"), '{"v": "second"}')
        self.click("#save")
        self.wait.until(lambda d: api("GET", f"/workflows/{wf}")[1]["steps"][0]["with"] == {"value": {"v": "second"}})
        run_once()
        self.click("#tab-versions")
        self.wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#versions-list tbody tr")) == 2)
        self.assertEqual(self.find("#tab-versions").get_attribute("aria-selected"), "true")
        kept = api("GET", f"/workflows/{wf}/versions")[1]["data"]
        rows = self.driver.find_elements(By.CSS_SELECTOR, "#versions-list tbody tr")
        self.assertEqual([r.get_attribute("data-generation") for r in rows], [str(v["generation"]) for v in kept])
        self.assertGreater(int(rows[0].get_attribute("data-generation")), int(rows[1].get_attribute("data-generation")))
        # Newest first: the current one, each used by one kept run, linked.
        self.assertIn("current", rows[0].text)
        self.assertNotIn("current", rows[1].text)
        for row, run in zip(rows, reversed(runs)):
            self.assertEqual(row.find_element(By.CSS_SELECTOR, "td[data-label='Kept runs']").text, "1")
            self.assertEqual(row.find_element(By.CSS_SELECTOR, "td[data-label='Last run'] a").get_attribute("href"), f"{BASE}/runs/{run}")
        # The older against the newer, by default: the changed line.
        lines = lambda css: [e.get_attribute("textContent").rstrip("\n") for e in self.driver.find_elements(By.CSS_SELECTOR, css)]
        self.text_in("#versions-diff #diff-summary", "1 line removed, 1 added")
        self.assertEqual(lines("#versions-diff .del"), ["− " + " " * 8 + "v: first"])
        self.assertEqual(lines("#versions-diff .ins"), ["+ " + " " * 8 + "v: second"])
        self.shot("workflow-versions")
        # Any two, either way round.
        Select(self.find("#versions-from")).select_by_value(rows[0].get_attribute("data-generation"))
        Select(self.find("#versions-to")).select_by_value(rows[1].get_attribute("data-generation"))
        self.wait.until(lambda d: lines("#versions-diff .del") == ["− " + " " * 8 + "v: second"])
        Select(self.find("#versions-to")).select_by_value(rows[0].get_attribute("data-generation"))
        self.text_in("#versions-diff", "The same version on both sides")
        # The last run of the older version is one click away.
        self.click(f'#versions-list a[href="/runs/{runs[0]}"]')
        self.wait.until(EC.url_matches(rf"/runs/{runs[0]}$"))
        self.find("#run-status")

    def test_10i_a_run_shows_each_steps_input_as_rendered(self):
        self.ensure_admin()
        wf = self.make_workflow("Rendered", [
            {"id": "greet", "action": "transform", "with": {"value": {"greeting": "hello {{ trigger.payload.x }}"}}},
            {"id": "big", "action": "transform", "with": {"value": {"who": "{{ trigger.payload.x }}", "pad": "p" * 6000}}},
            {"id": "never", "action": "transform", "when": "trigger.payload.x == 'nobody'",
             "with": {"value": "{{ trigger.payload.x }}"}}])
        status, run = api("POST", f"/workflows/{wf}/runs", {"payload": {"x": "Ada"}})
        self.assertEqual(status, 201, run)
        self.wait.until(lambda d: api("GET", f"/runs/{run['id']}")[1]["status"] == "succeeded")
        self.go(f"/runs/{run['id']}", "#step-greet")
        self.click("#step-greet summary")
        # The value the step got, not its template.
        self.text_in("#step-greet", "Input (as run)")
        shown = self.find("#step-greet .step-input").text
        self.assertEqual(json.loads(shown), {"value": {"greeting": "hello Ada"}})
        self.assertNotIn("{{", shown)
        # An output box is a Tab stop only while its content overflows it: re-checked
        # when the content changes (made long, then short again).
        focusable = "return document.querySelector(arguments[0]).tabIndex >= 0"
        self.driver.execute_script(
            "const pre = document.querySelector('#step-greet .step-input pre');"
            "pre.dataset.was = pre.textContent; pre.textContent = 'line\\n'.repeat(200);")
        self.wait.until(lambda d: d.execute_script(focusable, "#step-greet .step-input pre"))
        self.driver.execute_script(
            "const pre = document.querySelector('#step-greet .step-input pre'); pre.textContent = pre.dataset.was;")
        self.wait.until(lambda d: not d.execute_script(focusable, "#step-greet .step-input pre"))
        self.assertIsNone(self.find("#step-greet .step-input pre").get_attribute("tabindex"))
        # The template stays one click away.
        self.click("#step-greet details.template summary")
        self.text_in("#step-greet details.template", "hello {{ trigger.payload.x }}")
        # Too large to keep whole: the start of its JSON, said to be cut.
        self.click("#step-big summary")
        self.text_in("#step-big", "Truncated")
        self.assertTrue(self.find("#step-big .step-input").text.startswith('{"value":'))
        # Its output (6000 characters) scrolls: a Tab stop; the inputs fit: none.
        self.wait.until(lambda d: d.execute_script(focusable, "#step-big > pre.json"))
        self.assertEqual(self.find("#step-big > pre.json").get_attribute("tabindex"), "0")
        for short in ("#step-big .step-input pre", "#step-greet .step-input pre"):
            self.assertIsNone(self.find(short).get_attribute("tabindex"), short)
            self.assertFalse(self.driver.execute_script(focusable, short), short)
        # Not started (its `when` was false): no rendered input, the template instead.
        self.click("#step-never summary")
        self.text_in("#step-never", "Input (template)")
        self.assertFalse(self.driver.find_elements(By.CSS_SELECTOR, "#step-never .step-input"))
        self.text_in("#step-never", "{{ trigger.payload.x }}")
        self.driver.execute_script("document.getElementById('step-greet').scrollIntoView()")
        self.shot("run-rendered-input")

    def test_11_runs_list_filters_by_status(self):
        self.ensure_admin()
        self.go(f"/workflows/{Console.workflow_id}/runs", "#runs")
        Select(self.find("#status-filter")).select_by_value("queued")
        self.text_in("main", "No queued runs.")
        old = self.find("#status-filter")
        Select(old).select_by_value("succeeded")
        self.wait.until(EC.staleness_of(old))
        self.find("#runs tbody tr")
        self.assertIn("status=succeeded", self.driver.current_url)
        self.shot("runs")

    def test_11b_runs_across_workflows_filter_by_tag_and_act_in_bulk(self):
        self.ensure_admin()
        wf = self.make_workflow("Gated batch", [{"id": "gate", "action": "approval"}])
        # A run started from the form with tags, then two more of batch a and one of b.
        self.go(f"/workflows/{wf}/runs", "#start-form")
        self.set_value(self.find("#run-tags"), "batch:a, source:console")
        Select(self.find("#run-priority")).select_by_value("2")
        self.click("#start-run")
        self.wait.until(lambda d: "/runs/" in d.current_url and "/workflows/" not in d.current_url)
        first = self.driver.current_url.rsplit("/", 1)[1]
        self.assertEqual(api("GET", f"/runs/{first}")[1]["tags"], {"batch": "a", "source": "console"})
        self.assertEqual(api("GET", f"/runs/{first}")[1]["priority"], 2)
        self.text_in("#run-priority", "2")
        batch_a = [first]
        for batch in ["a", "b"]:
            status, run = api("POST", f"/workflows/{wf}/runs", {"tags": {"batch": batch}})
            self.assertEqual(status, 201, run)
            if batch == "a":
                batch_a.append(run["id"])
            else:
                other = run["id"]
        # The account-wide list, filtered by tag from its form and by workflow.
        self.go("/runs", "#tag-filter")
        self.set_value(self.find("#tag-filter"), "batch:a")
        self.click("#apply-tag")
        self.wait.until(lambda d: "tag=batch%3Aa" in d.current_url or "tag=batch:a" in d.current_url)
        self.wait.until(lambda d: sorted(r.get_attribute("data-id") for r in d.find_elements(
            By.CSS_SELECTOR, "#runs tbody tr")) == sorted(batch_a))
        self.text_in("#runs", "source:console")
        # Select both, cancel after a confirmation: only batch a ends cancelled.
        self.answer_confirm(True)
        self.click("#select-all")
        self.text_in("#selected-count", "2 selected")
        self.click("#bulk-cancel")
        self.wait.until(lambda d: all(api("GET", f"/runs/{i}")[1]["status"] == "cancelled" for i in batch_a))
        self.assertEqual(api("GET", f"/runs/{other}")[1]["status"], "running")
        self.assertEqual(self.sent("/bulk-cancel"), 1)
        # Retried on the workflow as it is now: two new runs with the tags, linked.
        self.go(f"/runs?tag=batch:a&status=cancelled&workflow_id={wf}", "#select-all")
        self.click("#select-all")
        self.click("#retry-current")
        self.click("#bulk-retry")
        self.text_in("body", "2 retries started")
        status, page = api("GET", "/runs?tag=batch:a&status=running")
        self.assertEqual(status, 200, page)
        self.assertEqual(sorted(api("GET", f"/runs/{r['id']}")[1]["retry_of"] for r in page["data"]), sorted(batch_a))
        self.shot("runs-bulk")
        status, answer = api("POST", "/runs/bulk-cancel", {"filter": {"workflow_id": wf, "status": "running"}})
        self.assertEqual((status, answer["matched"]), (202, 3), answer)

    def test_11c_runs_waiting_for_a_decision_are_listed_and_decided_there(self):
        self.ensure_admin()
        wf = self.make_workflow("Needs a yes", [{"id": "sign-off", "action": "approval"}])
        slow = self.make_workflow("Just slow", [{"id": "hold", "action": "delay", "with": {"ms": 60000}}])
        runs = [api("POST", f"/workflows/{wf}/runs", {})[1]["id"] for _ in range(2)]
        busy = api("POST", f"/workflows/{slow}/runs", {})[1]["id"]
        self.wait.until(lambda d: all(api("GET", f"/runs/{r}")[1]["steps"][0]["status"] == "waiting" for r in runs))
        self.wait.until(lambda d: api("GET", f"/runs/{busy}")[1]["steps"][0]["status"] == "running")
        self.go("/runs", "#waiting")
        listed = lambda: sorted(r.get_attribute("data-run") for r in self.driver.find_elements(By.CSS_SELECTOR, "#waiting tbody tr"))
        self.assertEqual([r for r in listed() if r in runs + [busy]], sorted(runs))
        self.text_in(f'#waiting tr[data-run="{runs[0]}"]', "sign-off")
        self.shot("runs-waiting")
        self.set_value(self.find(f"#comment-{runs[0]}-sign-off"), "looks right")
        self.click(f"#approve-{runs[0]}-sign-off")
        self.wait.until(lambda d: api("GET", f"/runs/{runs[0]}")[1]["status"] == "succeeded")
        self.assertEqual(api("GET", f"/runs/{runs[0]}")[1]["steps"][0]["output"]["comment"], "looks right")
        self.wait.until(lambda d: runs[0] not in listed())
        self.answer_confirm(False)
        self.click(f"#reject-{runs[1]}-sign-off")
        self.assertEqual(self.sent("/reject"), 0, "a dismissed confirmation rejects nothing")
        self.answer_confirm(True)
        self.click(f"#reject-{runs[1]}-sign-off")
        self.wait.until(lambda d: api("GET", f"/runs/{runs[1]}")[1]["status"] == "failed")
        self.wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, f'#waiting tr[data-run="{runs[1]}"]'))
        self.assertEqual(api("POST", f"/runs/{busy}/cancel")[0], 202)

    def test_12_webhook_secret_once_deliveries_resend_rotate(self):
        self.ensure_admin()
        self.go("/webhooks", "#hook-url")
        # A URL the API refuses is said under the URL field.
        self.set_value(self.find("#hook-url"), "ftp://127.0.0.1/hook")
        self.click("#create-webhook")
        self.text_in("#hook-url-error", "http")
        self.assertEqual(self.find("#hook-url").get_attribute("aria-invalid"), "true")
        self.assertEqual(self.driver.find_element(By.ID, "hook-error").get_attribute("textContent"), "",
                         "nothing said twice under the form")
        port = self.receiver.server_address[1]
        self.set_value(self.find("#hook-url"), f"http://127.0.0.1:{port}/hook")
        self.click("#create-webhook")
        secret = self.find("#once input[data-secret]").get_attribute("value")
        self.assertTrue(secret.startswith("whsec_"), secret)
        self.shot("webhook-created")
        row = self.find("#webhooks tbody tr")
        hook_id = row.get_attribute("data-id")
        status, run = api("POST", f"/workflows/{Console.workflow_id}/runs", {"payload": {"name": "Hook"}})
        self.assertEqual(status, 201, run)
        self.go(f"/webhooks/{hook_id}", "#refresh-deliveries")
        self.assertNotIn(secret, self.driver.page_source, "the secret is shown only once")

        # Wait for the run's last event, not the first delivery: run.started can be listed
        # (and answered 200) before run.succeeded has been sent.
        def delivered(d):
            try:
                d.find_element(By.ID, "refresh-deliveries").click()
                rows = d.find_elements(By.CSS_SELECTOR, "#deliveries tbody tr")
                return any("run.succeeded" in r.text and "HTTP 200" in r.text for r in rows)
            except Exception:  # not listed yet, or the table was re-rendered under us
                return False
        WebDriverWait(self.driver, 30, poll_frequency=0.5).until(delivered)
        self.assertTrue(any(h.get("x-service-event") == "run.succeeded" for h, _ in Receiver.received))
        self.shot("deliveries")
        self.click("#deliveries tbody tr button")
        self.text_in("#toasts", "Resend queued")
        self.click("#rotate-secret")
        rotated = self.find("#once input[data-secret]").get_attribute("value")
        self.assertTrue(rotated.startswith("whsec_") and rotated != secret)
        self.go("/webhooks", f'#webhooks tr[data-id="{hook_id}"]')
        self.driver.execute_script("window.confirm = () => true")
        self.click(f'#webhooks tr[data-id="{hook_id}"] button')
        self.text_in("main", "No webhooks yet.")
        self.assertEqual(api("GET", f"/webhooks/{hook_id}")[0], 404)

    def test_13_api_keys_create_and_revoke(self):
        self.ensure_admin()
        self.go("/api-keys", "#key-name")
        self.set_value(self.find("#key-name"), "ci-runner")
        self.click('input[value="execute"]')
        self.click("#create-key")
        value = self.find("#once input[data-secret]").get_attribute("value")
        self.assertTrue(value.startswith("flk_"))
        self.assertEqual(api("GET", "/workflows", key=value)[0], 200)
        row = self.find('#api-keys tr[data-name="ci-runner"]')
        self.assertIn("execute", row.text)
        self.shot("api-keys")
        self.driver.execute_script("window.confirm = () => true")
        self.press(row.find_element(By.CSS_SELECTOR, "button"))
        self.wait.until(EC.invisibility_of_element_located((By.CSS_SELECTOR, '#api-keys tr[data-name="ci-runner"]')))
        self.assertEqual(self.driver.find_elements(By.CSS_SELECTOR, "#once input[data-secret]"), [],
                         "a revoked key's value is taken off the screen")
        WebDriverWait(self.driver, 5, poll_frequency=0.2).until(
            lambda d: api("GET", "/workflows", key=value)[0] == 401)

    def test_13b_workflows_list_filters_and_pages(self):
        self.ensure_admin()
        self.go("/workflows?limit=1", "#workflows")
        row = self.find("#workflows tbody tr")
        first = row.get_attribute("data-id")
        self.click("nav.pager a")
        self.wait.until(EC.staleness_of(row))
        self.assertIn("cursor=", self.driver.current_url)
        self.assertNotEqual(self.find("#workflows tbody tr").get_attribute("data-id"), first)
        self.find('nav.pager a[href="/workflows?limit=1"]')
        old = self.find("#state-filter")
        Select(old).select_by_value("active")
        self.wait.until(EC.staleness_of(old))  # the page was drawn again, filtered
        self.assertIn("state=active", self.driver.current_url)
        self.find("#workflows tbody tr")
        states = [api("GET", f"/workflows/{r.get_attribute('data-id')}")[1]["state"]
                  for r in self.driver.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")]
        self.assertTrue(states and all(s == "active" for s in states), states)

    def test_14_a_read_key_sees_no_write_controls(self):
        self.sign_in(READ_KEY)
        self.text_in("#scopes", "read")
        self.find("#workflows")
        self.assertFalse(self.driver.find_elements(By.CSS_SELECTOR, 'a[href="/workflows/new"]'))
        self.assertFalse(self.driver.find_element(By.CSS_SELECTOR, 'nav a[href="/api-keys"]').is_displayed())
        self.go(f"/workflows/{Console.workflow_id}", "#read-only")
        self.assertFalse(self.driver.find_elements(By.ID, "save"))
        self.assertFalse(self.driver.find_elements(By.ID, "activate") + self.driver.find_elements(By.ID, "pause"))
        self.assertFalse(self.find("#wf-name").is_enabled())
        self.assertFalse(self.driver.find_elements(By.CSS_SELECTOR, ".handle:enabled"))
        self.shot("read-only-builder")
        self.go(f"/workflows/{Console.workflow_id}/runs", "#runs")
        self.assertFalse(self.driver.find_elements(By.ID, "start-form"))
        self.go("/webhooks", "h1")
        self.assertFalse(self.driver.find_elements(By.ID, "webhook-form"))

    def test_15_phone_width(self):
        self.sign_in(ADMIN_KEY)
        self.driver.set_window_size(390, 844)
        try:
            for path, ready in [("/workflows", "#workflows"), (f"/workflows/{Console.workflow_id}", "#steps .step-card"),
                                (f"/workflows/{Console.workflow_id}/runs", "#runs")]:
                self.go(path, ready)
                overflow = self.driver.execute_script(
                    "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
                self.assertLessEqual(overflow, 0, f"{path} scrolls sideways at phone width")
                self.shot("phone" + path.replace("/", "-"))
        finally:
            self.driver.set_window_size(1280, 1000)


if __name__ == "__main__":
    started = time.monotonic()
    result = unittest.main(verbosity=2, exit=False).result
    print(f"console tests: {result.testsRun} scenarios in {time.monotonic() - started:.1f} s")
    raise SystemExit(0 if result.wasSuccessful() else 1)
