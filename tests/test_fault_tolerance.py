"""kill -9 of the pipeline process inside every stage, then relaunch: on the smoke config, with
`posttrain run` as a subprocess against a temporary Prefect server (its own database) and the
project's persisted results, registry and data store shared by all launches.

The kills are chained to keep CI time down: launch j is killed inside stage j (a random moment
after the stage's attempt marker appears, bounded by the test-only pause POSTTRAIN_PAUSE_IN_STAGE so
that it lands before the stage returns), so launch j+1 reuses stages < j-1 from the cache, recomputes
the killed stage j-1 and is killed inside stage j; the last launch completes.  Reasoning RL is killed
right after its first in-stage trainer checkpoint, and the relaunch must continue from that
checkpoint, not from step 0.

A second test kills a run inside reasoning_rl and resumes *that* flow run with `posttrain resume`,
which must first tell that the RUNNING run's process is gone.

Set POSTTRAIN_FAULT_SEED to replay other kill moments (the seed is printed).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, write_smoke_config
from posttrain.orchestration.attempts import read_attempt
from test_deployments import _free_port, _stop, _wait_healthy

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]  # make test-all and CI run it

STAGES = ("cold_start_sft", "reasoning_rl", "rejection_sampling", "mode_fusion_sft", "general_rl", "distillation")
SEED = int(os.environ.get("POSTTRAIN_FAULT_SEED", "20261129"))
PAUSE_S = 3.0      # test-only sleep after a stage's work (flows/tasks.py PAUSE_STAGE_ENV)
KILL_WINDOW_S = 2.4  # kill at U(0, KILL_WINDOW_S) after the attempt marker: < PAUSE_S, so inside the stage
RL_STEPS = 4       # reasoning RL steps (save_steps 1): the kill after checkpoint-1 lands mid-training
SENTINEL = "fault_test_sentinel"


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """A temporary `prefect server start`: one per module, so a launch does not pay for its own."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("PREFECT_API_URL", None)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port), "--analytics-off"], env=env, cwd=ROOT,
                              stdout=open(home / "server.log", "w"), stderr=subprocess.STDOUT)
    try:
        _wait_healthy(url, server)
        yield url, home
    finally:
        _stop(server)


@pytest.fixture
def project(tmp_path):
    write_smoke_config(tmp_path, reasoning_rl={"max_steps": RL_STEPS})
    return tmp_path


def _launch(project: Path, server, pause_stage: str | None, log: Path, *command: str) -> subprocess.Popen:
    """`posttrain <command>` (default: run on the project's config) against the test server."""
    url, home = server
    env = {**os.environ, "PREFECT_API_URL": url, "PREFECT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("POSTTRAIN_FAIL_STAGE", None)
    env.pop("POSTTRAIN_PAUSE_IN_STAGE", None)
    if pause_stage:
        env["POSTTRAIN_PAUSE_IN_STAGE"] = f"{pause_stage}:{PAUSE_S}"
    command = command or ("run", "--config", str(project / "smoke.yaml"))
    # Own session: the kill reaches the whole process group, as a machine losing the job would.
    return subprocess.Popen([sys.executable, "-m", "posttrain.cli", *command],
                            cwd=ROOT, env=env, start_new_session=True, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _complete(project: Path, server, log: Path, *command: str) -> subprocess.Popen:
    """`posttrain <command>` (default: run), which must finish with exit code 0."""
    proc = _launch(project, server, None, log, *command)
    try:
        proc.wait(600)
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert proc.returncode == 0, _tail(log)
    return proc


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def _wait_for(condition, proc: subprocess.Popen, log: Path, what: str, timeout: float = 600, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"launch exited ({proc.returncode}) before {what}:\n{_tail(log)}")
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}:\n{_tail(log)}")


def _new_attempt(project: Path, stage: str, known: set[Path]):
    for marker in (project / "runs").glob(f"*/{stage}/attempt.json"):
        if marker.parent not in known:
            return marker.parent
    return None


def _complete_steps(trainer_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in trainer_dir.glob("checkpoint-*")
                  if (p / "trainer_state.json").is_file())


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _plant_sentinel(trainer_dir: Path) -> int:
    """Mark the newest complete checkpoint's log: only a trainer that resumes from that checkpoint
    (loading its trainer_state.json) carries the mark into its own log.  Returns its step."""
    steps = _complete_steps(trainer_dir)
    assert steps and 1 <= steps[-1] < RL_STEPS, f"killed too late to resume mid-training: {steps}"
    state_file = trainer_dir / f"checkpoint-{steps[-1]}" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    logged = [e for e in state["log_history"] if e.get("step") == steps[-1]]
    assert logged, state["log_history"]
    logged[-1][SENTINEL] = 4242.0
    state_file.write_text(json.dumps(state, indent=2))
    return steps[-1]


def _assert_rl_resumed_from(rl: dict, step: int) -> None:
    """reasoning_rl's report entry continued from the checkpoint marked at ``step``, not from step 0."""
    sentinel_steps = [e["step"] for e in rl["train_log"] if e.get(SENTINEL) == 4242.0]
    assert sentinel_steps == [step], "reasoning_rl restarted instead of resuming its checkpoint"
    trained = [e["step"] for e in rl["train_log"] if "loss" in e]
    assert trained == list(range(1, RL_STEPS + 1)), trained  # each step once: none redone, none skipped
    final_state = json.loads((Path(rl["checkpoint"]["path"]).parent / "trainer" / f"checkpoint-{RL_STEPS}"
                              / "trainer_state.json").read_text())
    assert final_state["global_step"] == RL_STEPS
    assert any(e.get(SENTINEL) == 4242.0 for e in final_state["log_history"])


def _report(run_dir: Path) -> dict | None:
    path = run_dir / "report.json"
    return json.loads(path.read_text()) if path.exists() else None


def _entries(report: dict | None) -> dict[str, dict]:
    return {s["name"]: s for s in (report or {}).get("stages", [])}


def _assert_registry_consistent(project: Path) -> list[dict]:
    """One version per checkpoint digest; every version's checkpoint intact; every version was
    registered by a run whose report lists that stage, passed, with that digest (a stage killed
    before it returned is never registered, whatever it left on disk)."""
    from posttrain.registry.checkpoint import is_intact
    from posttrain.registry.model_registry import Registry
    from posttrain.schema import CheckpointRef

    registry = Registry(project / "runs" / "registry", model_name="posttrain-smoke")
    versions = registry.versions()
    digests = [v["tags"]["digest"] for v in versions]
    assert len(digests) == len(set(digests)), f"a checkpoint was registered twice: {digests}"
    for v in versions:
        assert is_intact(CheckpointRef(path=v["source"], digest=v["tags"]["digest"])), v
        assert v["tags"].get("gate") == "passed", v  # smoke gates have no targets: every gate passes
        entry = _entries(_report(project / "runs" / v["tags"]["flow_run"])).get(v["stage"])
        assert entry and entry["status"] == "passed", f"version {v['version']} has no finished stage behind it"
        assert entry["checkpoint"]["digest"] == v["tags"]["digest"]
    return versions


def test_kill_inside_every_stage_then_relaunch(project, prefect_server, tmp_path):
    rng = random.Random(SEED)
    print(f"\nfault-injection seed {SEED} (POSTTRAIN_FAULT_SEED)")
    killed: dict[str, Path] = {}          # stage -> work dir of the attempt that was killed
    known: dict[str, set[Path]] = {s: set() for s in STAGES}
    rl_resume_step = None
    for j, stage in enumerate(STAGES):
        log = tmp_path / f"launch{j}.log"
        started = time.monotonic()
        proc = _launch(project, prefect_server, stage, log)
        try:
            work = _wait_for(lambda: _new_attempt(project, stage, known[stage]), proc, log, f"{stage} to start")
            stage_started = time.monotonic()
            known[stage].add(work)
            if stage == "reasoning_rl":  # the first complete in-stage checkpoint, then a little later
                _wait_for(lambda: _complete_steps(work / "trainer"), proc, log, "reasoning_rl's checkpoint-1")
                delay = rng.uniform(0, 0.1)
            else:
                delay = rng.uniform(0, KILL_WINDOW_S)
            time.sleep(delay)
        finally:
            if proc.poll() is None:
                _kill(proc)
        into = time.monotonic() - stage_started
        assert proc.returncode == -signal.SIGKILL, f"launch {j} ended on its own:\n{_tail(log)}"
        marker = json.loads((work / "attempt.json").read_text())
        assert marker["finished"] is None, f"the kill landed after {stage} returned"
        where = "after its work (result not yet persisted)" if (work / "checkpoint").exists() else "during its work"
        print(f"launch {j}: killed {into:.2f} s into {stage} (random delay {delay:.2f} s), {where}; "
              f"launch took {time.monotonic() - started:.0f} s")
        killed[stage] = work

        run_dir = work.parent
        entries = _entries(_report(run_dir))
        assert stage not in entries, f"{stage} ended ({entries[stage]['status']}) in the killed run:\n{_tail(log)}"
        for earlier in STAGES[:j]:  # every earlier stage is reused; the one killed last time is recomputed
            assert entries[earlier]["status"] == "passed", (earlier, entries[earlier])
            assert entries[earlier]["cached"] is (earlier != STAGES[j - 1]), (j, earlier)
        if j >= 1:
            assert run_dir != killed[STAGES[j - 1]].parent  # a relaunch is a new flow run
        _assert_registry_consistent(project)

        if stage == "reasoning_rl":
            rl_resume_step = _plant_sentinel(work / "trainer")
        if j >= 1 and STAGES[j - 1] == "reasoning_rl":
            _assert_rl_resumed_from(entries["reasoning_rl"], rl_resume_step)

    # Before the last launch: simulate a kill between registering a checkpoint and recording its gate
    # (a window of milliseconds the random kills cannot aim at): the relaunch must record the gate.
    from posttrain.registry.model_registry import Registry

    registry = Registry(project / "runs" / "registry", model_name="posttrain-smoke")
    half = next(v for v in registry.versions() if v["stage"] == "cold_start_sft")
    registry.client.delete_model_version_tag(registry.model_name, half["version"], "gate")
    registry.client.delete_registered_model_alias(registry.model_name, "candidate-cold_start_sft")

    _complete(project, prefect_server, tmp_path / "launch-final.log")
    newest = max((project / "runs").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    final = _entries(_report(newest.parent))
    assert [n for n in final] == ["base", *STAGES]
    assert all(s["status"] == "passed" for s in final.values()), final
    assert {n: s["cached"] for n, s in final.items()} == {"base": True, **{n: n != "distillation" for n in STAGES}}

    versions = _assert_registry_consistent(project)
    assert registry.get(half["version"])["tags"]["gate"] == "passed"
    assert registry.alias("candidate-cold_start_sft") == half["version"]
    chain = {s["checkpoint"]["digest"] for n, s in final.items() if n != "base"}
    chain.discard(final["base"]["checkpoint"]["digest"])
    assert {v["tags"]["digest"] for v in versions} == chain  # exactly the final chain, nothing else


# ---------------------------------------------------------------------------------- resume after kill -9
# A killed `posttrain run` leaves its flow run RUNNING on the API (nothing is left to report the end):
# `posttrain resume` must tell that its process is gone (posttrain/orchestration/liveness.py), mark it Crashed and
# resume that same flow run.


def test_resume_a_run_whose_process_was_killed_inside_a_stage(project, prefect_server, tmp_path, capsys):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from posttrain import cli
    from posttrain.orchestration.liveness import RECORD_FILE, read_record
    from posttrain.registry.model_registry import Registry  # noqa: F401  (MLflow imported now: `status` mid-run is then quick)

    def cli_out(*argv) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    config = str(project / "smoke.yaml")
    log = tmp_path / "run.log"
    proc = _launch(project, prefect_server, "reasoning_rl", log)
    with temporary_settings({PREFECT_API_URL: prefect_server[0]}):
        try:
            record = _wait_for(lambda: next((project / "runs").glob(f"*/{RECORD_FILE}"), None), proc, log,
                               "the run's process record")
            run_dir = record.parent
            run_id = run_dir.name
            code, _, err = cli_out("resume", run_id)  # the process is alive: refused, naming it
            assert code == 2 and f"its process is alive: pid {proc.pid} on " in err, err
            # status reads the registry: wait until the run has made it (its first report follows).
            _wait_for(lambda: (run_dir / "report.json").exists(), proc, log, "the first stage's report")
            code, out, _ = cli_out("status", "--config", config)
            assert out.startswith(f"run {run_id}: running (pid {proc.pid} on "), out

            work = _wait_for(lambda: _new_attempt(project, "reasoning_rl", set()), proc, log, "reasoning_rl to start")
            _wait_for(lambda: _complete_steps(work / "trainer"), proc, log, "reasoning_rl's checkpoint-1")
        finally:
            if proc.poll() is None:
                _kill(proc)
        assert read_attempt(work)["finished"] is None, "the kill landed after reasoning_rl returned"
        assert work.parent == run_dir
        resume_step = _plant_sentinel(work / "trainer")
        with get_client(sync_client=True) as client:
            assert client.read_flow_run(run_id).state.is_running()  # what kill -9 leaves behind
        code, out, _ = cli_out("status", "--config", config)
        assert out.startswith(f"run {run_id}: crashed (process gone)") and f"posttrain resume {run_id}" in out, out

        resume_log = tmp_path / "resume.log"
        resumed = _complete(project, prefect_server, resume_log, "resume", run_id)
        said = resume_log.read_text()
        assert f"pid {proc.pid} on " in said and "marked Crashed" in said and f"flow run {run_id} completed" in said

        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(run_id)
            assert flow_run.state.is_completed() and flow_run.run_count == 2  # the same run, a second attempt
            states = client.read_flow_run_states(run_id)
            names = [s.name for s in states]
            crashed = states[names.index("Crashed")]
            assert f"pid {proc.pid} on " in crashed.message and "gone" in crashed.message, crashed.message
            assert names.index("Crashed") < names.index("AwaitingRetry") < len(names) - 1
            task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))
            assert all(t.state.is_final() for t in task_runs), [(t.name, t.state.name) for t in task_runs]
            rl_histories = [[s.name for s in client.read_task_run_states(t.id)]
                            for t in task_runs if t.name == "reasoning_rl"]
            assert any("Crashed" in h for h in rl_histories), rl_histories  # the killed stage, not left Running

    final = _entries(_report(run_dir))  # the same run folder: the same flow run
    assert list(final) == ["base", *STAGES] and all(s["status"] == "passed" for s in final.values()), final
    assert final["cold_start_sft"]["cached"] and not final["reasoning_rl"]["cached"]
    _assert_rl_resumed_from(final["reasoning_rl"], resume_step)
    _assert_registry_consistent(project)
    # The killed stage's training run is closed (KILLED), not left RUNNING in the registry's UI.
    from posttrain.config.loading import load_config

    registry = Registry.for_config(load_config(config))
    runs = registry.client.search_runs([registry._experiment()], filter_string=f"tags.flow_run = '{run_id}'")
    statuses = [(r.data.tags.get("stage"), r.info.status) for r in runs]
    assert ("reasoning_rl", "KILLED") in statuses and ("reasoning_rl", "FINISHED") in statuses, statuses
    assert not any(status == "RUNNING" for _, status in statuses) and "marked KILLED" in said, statuses
    record = read_record(run_dir)
    assert record.ended and record.error is None and record.process.pid == resumed.pid
    code, out, _ = cli_out("status", "--config", config)
    assert out.startswith(f"run {run_id}: passed"), out


# ---------------------------------------------------------------------------------- stage attempts
# posttrain/orchestration/attempts.py on fake trainer folders: what a relaunch adopts, and what it never does.


def _fake_checkpoint(trainer_dir: Path, step: int, complete: bool = True) -> Path:
    ckpt = trainer_dir / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(bytes([step]) * 32)
    if complete:  # HF writes trainer_state.json last: without it the save was cut off
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return ckpt


def test_a_relaunch_adopts_the_newest_complete_checkpoint_of_an_interrupted_attempt(tmp_path):
    from posttrain.orchestration.attempts import finish_attempt, read_attempt, start_attempt

    runs = tmp_path / "runs"
    killed = runs / "run-a" / "reasoning_rl"
    assert start_attempt(killed, "key-1") == []
    _fake_checkpoint(killed / "trainer", 2)
    _fake_checkpoint(killed / "trainer", 3, complete=False)   # killed while saving step 3
    other_inputs = runs / "run-b" / "reasoning_rl"
    start_attempt(other_inputs, "key-2")
    _fake_checkpoint(other_inputs / "trainer", 5)               # newer, but other inputs
    done = runs / "run-c" / "reasoning_rl"
    start_attempt(done, "key-1")
    _fake_checkpoint(done / "trainer", 4)
    finish_attempt(done)                                        # finished: its result is cached, not a source

    relaunch = runs / "run-d" / "reasoning_rl"
    adopted = start_attempt(relaunch, "key-1")
    assert adopted == [relaunch / "trainer" / "checkpoint-2"]
    assert (adopted[0] / "model.safetensors").read_bytes() == bytes([2]) * 32
    assert read_attempt(relaunch)["key"] == "key-1" and read_attempt(relaunch)["finished"] is None
    assert read_attempt(done)["finished"] is not None
    assert sorted(p.name for p in (relaunch / "trainer").iterdir()) == ["checkpoint-2"]  # no temp copy left

    # A retry of the same flow run keeps its own checkpoints and drops the one cut off mid-save.
    _fake_checkpoint(relaunch / "trainer", 3, complete=False)
    (relaunch / "trainer" / ".checkpoint-2.tmp-0123abcd").mkdir()  # an adoption copy cut off by a kill
    assert start_attempt(relaunch, "key-1") == []
    assert sorted(p.name for p in (relaunch / "trainer").iterdir()) == ["checkpoint-2"]
    # The killed attempt's own files are never touched by others.
    assert sorted(p.name for p in (killed / "trainer").iterdir()) == ["checkpoint-2", "checkpoint-3"]
