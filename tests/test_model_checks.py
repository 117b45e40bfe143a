"""A user's model is checked before any work: a path or hub id that cannot load, a tokenizer that
cannot end or pad a reply, and chat templates that would train or sample silently wrong are refused
with the config field named; a template whose turns end with a token other than eos (Llama 3's
`<|eot_id|>` beside `<|end_of_text|>`) gets that token as a stop token."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.chat import ChatConfig
from posttrain.registry.checkpoint import ModelCheckError, check_model, load_checkpoint
from posttrain.generation.engines import _stop_ids
from posttrain.schema import ModelSettings
from userdata import QWEN3_STYLE_TEMPLATE, build_model, build_tokenizer

KWARG = ModelSettings(chat=ChatConfig(thinking_switch="template_kwarg"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    build_model(directory, build_tokenizer(directory), hidden=32, layers=1, seed=0)
    return directory


def _with(model_dir: Path, copy: Path, eos_id: int | None = None, **tokenizer_config) -> Path:
    """A copy of the model whose tokenizer_config.json has these entries changed (None: removed),
    and whose generation config stops at `eos_id` when given."""
    copy.mkdir(parents=True)
    for file in model_dir.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    config_file = copy / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    for key, value in tokenizer_config.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    config_file.write_text(json.dumps(config))
    if "chat_template" in tokenizer_config:
        (copy / "chat_template.jinja").unlink(missing_ok=True)
    if eos_id is not None:
        generation = json.loads((copy / "generation_config.json").read_text())
        (copy / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": eos_id}))
    return copy


def test_a_usable_model_passes_and_says_where_replies_end(model_dir):
    assert "replies end at <|im_end|>" in check_model(str(model_dir), KWARG, "base.model")


def test_a_missing_directory_or_uncached_hub_id_is_named_before_any_work(tmp_path):
    with pytest.raises(ModelCheckError, match=r"base.model: '.*/nope' is not a directory"):
        check_model(str(tmp_path / "nope"), KWARG, "base.model")
    with pytest.raises(ModelCheckError, match="base.student: 'someone/missing-model' is neither a local model "
                                              "directory nor a hub model in the local cache"):
        check_model("someone/missing-model", KWARG, "base.student")


def test_a_template_that_ignores_the_mode_switch_is_refused(model_dir, tmp_path):
    ignoring = QWEN3_STYLE_TEMPLATE.replace("enable_thinking is defined and enable_thinking is false", "false")
    variant = _with(model_dir, tmp_path / "a", chat_template=ignoring)
    with pytest.raises(ModelCheckError, match="thinking_switch 'template_kwarg' renders /think and /no_think prompts "
                                              "identically .the template never reads 'enable_thinking'"):
        check_model(str(variant), KWARG, "base.model")
    dropping_system = QWEN3_STYLE_TEMPLATE.replace("{%- for message in messages -%}",
                                                   "{%- for message in messages if message['role'] != 'system' -%}")
    variant = _with(model_dir, tmp_path / "b", chat_template=dropping_system)
    system = ModelSettings(chat=ChatConfig(thinking_switch="system_prompt", think_system_prompt="Think.",
                                           no_think_system_prompt="Answer directly."))
    with pytest.raises(ModelCheckError, match="the template drops system messages"):
        check_model(str(variant), system, "base.model")


def test_a_template_without_a_generation_prompt_is_refused(model_dir, tmp_path):
    no_header = QWEN3_STYLE_TEMPLATE.replace("{{ '<|im_start|>assistant\\n' }}", "")
    variant = _with(model_dir, tmp_path / "a", chat_template=no_header)
    with pytest.raises(ModelCheckError, match="ignores add_generation_prompt"):
        check_model(str(variant), KWARG, "base.model")


def test_a_tokenizer_that_cannot_end_or_pad_a_reply_is_refused(model_dir, tmp_path):
    variant = _with(model_dir, tmp_path / "a", eos_token=None, pad_token=None)
    with pytest.raises(ModelCheckError, match="neither an eos nor a pad token"):
        check_model(str(variant), KWARG, "base.model")


def test_the_turn_end_token_stops_generation_when_eos_is_another_token(model_dir, tmp_path):
    # Llama 3 base: eos (<|end_of_text|>) ends documents, the template ends turns with <|eot_id|>.
    end_of_text = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"][0]
    assert end_of_text["content"] == "<|endoftext|>"
    variant = _with(model_dir, tmp_path / "a", eos_id=end_of_text["id"], eos_token="<|endoftext|>")
    model, tokenizer = load_checkpoint(str(variant), settings=KWARG)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id == end_of_text["id"] != im_end
    assert {im_end, end_of_text["id"]} <= _stop_ids(model, tokenizer)
    model.generation_config.save_pretrained(tmp_path / "saved")   # what every stage's checkpoint carries
    assert json.loads((tmp_path / "saved" / "generation_config.json").read_text())["eos_token_id"] == \
        [end_of_text["id"], im_end]
