#!/usr/bin/env python3
"""Screenshots of the Dagster UI after the demo, with headless Chromium.

    .venv/bin/python scripts/ui_screenshots.py [--asset clicks_hourly/windowed_aggregates] [--out docs]

1. runs the quick start's ``python -m orchestration.demo`` (3 days x 20,000 events, 500
   keys) into a temporary folder (``--workdir`` to keep it; an existing demo there is reused);
2. starts ``dagster-webserver`` on that instance (a free port, the same environment);
3. drives headless Chromium over the DevTools protocol (``--remote-debugging-pipe``, no
   extra Python package) and saves, into ``--out``:
   * ``ui-partitions.png``: the asset's Partitions page, the newest partition selected;
   * ``ui-plots-partitions.png``: Overview -> Metadata -> Plots -> Partitions (the
     plots Dagster draws from the numeric metadata of each partition's materialization);
   * ``ui-asset-overview.png``: the asset's Overview: row count, Columns (Dagster's
     standard metadata), owners, code version;
   * ``ui-checks.png`` and ``ui-check-history.png``: the asset's Checks tab, its latest
     execution and its execution history;
4. stops Chromium and the webserver (their own process groups).

Needs Chromium (``/usr/bin/chromium``, or ``--chromium``): ``apt-get install -y chromium``.
Standard library only. Run it from anywhere; paths are relative to the repository.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
WEBSERVER = str(Path(PYTHON).with_name("dagster-webserver"))
WIDTH, HEIGHT = 1400, 900
DAY = (datetime.now(timezone.utc).date() - timedelta(days=1)).isoformat()  # the demo's newest partition: yesterday


def log(message: str) -> None:
    print(f"[ui_screenshots] {message}", flush=True)


# --------------------------------------------------------------------------- demo + webserver


def demo_env(root: Path) -> dict[str, str]:
    """The demo's and the webserver's environment: no REWINDOW_* / DAGSTER_HOME from outside
    (a developer's REWINDOW_HISTORY_END would change the partitions), only ``root``'s folders,
    and a small local Spark session (2 cores, as the test suite's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWINDOW_") and k != "DAGSTER_HOME"}
    env.update(
        REWINDOW_LANDING_ZONE=str(root / "landing"),
        REWINDOW_PIPELINES_DIR=str(root / "pipelines"),
        REWINDOW_OUTPUT_ROOT=str(root / "output"),
        DAGSTER_HOME=str(root / "home"),
        PYSPARK_PYTHON=PYTHON,
        PYSPARK_DRIVER_PYTHON=PYTHON,
        REWINDOW_SPARK_MASTER="local[2]",
        REWINDOW_SPARK_CONF=(
            "spark.sql.shuffle.partitions=2,spark.default.parallelism=2,spark.driver.memory=2g,"
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        ),
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    )
    return env


def demo_command(env: dict[str, str], quick_start: bool = False) -> list[str]:
    """``python -m orchestration.demo`` over ``env``'s folders: 3 days x 2,000 events, 50 keys
    (the tests' size), or with ``quick_start`` the quick start's own sizes (the demo's defaults:
    20,000 events a day, 500 keys), for the screenshots."""
    sizes = [] if quick_start else ["--events-per-day", "2000", "--keys", "50"]
    return [
        PYTHON,
        "-m",
        "orchestration.demo",
        "--days",
        "3",
        *sizes,
        "--landing-zone",
        env["REWINDOW_LANDING_ZONE"],
        "--pipelines-dir",
        env["REWINDOW_PIPELINES_DIR"],
        "--output-root",
        env["REWINDOW_OUTPUT_ROOT"],
        "--dagster-home",
        env["DAGSTER_HOME"],
    ]


def run_demo(root: Path, env: dict[str, str]) -> None:
    if (root / "home" / "history").is_dir() and (root / "output").is_dir():
        log(f"reusing the demo in {root}")
        return
    log(f"running the quick start's demo into {root} (a few minutes: Spark) ...")
    done = subprocess.run(
        demo_command(env, quick_start=True), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-6000:])
        raise SystemExit(f"the demo failed (exit {done.returncode})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def wait_for_webserver(url: str, proc: subprocess.Popen, stderr: Path, timeout: float = 120) -> None:
    query = (
        "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
        "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"dagster-webserver exited ({proc.returncode}):\n{stderr.read_text()[-6000:]}")
        try:
            entries = graphql(url, query)["data"]["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                bad = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                if bad:
                    raise SystemExit(f"the code location failed to load: {bad[0]['locationOrLoadError']['message']}")
                return
        except (urllib.error.URLError, OSError, KeyError, TypeError):
            pass
        time.sleep(1)
    raise SystemExit(f"dagster-webserver not ready after {timeout:.0f}s:\n{stderr.read_text()[-6000:]}")


def stop_group(proc: subprocess.Popen, name: str) -> None:
    """SIGTERM the process group started for ``proc`` (start_new_session), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        log(f"{name} did not stop: killing it")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- Chromium over the DevTools pipe


class Chromium:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (NUL-terminated JSON on fds 3/4)."""

    def __init__(self, binary: str, profile: Path):
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()

        def wire_fds():  # in the child: its fd 3 reads our commands, its fd 4 writes the answers
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(profile / "chromium.log", "wb"),
            preexec_fn=wire_fds,
            pass_fds=(3, 4),
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._id = 0

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"no answer from Chromium to {method}")
                ready, _, _ = select.select([self._from_child_r], [], [], min(left, 1.0))
                if ready:
                    chunk = os.read(self._from_child_r, 1 << 20)
                    if not chunk:
                        raise RuntimeError("Chromium closed the DevTools pipe")
                    self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def new_page(self) -> "Page":
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_group(self.proc, "chromium")
        for fd in (self._to_child_w, self._from_child_r):
            try:
                os.close(fd)
            except OSError:
                pass


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser, self.session = browser, session

    def call(self, method: str, params: dict | None = None, timeout: float = 60):
        return self.browser.call(method, params, self.session, timeout)

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def wait_for(self, expression: str, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.js(expression):
                    return
            except RuntimeError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}")

    def settle(self, seconds: float = 2.0) -> None:
        """Until no spinner is shown (Blueprint/Dagster spinners), then a little longer for charts."""
        try:
            self.wait_for(
                '!document.querySelector(\'[class*="spinner" i], [role="progressbar"]\')',
                "the spinners to go",
                timeout=30,
            )
        except RuntimeError:
            pass
        time.sleep(seconds)

    def click_text(self, text: str, selector: str = "button", last: bool = False) -> None:
        """Click the (first, or last: the deepest/latest in document order) element showing ``text``."""
        found = self.js(
            f"""(() => {{
              const all = [...document.querySelectorAll({json.dumps(selector)})]
                .filter(e => e.innerText && e.innerText.trim() === {json.dumps(text)});
              const el = {"all[all.length - 1]" if last else "all[0]"};
              if (!el) return false;
              el.scrollIntoView({{block: 'start'}});
              el.click();
              return true;
            }})()"""
        )
        if not found:
            raise RuntimeError(f"no {selector} labelled {text!r} on {self.js('location.href')}")

    def dismiss_dialogs(self) -> None:
        """Skip the "Join the Dagster community" dialog a fresh browser profile gets."""
        self.js("""(() => {
          const skip = [...document.querySelectorAll('[role="dialog"] button, .bp5-dialog button, button')]
            .find(b => b.innerText && b.innerText.trim() === 'Skip');
          if (skip) skip.click();
          return !!skip;
        })()""")
        time.sleep(0.5)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        log(f"wrote {path}")


def text_present(text: str) -> str:
    return f"document.body && document.body.innerText.includes({json.dumps(text)})"


# --------------------------------------------------------------------------- the screenshots


def take_screenshots(browser: Chromium, url: str, asset: str, out: Path) -> None:
    base = f"{url}/assets/{asset}"
    page = browser.new_page()

    # 1. The asset's Partitions page: the status bar and the partition list.
    page.goto(f"{base}?view=partitions")
    page.wait_for(text_present(DAY), "the partition keys on the Partitions page")
    page.settle()
    page.dismiss_dialogs()
    page.click_text(DAY, "a, span, div", last=True)  # the newest partition's materialization and metadata
    page.wait_for(text_present("windows_emitted"), "the partition's metadata")
    page.settle()
    page.screenshot(out / "ui-partitions.png")

    # 2. Overview -> Metadata -> Plots (Partitions is the default for a partitioned asset).
    page.goto(base)
    page.wait_for(
        text_present("Metadata") + " && [...document.querySelectorAll('button')]"
        ".some(b => b.innerText.trim() === 'Plots')",
        "the Metadata section's Plots button",
    )
    page.settle(1)
    page.dismiss_dialogs()
    page.click_text("Plots")
    page.wait_for(
        text_present("When graphing values by partition")
        + " || "
        + text_present("No numeric metadata")
        + " || "
        + text_present("Asset plots are automatically generated"),
        "the partition plots",
    )
    page.settle(3)
    page.js(
        "(() => { const b = [...document.querySelectorAll('button')].find(e => e.innerText.trim() === "
        "'Partitions'); if (b) b.scrollIntoView({block: 'start'}); window.scrollBy(0, -60); })()"
    )
    time.sleep(1)
    page.screenshot(out / "ui-plots-partitions.png")

    # 3. The Overview: the catalog's row count, columns, owners and code version.
    page.goto(base)
    page.wait_for(text_present("Columns") + " && " + text_present("rewindow"), "the Columns section and owners")
    page.settle(2)
    page.dismiss_dialogs()
    page.screenshot(out / "ui-asset-overview.png")

    # 4. The Checks tab.
    page.goto(f"{base}?view=checks")
    page.wait_for(text_present("_valid"), "the asset's checks")
    page.settle()
    page.dismiss_dialogs()
    page.screenshot(out / "ui-checks.png")
    page.click_text("Execution history")
    page.wait_for(text_present("Skipped") + " || " + text_present("Succeeded"), "the check's execution history")
    page.settle()
    page.screenshot(out / "ui-check-history.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--asset", default="clicks_hourly/windowed_aggregates", help="asset key path (default %(default)s)"
    )
    parser.add_argument("--out", default=str(REPO / "docs"), help="folder of the PNGs (default docs/)")
    parser.add_argument("--workdir", help="demo folder to use and keep (default: a temporary one, removed)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)

    if not (args.chromium and Path(args.chromium).exists() and os.access(args.chromium, os.X_OK)):
        print(
            f"error: Chromium not found ({args.chromium}); install it with: apt-get install -y chromium",
            file=sys.stderr,
        )
        return 2
    if not Path(WEBSERVER).exists():
        print(f"error: {WEBSERVER} not found (pip install dagster-webserver into the venv)", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="rewindow-ui-"))
    root.mkdir(parents=True, exist_ok=True)
    env = demo_env(root)
    webserver = browser = None
    try:
        run_demo(root, env)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        (root / "webserver").mkdir(exist_ok=True)
        stderr = root / "webserver" / "stderr.log"
        with open(root / "webserver" / "stdout.log", "wb") as o, open(stderr, "wb") as e:
            webserver = subprocess.Popen(
                [WEBSERVER, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                cwd=REPO,
                env=env,
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        log(f"dagster-webserver (pid {webserver.pid}) on {url} ...")
        wait_for_webserver(url, webserver, stderr)
        profile = Path(tempfile.mkdtemp(prefix="rewindow-chromium-"))
        try:
            browser = Chromium(args.chromium, profile)
            take_screenshots(browser, url, args.asset.strip("/"), out)
        finally:
            if browser is not None:
                browser.close()
            shutil.rmtree(profile, ignore_errors=True)
    finally:
        if webserver is not None:
            stop_group(webserver, "dagster-webserver")
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
