"""bench/gpu_smoke.sh, ready for a GPU machine: which carried wheels it installs on a machine that
lacks or has old copies of the stage path's packages, and the whole check rehearsed on CPU."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))   # as the script runs it
import gpu_smoke  # noqa: E402


def wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def test_the_plan_installs_what_is_missing_or_too_old_and_only_that(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "trl", "1.16.0", "datasets>=4.7", "transformers>=4.56")
    wheel(wheels, "datasets", "5.2.0", "dill<0.4.2", "pyarrow>=24")
    wheel(wheels, "dill", "0.4.1")
    wheel(wheels, "transformers", "5.19.0", "tokenizers>=0.23.1")
    wheel(wheels, "peft", "0.21.2")
    machine = {"torch": ("2.11.0", ["nvidia-nccl==2.28; platform_system == 'Linux'"]),
               "transformers": ("5.17.0", ["tokenizers>=0.22"]), "tokenizers": ("0.23.2", []),
               "pyarrow": ("23.0.0", []), "peft": ("0.21.2", ["torch>=1.13"]), "pyyaml": ("6.0.2", ["missing-extra"])}
    roots = ["torch>=2.13,<2.15", "transformers>=5.19,<5.20", "trl>=1.16,<1.17", "peft>=0.21", "pyyaml>=6"]
    install, missing, notes = gpu_smoke.plan(wheels, set(), roots=roots, installed=machine)
    assert sorted(p.name.split("-")[0] for p in install) == ["datasets", "dill", "transformers", "trl"]
    assert missing == []
    joined = "\n".join(notes)
    assert "torch 2.11.0 does not meet `torch<2.15,>=2.13`" in joined      # too big to carry: noted, used
    assert "pyarrow 23.0.0 does not meet `pyarrow>=24` (required by datasets)" in joined
    assert "pyyaml (the machine's) requires `missing-extra`" in joined    # the machine's affair, not fatal
    assert "nvidia" not in joined, "torch's own needs are the machine's business"

    _, missing, _ = gpu_smoke.plan(tmp_path / "no-wheels", set(), roots=roots, installed=machine)
    assert any(m.startswith("trl<1.17,>=1.16 (required by the project") for m in missing), missing
    # rehearsing on a full venv: a distribution named missing is installed from its wheel
    install, _, _ = gpu_smoke.plan(wheels, {"peft"}, roots=roots, installed=machine)
    assert "peft" in {p.name.split("-")[0] for p in install}


def test_a_carried_deepspeed_wheel_is_installed_with_what_it_needs(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "deepspeed", "0.19.8", "hjson", "ninja", "torch>=2.0.0", "pydantic>=2.0.0")
    wheel(wheels, "hjson", "3.1.0")
    wheel(wheels, "ninja", "1.13.0")
    machine = {"torch": ("2.11.0", []), "pydantic": ("2.12.0", [])}
    install, missing, _ = gpu_smoke.plan(wheels, set(), roots=["torch>=2.0"], installed=machine)
    assert sorted(p.name.split("-")[0] for p in install) == ["deepspeed", "hjson", "ninja"] and missing == []
    (wheels / "deepspeed-0.19.8-py3-none-any.whl").unlink()   # no DeepSpeed carried: nothing of it installed
    install, _, _ = gpu_smoke.plan(wheels, set(), roots=["torch>=2.0"], installed=machine)
    assert install == []


def test_the_stage_path_roots_leave_the_orchestration_out():
    names = {r.split(">")[0].split("=")[0].split("<")[0] for r in gpu_smoke.stage_path_roots()}
    assert {"trl", "datasets", "pydantic", "transformers", "torch"} <= names
    assert not names & {"prefect", "dvc", "mlflow-skinny", "sqlalchemy"}


def test_the_report_keeps_what_was_measured_and_why_it_stopped():
    facts = {"device": "cuda", "started": "now", "gpu": "NVIDIA H200, 140 GiB",
             "versions": {"python": "3.12.3", "torch": "2.11.0", "cuda": "13.0", "transformers": "5.19.0", "trl": "1.16.0"},
             "model": {"hidden": 256, "layers": 4, "vocabulary": 402, "parameters": 3_000_000, "dtype": "bf16"},
             "sft": {"steps": 8, "batch": 8, "s_per_step": 0.05, "stage_s": 3.0, "first_loss": 6.0, "last_loss": 4.0},
             "grpo": {"steps": 8, "completions_per_step": 16, "max_completion_length": 64, "s_per_step_median": 0.9,
                      "first_step_s": 1.2, "mean_completion_tokens": 48.0, "completion_tokens_per_s": 850.0, "stage_s": 9.0},
             "grpo_async": {"steps": 8, "completions_per_step": 16, "max_completion_length": 64, "s_per_step_median": 0.6,
                            "first_step_s": 1.2, "mean_completion_tokens": 48.0, "completion_tokens_per_s": 1300.0,
                            "stage_s": 30.0, "rollout": {"rollout/hidden": 0.5, "rollout/batch_staleness": 0.9}},
             "zero2": {"deepspeed": "0.19.8", "processes": 1.0, "zero_stage": 2.0, "steps": 8, "s_per_step": 0.2,
                       "stage_s": 40.0, "first_loss": 6.0, "last_loss": 4.5},
             "error": "Traceback ...\nRuntimeError: CUDA out of memory"}
    text = gpu_smoke.report(facts, {"installed": ["trl-1.16.0-py3-none-any.whl"], "notes": ["torch 2.11.0 ..."]})
    assert text.startswith("# GPU smoke check (bench/gpu_smoke.sh)")
    assert "| cold-start SFT | 8 | 0.050 |" in text and "trl-1.16.0" in text and "- torch 2.11.0" in text
    assert "vLLM" in text and "CUDA out of memory" in text
    assert "| reasoning RL, rollouts async (max_staleness 1, truncated IS) | 8 | 0.600; **1.50x the sync step** |" in text
    assert "generation hidden behind training 0.50" in text
    assert "| cold-start SFT, DeepSpeed 0.19.8 ZeRO-2 (zero2.yaml as shipped, 1 process(es)) | 8 | 0.200 |" in text
    skipped = gpu_smoke.report({**facts, "zero2": {"skipped": "DeepSpeed is not installed here"}}, {})
    assert "DeepSpeed ZeRO-2: not run (DeepSpeed is not installed here)" in skipped


@pytest.mark.slow
def test_the_check_rehearsed_on_cpu(tmp_path):
    """The script end to end on CPU in fp32 with this venv as the machine's Python: the venv that
    sees its packages, the plan (nothing missing here), both stages, the generation timing."""
    env = {**os.environ, "GPU_SMOKE_PYTHON": sys.executable, "GPU_SMOKE_DEVICE": "cpu", "OUT": str(tmp_path),
           "GPU_SMOKE_WHEELS": str(tmp_path / "no-wheels"), "TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_smoke.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "gpu_smoke.md").read_text()
    assert "CPU rehearsal" in report and "| cold-start SFT | 8 |" in report and "| reasoning RL (GRPO) | 8 |" in report
    assert "| reasoning RL, rollouts async (max_staleness 1, truncated IS) | 8 |" in report and "x the sync step" in report
    assert "tokens/s" in report and "stopped with an error" not in report
    facts = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert facts["environment"]["missing"] == [] and facts["grpo"]["completion_tokens_per_s"] > 0
    # the async run really trained on rollouts from the generator process, within its bound
    rollout = facts["grpo_async"]["rollout"]
    assert 0 < rollout["rollout/batch_staleness"] <= 1 and rollout["rollout/generate_s"] > 0
