"""The registry behind a real MLflow tracking server (`paths.registry: http://127.0.0.1:<port>`, what
`make mlflow` serves): a `mlflow server` subprocess on a free port with its own SQLite store and
artifact root, one per module.

Registration through the server (the version's source is a pointer artifact in the stage's run),
candidate aliases, promotion and rollback, lineage from tags, a second machine's view, training
metrics reaching the registry at every logging step (through the server and into the SQLite store),
and the smoke pipeline registering into the server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml

from conftest import config_error, write_smoke_config
from test_deployments import _free_port
from test_promotion import ACTOR, CHAIN, fake_checkpoint, populate, verdict

pytestmark = pytest.mark.timeout(600)


def _full_mlflow() -> bool:
    try:
        version("mlflow")  # the server's distribution; the base install has only mlflow-skinny
        return True
    except PackageNotFoundError:
        return False


needs_server = pytest.mark.skipif(not _full_mlflow(), reason="the full MLflow server is not installed "
                                  "(pip install -e '.[mlflow-server]', which `make mlflow` does)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """URL of a `mlflow server` on 127.0.0.1 (SQLite store and artifact root in a temporary folder)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
               "--artifacts-destination", str(root / "artifacts")]
    # Own session: the server's uvicorn child goes with it.
    proc = subprocess.Popen(command, cwd=root, env=env, start_new_session=True,
                            stdout=open(root / "server.log", "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                log = (root / "server.log").read_text()[-3000:]
                raise RuntimeError(f"mlflow server exited with {proc.returncode}: {log}")
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"mlflow server on {url} not healthy after 180 s") from None
                time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_registry_location_is_a_folder_or_an_http_server(tmp_path):
    from posttrain.config.loading import load_config

    path = tmp_path / "c.yaml"
    path.write_text("paths: {registry: 'http://127.0.0.1:5000/'}\n")
    assert load_config(path).paths.registry == "http://127.0.0.1:5000"
    for bad, says in (("ftp://host:21", "scheme 'ftp' is not supported"), ("sqlite:///x.db", "scheme 'sqlite'"),
                      ("localhost:5000", "scheme 'localhost'"), ("http://:5000", "names no host"),
                      ("http://host:99999", "the port is not a number"),
                      ("https://user:secret@host", "MLFLOW_TRACKING_TOKEN")):
        message = config_error(tmp_path, f"paths: {{registry: '{bad}'}}\n")
        assert "paths.registry" in message and says in message, message
    # The refused URI is quoted back without its password (the error is printed and logged).
    for uri in ("https://bob:hunter2@host:5000", "ftp://bob:hunter2@host"):
        message = config_error(tmp_path, f"paths: {{registry: '{uri}'}}\n")
        assert "hunter2" not in message and "://***@host" in message, message


def test_unreachable_server_is_a_clear_error(tmp_path):
    from posttrain.registry.model_registry import Registry, RegistryUnreachable

    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(RegistryUnreachable, match=r"paths\.registry.*make mlflow"):
        Registry(tmp_path, model_name="posttrain-nobody", server=url)


def test_a_command_on_an_unreachable_server_says_so(tmp_path, capsys):
    from posttrain import cli

    config = write_smoke_config(tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["paths"]["registry"] = f"http://127.0.0.1:{_free_port()}"
    config.write_text(yaml.safe_dump(cfg))
    assert cli.main(["history", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "paths.registry" in err and "make mlflow" in err


@needs_server
def test_versions_aliases_promotion_and_lineage_through_the_server(server, tmp_path):
    from posttrain.registry import promotion
    from posttrain.registry.lineage import lineage
    from posttrain.registry.model_registry import Registry

    reg = Registry(tmp_path / "state", model_name="posttrain-ops", server=server)
    assert not (tmp_path / "state" / "mlflow.db").exists()   # nothing local but locks and history
    refs = populate(reg, tmp_path)                           # test_promotion's chain, same version numbers

    for number, ref in refs.items():
        got = reg.get(number)
        assert got["source"] == ref.path and got["tags"]["checkpoint_path"] == ref.path
        assert got["tags"]["digest"] == ref.digest and got["stage"] == CHAIN[number][0]
        # MLflow's own source is the pointer artifact inside the version's run, which the server accepts
        run = reg.client.get_run(got["run_id"])
        assert got["model_source"].startswith(run.info.artifact_uri + "/checkpoints/")
        pointer = reg.client.download_artifacts(got["run_id"], got["model_source"].split("/artifacts/", 1)[1],
                                                str(tmp_path / f"pointer-{number}"))
        assert json.loads((Path(pointer) / "checkpoint.json").read_text())["path"] == ref.path

    # candidate aliases: the newest passing version of each stage; version 3 failed its gate
    assert reg.aliases() == {"candidate-cold_start_sft": "1", "candidate-reasoning_rl": "2",
                             "candidate-mode_fusion_sft": "4", "candidate-general_rl": "5"}
    assert reg.get("3")["tags"]["status"] == "rejected"
    newer = fake_checkpoint(tmp_path, "v6-cold")
    v6, created = reg.register_once("cold_start_sft", newer, {"parent_version": "base"})
    assert created and reg.register_once("cold_start_sft", newer, {})[0] == v6 == "6"
    reg.record_gate(v6, verdict("cold_start_sft", True))
    assert reg.alias("candidate-cold_start_sft") == "6"
    reg.record_gate(v6, verdict("cold_start_sft", False))
    assert reg.alias("candidate-cold_start_sft") is None and reg.get(v6)["tags"]["status"] == "rejected"

    # promotion and rollback move the server's alias; the history is this machine's
    with pytest.raises(promotion.PromotionRefused):
        promotion.promote(reg, "3", actor=ACTOR)
    promotion.promote(reg, "2", actor=ACTOR)
    promotion.promote(reg, "general_rl", actor=ACTOR)
    assert reg.alias("production") == "5"
    entry = promotion.rollback(reg, actor=ACTOR, reason="regressed")
    assert (entry["from"], entry["to"]) == ("5", "2") and reg.alias("production") == "2"
    assert [e["to"] for e in promotion.history(reg)] == ["2", "5", "2"]

    chain = lineage(reg, "5")
    assert [c["version"] for c in chain] == ["5", "4", "2", "1", "base"]
    assert chain[1]["datasets_produced"] == {"fusion_mix.jsonl": "md5-mix-4"} and chain[0]["source"] == refs["5"].path

    # another machine (its own local folder) sees the same versions and aliases
    other = Registry(tmp_path / "elsewhere", model_name="posttrain-ops", server=server)
    assert other.aliases() == reg.aliases() and len(other.versions()) == 6
    assert other.get("5")["source"] == refs["5"].path

    # the same folder pointed at another registry with a model of that name: the history is not replayed there
    elsewhere = Registry(tmp_path / "state", model_name="posttrain-ops")   # a SQLite store in that folder
    elsewhere.register("cold_start_sft", refs["1"], {})
    with pytest.raises(promotion.PromotionError, match=r"records the production moves .* paths\.registry"):
        promotion.promote(elsewhere, "1", actor=ACTOR, force=True, reason="x")
    assert elsewhere.alias("production") is None


@pytest.mark.parametrize("backend", ["server", "folder"])
def test_training_metrics_reach_the_registry_at_every_logging_step(backend, request, tmp_path):
    """Through a server and into the SQLite store alike, with the trainer still running."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from posttrain.registry.live_metrics import follow
    from posttrain.registry.model_registry import Registry
    from posttrain.schema import CheckpointRef, StageInputs

    if backend == "server" and not _full_mlflow():
        pytest.skip("the full MLflow server is not installed (pip install -e '.[mlflow-server]')")
    server = request.getfixturevalue("server") if backend == "server" else None
    reg = Registry(tmp_path / "state", model_name="posttrain-live", server=server)
    tracking = reg.start_training("cold_start_sft", {"flow_run": "fr-live"})
    assert reg.client.get_run(tracking.run_id).info.status == "RUNNING"

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), labels)}

    class Seen(TrainerCallback):
        """What the server holds each time the trainer logs, read while training goes on."""

        def __init__(self):
            self.steps: list[list[int]] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            live.flush()
            history = reg.client.get_metric_history(tracking.run_id, "loss")
            self.steps.append(sorted(m.step for m in history))

    torch.manual_seed(0)
    rows = [{"x": torch.randn(4), "labels": torch.randn(())} for _ in range(16)]
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), max_steps=4, logging_steps=1,
                             per_device_train_batch_size=4, report_to="none", save_strategy="no",
                             use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=rows)
    inputs = StageInputs(work_dir=str(tmp_path), parent=CheckpointRef(path="x", digest="d"), tracking=tracking)
    live = follow(trainer, inputs)
    seen = Seen()
    trainer.add_callback(seen)   # after LiveMetrics: called after it at each log line
    trainer.train()

    # at the n-th log line the registry already had the loss of steps 1..n: live, not after the stage
    assert seen.steps[:4] == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    assert reg.client.get_run(tracking.run_id).info.status == "RUNNING"
    metrics = reg.client.get_run(tracking.run_id).data.metrics
    assert {"loss", "learning_rate", "grad_norm", "train_runtime"} <= set(metrics)

    # closing the run logs the settings and does not draw the curve a second time
    reg.finish_training(tracking.run_id, {"learning_rate": 1e-3}, [{"step": 1, "loss": 9.0}])
    run = reg.client.get_run(tracking.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"learning_rate": "0.001"}
    assert len(reg.client.get_metric_history(tracking.run_id, "loss")) == 4


@needs_server
def test_a_stage_that_did_not_log_live_gets_its_curve_at_the_end(server, tmp_path):
    from posttrain.registry.model_registry import Registry

    reg = Registry(tmp_path / "state", model_name="posttrain-late", server=server)
    run_id = reg.start_training("rejection_sampling", {}).run_id
    reg.finish_training(run_id, {}, [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    assert [m.value for m in reg.client.get_metric_history(run_id, "loss")] == [2.0, 1.0]
    failed = reg.start_training("reasoning_rl", {}).run_id
    reg.end_training(failed)
    assert reg.client.get_run(failed).info.status == "FAILED"


@needs_server
@pytest.mark.slow
def test_smoke_pipeline_registers_into_the_server(server, tmp_path, monkeypatch):
    """The smoke chain with `paths.registry` set to the server (42-107 s here, hence slow): every
    stage's version, alias, lineage tags and training run are on the server, and the curves were
    logged while each stage trained."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import pipeline
    from posttrain.registry.model_registry import Registry

    config = write_smoke_config(tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["paths"]["registry"] = server
    config.write_text(yaml.safe_dump(cfg))
    monkeypatch.delenv("POSTTRAIN_FAIL_STAGE", raising=False)
    with prefect_test_harness(server_startup_timeout=120):
        state = pipeline(config_path=str(config), return_state=True)
    assert state.is_completed(), state.message
    report = json.loads(max((tmp_path / "runs").glob("*/report.json"), key=lambda p: p.stat().st_mtime).read_text())
    stages = {s["name"]: s for s in report["stages"][1:]}

    reg = Registry(tmp_path / "elsewhere", model_name="posttrain-smoke", server=server)
    assert not (tmp_path / "runs" / "registry" / "mlflow.db").exists()   # nothing went to a local store
    for name, stage in stages.items():
        got = reg.get(stage["checkpoint"]["version"])
        assert got["tags"]["digest"] == stage["checkpoint"]["digest"], name
        if got["stage"] == name:  # else a stage that left the weights as they were, sharing its parent's version
            assert got["source"] == stage["checkpoint"]["path"], name
    assert reg.get(reg.alias("candidate-distillation"))["stage"] == "distillation"

    sft = reg.get(stages["cold_start_sft"]["checkpoint"]["version"])
    assert sft["tags"]["flow_run"] == report["run_id"] and sft["tags"]["gate"] == "passed"
    assert reg.alias("candidate-cold_start_sft") == sft["version"]
    rl = reg.get(stages["reasoning_rl"]["checkpoint"]["version"])
    if rl["version"] != sft["version"]:  # a smoke RL step with all-equal rewards can leave the weights as they were
        assert rl["tags"]["parent_version"] == sft["version"] and rl["stage"] == "reasoning_rl"

    for name in ("cold_start_sft", "mode_fusion_sft", "distillation"):
        version = reg.get(stages[name]["checkpoint"]["version"])
        run = reg.client.get_run(version["run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["flow_run"] == report["run_id"], name
        assert "datasets" in run.data.tags and run.data.params, name
        history = reg.client.get_metric_history(version["run_id"], "loss")
        assert sorted(m.step for m in history) == [1, 2], name
        # logged during training, before the stage wrote its checkpoint, not after it returned
        weights = Path(version["source"]) / "model.safetensors"
        assert min(m.timestamp for m in history) / 1000 < weights.stat().st_mtime, name
