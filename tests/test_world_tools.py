"""The embedded world's tool tasks: every demonstration solves its task when replayed in its
environment, held-out tasks differ from training, and a demonstration trains on its assistant
turns only (checked on token ids, through the data loader and SFT's dataset)."""
from __future__ import annotations

import json
import re

import pytest

from posttrain.rewards import completion_text, verify_row
from posttrain.world import tool_tasks

pytestmark = pytest.mark.timeout(300)


def test_each_kind_of_demonstration_is_solved_on_its_environment_and_a_guess_is_not():
    train = tool_tasks.tool_tasks(30, 7, "train")
    assert {t.kind for t in train} == set(tool_tasks.KINDS)
    for task in train[:6]:
        row, demo = task.prompt_row(), task.demonstration()
        assert verify_row(completion_text(demo["messages"][1:]), row) == (1.0, "solved"), task
        # the reply without the episode: no call reaches the store, so a state task fails on its state,
        # and an answer without calls is judged on the answer alone
        alone = verify_row(completion_text([{"role": "assistant", "content": task.answer}]), row)
        assert alone == ((0.0, "wrong_state") if task.kind == "copy" else (1.0, "solved"))
        assert verify_row(completion_text([{"role": "assistant", "content": "123"}]), row)[0] == 0.0 or task.answer == "123"


def test_held_out_tasks_use_their_own_phrasings_stores_and_operands():
    train, held_out = tool_tasks.tool_tasks(3000, 7, "train"), tool_tasks.tool_tasks(300, 9, "eval")
    assert not {t.question for t in train} & {t.question for t in held_out}
    seen = {json.dumps(t.setup, sort_keys=True) for t in train if t.setup}
    assert not any(json.dumps(t.setup, sort_keys=True) in seen for t in held_out if t.setup)
    operands = lambda tasks: {tuple(re.findall(r"\d+", t.question)) for t in tasks if t.kind == "product"}  # noqa: E731
    assert operands(train) and not operands(train) & operands(held_out)
    phrasing = {t.question.split()[0] for t in train} & {t.question.split()[0] for t in held_out}
    assert phrasing <= {"What"}   # "What is stored..." (train) against "What value does..." (held out)


def test_a_demonstration_trains_on_its_assistant_turns_only(tokenizer, tmp_path):
    from posttrain.chat import DEFAULT_CHAT
    from posttrain.data.sources import SourceConfig, load_role
    from posttrain.training.trainers import sft_dataset

    task = next(t for t in tool_tasks.tool_tasks(9, 3, "train") if t.kind == "copy")
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps(task.demonstration()) + "\n")
    rows = load_role("cold_start", [SourceConfig(path=str(path))], tmp_path, 0).rows
    assert rows[0]["environment"] == "kv_store" and rows[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "get"
    example = sft_dataset(tokenizer, DEFAULT_CHAT, rows)[0][0]
    ids, mask = example["input_ids"], example["completion_mask"]
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    value = task.answer
    calls = [f'<tool_call>\n{{"name": "get", "arguments": {{"key": "{task.calls[0][1]["key"]}"}}}}\n</tool_call><|im_end|>',
             f'<tool_call>\n{{"name": "set", "arguments": {{"key": "{task.calls[1][1]["key"]}", "value": "{value}"}}}}\n'
             f'</tool_call><|im_end|>', f"{value}<|im_end|>"]
    assert trained == "".join(calls)
    masked = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    assert masked.count("<tool_response>") == 2 and "Tools: get(key) set(key, value)" in masked
    assert f"<tool_response>\n{value}\n</tool_response>" in masked and "ok" in masked
    # with world.tool_markers, the markers are one token each, as in Qwen3's vocabulary
    from posttrain.world.tokenizer import build_tokenizer

    marked = build_tokenizer(tmp_path / "marked", tool_markers=True)
    assert len(marked("<tool_call></tool_response>", add_special_tokens=False)["input_ids"]) == 2
    assert len(tokenizer) == len(marked) - 4
    # the whole example is the conversation as the template renders it
    from posttrain.agents.training import shown_tools

    rendered = tokenizer.apply_chat_template(rows[0]["messages"], tools=shown_tools(rows[0]), tokenize=False)
    assert tokenizer.decode(ids) == rendered.rstrip("\n")


def test_a_tool_conversation_without_its_tools_is_refused_naming_the_row(tmp_path):
    from posttrain.data.files import DatasetError
    from posttrain.data.sources import SourceConfig, load_role

    demo = tool_tasks.tool_tasks(3, 3, "train")[0].demonstration()
    for broken, problem in (({**demo, "environment": None}, "needs an 'environment' or 'tools' column"),
                            ({**demo, "environment": "nowhere"}, "unknown environment 'nowhere'")):
        path = tmp_path / "demos.jsonl"
        path.write_text(json.dumps(broken) + "\n")
        with pytest.raises(DatasetError, match=problem) as caught:
            load_role("cold_start", [SourceConfig(path=str(path))], tmp_path, 0)
        assert "demos.jsonl:1: " in str(caught.value)
