"""A new user's model and data, end to end: all six stages through `posttrain run` on a tiny HF model
with a byte-level BPE tokenizer and a Qwen3-style template without `{% generation %}` markers, on
datasets in four forms, with the embedded world made unimportable. Also: the completion mask token
by token, zero usable rows, and a changed data file rerunning only the stage that reads it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from userdata import build_project

pytestmark = pytest.mark.timeout(900)

# The run must not need the embedded world: importing it fails in the child process.
RUN_WITHOUT_WORLD = ("import sys; sys.modules['posttrain.world'] = None; from posttrain.cli import main; "
                     "sys.exit(main(sys.argv[1:]))")


def _posttrain(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(project / ".prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT_WORLD, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=800)


def _report(project: Path) -> dict:
    reports = sorted((project / "runs").glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(reports[-1].read_text())


@pytest.fixture(scope="module")
def user_project(tmp_path_factory):
    root = tmp_path_factory.mktemp("user")
    config = build_project(root)
    done = _posttrain(root, "run", "--config", str(config), "--on-gate-failure", "continue")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, config, _report(root)


def test_all_six_stages_run_on_a_users_model_and_data_without_the_embedded_world(user_project):
    _, _, report = user_project
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["base", "cold_start_sft", "reasoning_rl", "rejection_sampling", "mode_fusion_sft",
                            "general_rl", "distillation"]
    for name, stage in stages.items():
        assert stage["status"] == "passed", name
        # the suites named in the config, a `both` suite asked in each mode
        assert {"math_think/accuracy", "math_no_think/mode_compliance", "instruction/accuracy"} <= set(stage["eval"])
    cold = stages["cold_start_sft"]
    assert cold["train_metrics"]["examples"] == 24                    # the user's 24 JSONL rows
    losses = [row["loss"] for row in cold["train_log"] if "loss" in row]
    assert len(losses) == 4 and losses[-1] < losses[0]                # training on them lowers the loss
    assert stages["reasoning_rl"]["train_metrics"]["prompts"] == 24     # the CSV, columns mapped
    assert stages["mode_fusion_sft"]["train_metrics"]["rows/non_reasoning"] == 6   # the parquet rows
    assert stages["general_rl"]["train_metrics"]["instruction_prompts"] == 8       # the save_to_disk rows
    assert stages["distillation"]["train_metrics"]["teacher_samples"] == 12


def test_completion_mask_is_exactly_the_assistant_reply_with_a_template_that_has_no_generation_marks(tmp_path):
    from posttrain.chat import ChatConfig, render_prompt, sft_example
    from userdata import build_tokenizer

    tokenizer = build_tokenizer(tmp_path / "tok")
    chat = ChatConfig(thinking_switch="template_kwarg")
    for reply, thinking in [("<think>\nadd them\n</think>\n\nThe answer is \\boxed{7}.", True),
                            ("<think>\n\n</think>\n\nseven", False)]:
        messages = [{"role": "user", "content": "What is 3 plus 4?"}, {"role": "assistant", "content": reply}]
        example = sft_example(tokenizer, chat, messages, thinking)
        trained = [t for t, m in zip(example["input_ids"], example["completion_mask"]) if m]
        prompt, prefill = render_prompt(tokenizer, chat, messages[:1], thinking)
        # the reply's tokens after what the template pre-filled, then the end-of-turn token
        expected = tokenizer(reply.removeprefix(prefill) + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert trained == expected
        assert example["input_ids"][:example["completion_mask"].index(1)] == tokenizer(
            prompt, add_special_tokens=False)["input_ids"]
    assert prefill == "<think>\n\n</think>\n\n"   # Qwen3's pre-filled empty think block, thinking off


def test_a_stage_handed_zero_usable_rows_stops_with_a_clear_message(tmp_path, user_project):
    from posttrain.data.files import DatasetError
    from posttrain.data.prepared import load_all
    from posttrain.schema import CheckpointRef, DatasetRef, StageInputs
    from posttrain.config.pipeline import ColdStartSFTConfig
    from posttrain.config.loading import load_config
    from posttrain.training.trainers import NoUsableRows
    from stages import cold_start_sft

    root, config, _ = user_project
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cfg = load_config(config, overrides={"data.cold_start": {"path": str(empty)}})
    with pytest.raises(DatasetError, match=r"empty.jsonl: data source of role 'cold_start' is empty"):
        load_all(cfg)
    inputs = StageInputs(work_dir=str(tmp_path / "stage"), parent=CheckpointRef(path=str(root / "models" / "teacher"),
                                                                                digest="x"),
                         data={"cold_start": DatasetRef(name="cold_start", path=str(empty), md5="0")})
    with pytest.raises(NoUsableRows, match="cold_start_sft: no usable rows in cold_start"):
        cold_start_sft.run(ColdStartSFTConfig(), inputs)
    assert not (tmp_path / "stage" / "checkpoint").exists()


@pytest.mark.slow   # a second pipeline run: make test-all and CI run it
def test_changing_one_data_file_reruns_only_the_stage_that_reads_it_and_lineage_names_its_hash(user_project):
    root, config, first = user_project
    with open(root / "data" / "distill.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": "What is 1000 plus 1?", "answer": "1001", "kind": "math"}) + "\n")
    # an evaluation source changes too: evaluation and gates rerun, training does not
    with open(root / "data" / "eval_math.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": "What is 2000 plus 2?", "answer": "2002", "kind": "math"}) + "\n")
    done = _posttrain(root, "run", "--config", str(config), "--on-gate-failure", "continue")
    assert done.returncode == 0, done.stderr[-3000:]
    second = {s["name"]: s for s in _report(root)["stages"]}
    for name in ("cold_start_sft", "reasoning_rl", "rejection_sampling", "mode_fusion_sft", "general_rl"):
        assert second[name]["cached"] is True, name
    assert second["distillation"]["cached"] is False
    assert second["distillation"]["train_metrics"]["teacher_samples"] == 13
    first_stages = {s["name"]: s for s in first["stages"]}
    for name in ("cold_start_sft", "general_rl"):   # same checkpoint, evaluated again on the changed suite
        assert second[name]["checkpoint"]["digest"] == first_stages[name]["checkpoint"]["digest"]
        assert (first_stages[name]["eval_items"]["math_think"], second[name]["eval_items"]["math_think"]) == (8, 9)

    from posttrain.data.files import file_md5

    lineage = _posttrain(root, "lineage", str(second["distillation"]["checkpoint"]["version"]), "--config", str(config))
    assert lineage.returncode == 0, lineage.stderr
    assert file_md5(root / "data" / "distill.jsonl") in lineage.stdout


def test_an_hf_dataset_id_loads_offline_from_the_local_cache(tmp_path, monkeypatch):
    """A dataset a user loaded once before (online) sits in the HF datasets cache; offline,
    `datasets.load_dataset(id)` serves it from there, and so does a source that names the id."""
    import glob
    import shutil

    from datasets import load_dataset

    import datasets.config
    from posttrain.data.sources import SourceConfig, load_role

    source = tmp_path / "math.jsonl"
    source.write_text("".join(json.dumps({"q": f"What is {i} plus 1?", "a": str(i + 1)}) + "\n" for i in range(5)))
    load_dataset("json", data_files={"train": str(source)}, cache_dir=str(tmp_path / "build"))
    built = Path(next(p for p in glob.glob(str(tmp_path / "build" / "json" / "*" / "*" / "*")) if Path(p).is_dir()))
    cache = tmp_path / "hf-datasets"
    target = cache / "acme___tiny-math" / "default" / "0.0.0" / built.name
    shutil.copytree(built, target)
    for arrow in target.glob("json-*.arrow"):   # what an online load of acme/tiny-math leaves behind
        arrow.rename(target / arrow.name.replace("json-", "tiny-math-"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)

    role = load_role("reasoning_prompts", [SourceConfig(hf="acme/tiny-math", kind="math",
                                                        columns={"q": "prompt", "a": "answer"})], tmp_path, seed=0)
    assert [r["answer"] for r in role.rows] == ["1", "2", "3", "4", "5"]
    assert role.rows[0]["prompt"] == [{"role": "user", "content": "What is 0 plus 1?"}]
    assert role.hashes["hf:acme/tiny-math[train]"].startswith("hf:")


def test_a_base_model_without_chat_template_or_think_tokens_gets_them_from_the_config(tmp_path):
    from transformers import AutoTokenizer

    from posttrain.chat import ChatConfig
    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.schema import ModelSettings
    from userdata import QWEN3_STYLE_TEMPLATE, build_model, build_tokenizer

    tokenizer = build_tokenizer(tmp_path / "tok")
    bare = AutoTokenizer.from_pretrained(tmp_path / "tok")
    bare.chat_template = None
    build_model(tmp_path / "base", bare, hidden=16, layers=1, seed=0)
    tokenizer_json = tmp_path / "base" / "tokenizer_config.json"
    settings = json.loads(tokenizer_json.read_text())
    settings.pop("chat_template", None)
    tokenizer_json.write_text(json.dumps(settings))
    (tmp_path / "base" / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="has no chat template .* set base.chat.template"):
        load_checkpoint(str(tmp_path / "base"), settings=ModelSettings())
    chat = ChatConfig(template=QWEN3_STYLE_TEMPLATE, think_open="<reason>", think_close="</reason>",
                      add_think_tokens=True)
    model, loaded = load_checkpoint(str(tmp_path / "base"), settings=ModelSettings(chat=chat))
    assert loaded.chat_template == QWEN3_STYLE_TEMPLATE
    assert len(loaded) == len(tokenizer) + 2 == model.get_input_embeddings().weight.shape[0]
    assert loaded.convert_tokens_to_ids("<reason>") != loaded.unk_token_id
    assert loaded.decode(loaded("<reason>x</reason>", add_special_tokens=False)["input_ids"]) == "<reason>x</reason>"


def test_data_add_tracks_a_user_file_with_dvc_and_names_its_hash(tmp_path):
    from posttrain.data.files import file_md5
    from posttrain.data.store import track_user_data

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    data = tmp_path / "data" / "prompts.jsonl"
    data.parent.mkdir()
    data.write_text('{"prompt": "What is 1 plus 1?", "answer": "2", "kind": "math"}\n')
    line = track_user_data(data, tmp_path)
    assert file_md5(data) in line
    assert yaml.safe_load((tmp_path / "data" / "prompts.jsonl.dvc").read_text())["outs"][0]["md5"] == file_md5(data)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.jsonl"
    elsewhere.write_text(data.read_text())
    with pytest.raises(ValueError, match="outside the project"):
        track_user_data(elsewhere, tmp_path)
