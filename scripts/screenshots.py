"""Regenerate the Prefect UI screenshots in docs/ui/ (docs/operations.md).

    .venv/bin/pip install -e '.[docs]'      # playwright (Python package only)
    apt-get install chromium                # the browser it drives: /usr/bin/chromium (or $CHROMIUM)
    .venv/bin/python scripts/screenshots.py

What it does, end to end, on a throw-away Prefect server (127.0.0.1, a free port, a temporary
PREFECT_HOME, analytics off) and a throw-away copy of configs/smoke.yaml (its outputs under a
temporary directory, so your runs/ and .prefect/ are not touched):

1. starts `prefect server start` and `python -m flows.serve` (what `make ui` runs), the runner with
   POSTTRAIN_FAIL_STAGE=mode_fusion_sft, the pipeline's fault injection;
2. opens the pipeline deployment's Run form in headless Chromium, types the config path, takes
   01-trigger.png and presses Submit: the UI creates the flow run; it fails at mode_fusion_sft;
3. takes 03-retry.png of the failed run (Retry button), restarts the runner without the fault and
   presses Retry: the same flow run runs again, reusing the three stages that had finished;
4. takes 02-stages.png (the completed run's stage graph and task runs) and 04-gate-artifact.png (a gate
   verdict table artifact);
5. promotes cold_start_sft, then distillation, then rolls back, through the promote / rollback
   deployments, and takes 05-promote-rollback.png (the production-history artifact);
6. stops the runner and the server and removes the temporary directory.

The smoke copy keeps smoke.yaml's sizes but gives each gate the regression checks of
configs/default.yaml, so that the gate verdict tables have rows (smoke's own gates check nothing).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "ui"
FAIL_STAGE = "mode_fusion_sft"
VIEWPORT = {"width": 1400, "height": 900}
TALL_FORM = {"width": 1400, "height": 1080}
TALL_STAGES = {"width": 1400, "height": 1450}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DEPLOYMENTS = ("posttrain-pipeline/pipeline", "posttrain-promote/promote", "posttrain-rollback/rollback",
               "posttrain-evaluate/evaluate")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke_project(directory: Path) -> Path:
    """configs/smoke.yaml with its paths under `directory` and default.yaml's regression checks."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    default = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    cfg["paths"] = {"world": "data", "runs": "runs", "registry": "runs/registry",
                    "data_store": "runs/data-store", "dvc_remote": "runs/dvc-remote"}
    for name, stage in cfg["stages"].items():
        stage["gate"] = {"targets": [], "regression": default["stages"][name]["gate"].get("regression", [])}
    path = directory / "smoke.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class Services:
    """A Prefect server and the `flows.serve` runner, each in its own process group."""

    def __init__(self, work: Path):
        self.work = work
        self.home = work / "prefect-home"
        self.home.mkdir()
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.ui = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.api,
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               "PREFECT_RUNNER_POLL_FREQUENCY": "2", "PYTHONUNBUFFERED": "1",
               "POSTTRAIN_CONFIG_DIRS": str(work)}   # the served flows read the throw-away config only
        env.pop("POSTTRAIN_FAIL_STAGE", None)
        self.env = env
        self.server: subprocess.Popen | None = None
        self.runner: subprocess.Popen | None = None
        self.runner_log: Path | None = None

    def _spawn(self, args: list[str], log_name: str, env: dict) -> subprocess.Popen:
        with open(self.work / log_name, "w") as out:
            return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def start_server(self, timeout: float = 180) -> None:
        # PREFECT_API_URL in the server's environment is the API address the UI is told to call.
        self.server = self._spawn([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--analytics-off"], "server.log", self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"prefect server exited: {self.tail('server.log')}")
            try:
                urllib.request.urlopen(f"{self.api}/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"Prefect server not healthy after {timeout} s: {self.tail('server.log')}")

    def start_runner(self, fail_stage: str | None, timeout: float = 240) -> None:
        env = dict(self.env)
        if fail_stage:
            env["POSTTRAIN_FAIL_STAGE"] = fail_stage
        name = f"serve-{'fail-' + fail_stage if fail_stage else 'ok'}.log"
        started = time.time()
        self.runner = self._spawn([sys.executable, "-m", "flows.serve"], name, env)
        self.runner_log = self.work / name
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        deadline = time.monotonic() + timeout
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline:
                if self.runner.poll() is not None:
                    raise RuntimeError(f"flows.serve exited: {self.tail(name)}")
                try:
                    deps = [client.read_deployment_by_name(n) for n in DEPLOYMENTS]
                    if all(d.last_polled is not None and d.last_polled.timestamp() > started
                           and getattr(d.status, "value", d.status) == "READY" for d in deps):
                        return
                except ObjectNotFound:
                    pass
                time.sleep(1)
        raise TimeoutError(f"deployments not served after {timeout} s: {self.tail(name)}")

    def stop_runner(self) -> None:
        _stop(self.runner)  # SIGTERM: serve pauses its deployments through the still-running server
        self.runner = None

    def stop(self) -> None:
        _stop(self.runner)
        _stop(self.server)

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.work / name
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


def wait_flow_run(flow_run_id: str, done, timeout: float, services: Services):
    from prefect.client.orchestration import get_client

    deadline, run = time.monotonic() + timeout, None
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            run = client.read_flow_run(flow_run_id)
            if run.state is not None and done(run):
                return run
            time.sleep(1)
    raise TimeoutError(f"flow run {flow_run_id}: {run and run.state!r} after {timeout} s\n"
                       f"{services.runner_log.read_text(errors='replace')[-3000:] if services.runner_log else ''}")


def run_deployment(name: str, services: Services, **parameters):
    """What the UI's Run form submits: POST /deployments/{id}/create_flow_run, then the runner runs it."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(name)
        run = client.create_flow_run_from_deployment(deployment.id, parameters=parameters)
    run = wait_flow_run(str(run.id), lambda r: r.state.is_final(), 600, services)
    if not run.state.is_completed():
        raise RuntimeError(f"{name} {parameters}: {run.state.type.value} {run.state.message}")
    log(f"{name} {parameters}: completed ({run.name})")
    return run


def latest_artifact(key: str, flow_run_id=None):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        flt = ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        if flow_run_id is not None:
            flt.flow_run_id = ArtifactFilterFlowRunId(any_=[flow_run_id])
        found = client.read_artifacts(artifact_filter=flt, sort=ArtifactSort.CREATED_DESC, limit=1)
    if not found:
        raise RuntimeError(f"no artifact with key {key!r}")
    return found[0]


def settle(page, ms: int = 1500) -> None:
    """After the awaited content is there: let the last paint (fonts, the run graph's canvas) happen."""
    try:
        page.wait_for_load_state("networkidle", timeout=5000)
    except Exception:  # the UI polls the API; no idle moment within 5 s is fine
        pass
    page.wait_for_timeout(ms)


def shot(page, name: str) -> None:
    path = OUT / name
    page.screenshot(path=str(path))
    log(f"wrote {path.relative_to(ROOT)}")


def open_flow_run(page, ui: str, flow_run_id: str, state: str) -> None:
    page.goto(f"{ui}/runs/flow-run/{flow_run_id}")
    page.locator(".page-heading-flow-run__meta .state-badge", has_text=state).first.wait_for(timeout=60000)
    page.locator(".run-graph canvas").first.wait_for(timeout=60000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = parser.parse_args()
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists():
        print(f"no Chromium at {chromium} (apt-get install chromium, or set CHROMIUM)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("playwright is not installed: .venv/bin/pip install -e '.[docs]'", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    from posttrain.env import configure_offline

    started = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="posttrain-ui-"))
    services = Services(work)
    os.environ.update({"PREFECT_HOME": str(services.home), "PREFECT_API_URL": services.api})
    configure_offline()
    from prefect.client.orchestration import get_client

    config = smoke_project(work)
    try:
        log(f"Prefect server on {services.ui} (PREFECT_HOME {services.home})")
        services.start_server()
        log(f"serving the deployments with POSTTRAIN_FAIL_STAGE={FAIL_STAGE}")
        services.start_runner(fail_stage=FAIL_STAGE)
        with get_client(sync_client=True) as client:
            pipeline_id = client.read_deployment_by_name(DEPLOYMENTS[0]).id

        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(work / "chromium-profile"), executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
                viewport=VIEWPORT, color_scheme="dark")
            page = browser.new_page()
            page.set_default_timeout(60000)

            # (1) Trigger: the pipeline deployment's Run form, with typed parameters (a taller window:
            # the whole form, down to Submit).
            page.set_viewport_size(TALL_FORM)
            page.goto(f"{services.ui}/deployments/deployment/{pipeline_id}/run")
            prop = page.locator(".schema-form-property",
                                has=page.locator(".schema-form-property__label", has_text=re.compile(r"^config_path")))
            prop.locator("textarea").fill(str(config))
            page.locator(".schema-form-property", has=page.locator(
                ".schema-form-property__label", has_text=re.compile(r"^on_gate_failure"))).wait_for()
            submit = page.get_by_role("button", name="Submit")
            submit.wait_for()
            settle(page, 500)
            shot(page, "01-trigger.png")
            page.set_viewport_size(VIEWPORT)
            with page.expect_response(lambda r: r.url.endswith("/create_flow_run") and r.request.method == "POST") \
                    as created:
                submit.click()
            if not created.value.ok:
                raise RuntimeError(f"the Run form's request failed: {created.value.status} {created.value.text()}")
            run_id = created.value.json()["id"]
            log(f"the Run form created flow run {run_id}")

            failed = wait_flow_run(run_id, lambda r: r.state.is_final(), 900, services)
            if not failed.state.is_failed():
                raise RuntimeError(f"expected the injected failure, got {failed.state.type.value}: {failed.state.message}")
            log(f"flow run failed as intended: {failed.state.message}")

            # (3) Retry: the failed run, its failed stage in the graph, the error in the logs.
            open_flow_run(page, services.ui, run_id, "Failed")
            page.get_by_text("injected failure in stage", exact=False).first.wait_for()
            page.get_by_role("button", name="Retry").wait_for()
            settle(page)
            shot(page, "03-retry.png")

            log("restarting the runner without the fault")
            services.stop_runner()
            services.start_runner(fail_stage=None)
            page.reload()
            page.locator(".page-heading-flow-run__meta .state-badge", has_text="Failed").first.wait_for()
            page.get_by_role("button", name="Retry").click()
            dialog = page.get_by_role("dialog")  # "Retry <run>? ... task runs without a persisted result will be run again."
            dialog.get_by_text("will be run again", exact=False).wait_for()
            with page.expect_response(lambda r: "/set_state" in r.url and r.request.method == "POST") as retried:
                dialog.get_by_role("button", name="Retry").click()
            if not retried.value.ok:
                raise RuntimeError(f"Retry's request failed: {retried.value.status} {retried.value.text()}")
            log("pressed Retry")
            retried = wait_flow_run(run_id, lambda r: r.run_count >= 2 and r.state.is_final(), 900, services)
            if not retried.state.is_completed():
                raise RuntimeError(f"the retried run ended {retried.state.type.value}: {retried.state.message}")
            log(f"the retried run completed (run_count {retried.run_count})")

            # (2) Stages: the completed run's graph and its task runs, both attempts (a taller window: the
            # second attempt's Cached stages are in the list).
            page.set_viewport_size(TALL_STAGES)
            open_flow_run(page, services.ui, run_id, "Completed")
            page.locator(".p-tab", has_text="Task Runs").click()
            page.locator(".state-badge", has_text="Cached").first.wait_for()
            settle(page)
            shot(page, "02-stages.png")
            page.set_viewport_size(VIEWPORT)

            # (4) Gate verdicts and the report card: artifacts of the run.
            gate = latest_artifact("gate-general-rl", retried.id)
            page.goto(f"{services.ui}/artifacts/artifact/{gate.id}")
            page.get_by_text("Gate verdict for general_rl", exact=False).first.wait_for()
            page.locator("table tbody tr").first.wait_for()
            settle(page)
            shot(page, "04-gate-artifact.png")

            # (5) Promote and roll back: the promote / rollback deployments, the production history.
            run_deployment("posttrain-promote/promote", services, version="cold_start_sft",
                           reason="first production model", config_path=str(config))
            run_deployment("posttrain-promote/promote", services, version="distillation",
                           reason="the distilled student passed its gate", config_path=str(config))
            run_deployment("posttrain-rollback/rollback", services, reason="rollback drill",
                           config_path=str(config))
            history = latest_artifact("production-history")
            page.goto(f"{services.ui}/artifacts/artifact/{history.id}")
            page.get_by_text("rollback drill", exact=False).first.wait_for()
            settle(page)
            shot(page, "05-promote-rollback.png")
            browser.close()
    except BaseException:
        for name in ("server.log", "serve-fail-" + FAIL_STAGE + ".log", "serve-ok.log"):
            print(f"--- {name} (tail) ---\n{services.tail(name)}", file=sys.stderr)
        raise
    finally:
        services.stop()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    log(f"done in {time.monotonic() - started:.0f} s: {', '.join(sorted(p.name for p in OUT.glob('*.png')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
