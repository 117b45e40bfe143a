"""The `preferences` data role (posttrain.data.preferences): TRL's preference formats, explicit and
implicit prompt, standard and conversational, go in through the config alone (UltraFeedback-
binarized as published among them), normalised to TRL's explicit-prompt form; bad pairs are refused
naming file, row or line, and column; the role is optional, prepared, and said to be read by no
stage yet."""
import json
import subprocess
import sys

import pytest

import published_shapes as shapes
from posttrain.data.files import DatasetError

USER = {"role": "user", "content": "What color is the sky?"}
BLUE = {"role": "assistant", "content": "It is blue."}
GREEN = {"role": "assistant", "content": "It is green."}


def _config(tmp_path, source: str, extra: str = "") -> object:
    from posttrain.config.loading import load_config

    path = tmp_path / "config.yaml"
    path.write_text(f"data:\n  preferences:\n    - {source}\n{extra}")
    return load_config(path, project_root=tmp_path)


def _load(tmp_path, rows: list[dict] | None = None, source: str = "{path: p.jsonl}", extra: str = "") -> list[dict]:
    from posttrain.data.prepared import load_all

    if rows is not None:
        (tmp_path / "p.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return load_all(_config(tmp_path, source, extra), require=False)["preferences"].rows


def _refused(tmp_path, rows: list[dict], source: str = "{path: p.jsonl}") -> str:
    with pytest.raises(DatasetError) as err:
        _load(tmp_path, rows, source)
    return str(err.value)


def test_ultrafeedback_binarized_as_published_goes_in_through_the_config_alone(tmp_path):
    from posttrain.data.prepared import load_all

    shapes.write_ultrafeedback(tmp_path / "data")
    loaded = load_all(_config(tmp_path, f"{{path: data/{shapes.ULTRAFEEDBACK_PATH}}}"), require=False)
    role = loaded["preferences"]
    assert len(role.rows) == len(shapes.ULTRAFEEDBACK)
    for row, published in zip(role.rows, shapes.ULTRAFEEDBACK):
        # TRL's maybe_extract_prompt: the repeated user turn becomes the prompt, the replies the completions
        assert row["prompt"] == [{"role": "user", "content": published["prompt"]}]
        assert row["chosen"] == [published["chosen"][1]] and row["rejected"] == [published["rejected"][1]]
        assert (row["score_chosen"], row["score_rejected"]) == (published["score_chosen"], published["score_rejected"])
        assert row["prompt_id"] == published["prompt_id"] and "messages" not in row
    assert [r["language"] for r in role.rows] == ["en", "en", "zh"]


def test_explicit_and_implicit_prompts_standard_and_conversational(tmp_path):
    explicit_conv = _load(tmp_path, [{"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN]}])
    implicit_conv = _load(tmp_path, [{"chosen": [USER, BLUE], "rejected": [USER, GREEN]}])
    assert explicit_conv == implicit_conv
    assert explicit_conv[0] == {"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN], "language": "en"}
    # Standard text stays text (TRL tokenises it without a chat template).
    explicit_text = _load(tmp_path, [{"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}])
    assert explicit_text[0]["prompt"] == "The sky is" and explicit_text[0]["chosen"] == " blue."
    # Anthropic HH-RLHF's shape: implicit prompt, standard text; the shared beginning is the prompt.
    hh = _load(tmp_path, [{"chosen": "\n\nHuman: What color is the sky?\n\nAssistant: It is blue.",
                           "rejected": "\n\nHuman: What color is the sky?\n\nAssistant: It is green."}])
    assert hh[0]["prompt"] == "\n\nHuman: What color is the sky?\n\nAssistant: It is"
    assert (hh[0]["chosen"], hh[0]["rejected"]) == (" blue.", " green.")


def test_columns_map_other_names_and_sharegpt_turns_are_read(tmp_path):
    rows = _load(tmp_path, [{"question": "What color is the sky?", "good": [{"from": "gpt", "value": "It is blue."}],
                             "bad": [{"from": "gpt", "value": "It is green."}]}],
                 "{path: p.jsonl, columns: {question: prompt, good: chosen, bad: rejected}}")
    # a text prompt beside conversational completions that hold only the replies (TRL would find no
    # shared beginning): the prompt is read as the user turn
    assert rows[0] == {"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN], "language": "en"}


BAD = [
    ("identical pair", {"prompt": [USER], "chosen": [BLUE], "rejected": [BLUE]},
     r"p.jsonl:1: column 'chosen' equals column 'rejected'.*`drop: \[identical_pair\]`"),
    ("inverted scores", {"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN], "score_chosen": 2, "score_rejected": 8},
     r"p.jsonl:1: column 'score_chosen' \(2\) is below column 'score_rejected' \(8\).*`drop: \[inverted_scores\]`"),
    ("no rejected column", {"prompt": "Hi", "chosen": "Hello"}, r"p.jsonl:1: .*has no 'rejected'"),
    ("prompt repeated in the completion", {"prompt": [USER], "chosen": [USER, BLUE], "rejected": [USER, GREEN]},
     r"p.jsonl:1: column 'chosen' must hold the assistant reply once the prompt is taken out \(its turns: user, "
     r"assistant\)"),
    ("completion ending on a user turn", {"chosen": [USER, BLUE, USER], "rejected": [USER, GREEN, USER]},
     r"p.jsonl:1: column 'chosen' must hold the assistant reply"),
    ("no shared prompt", {"chosen": [USER, BLUE], "rejected": [{"role": "user", "content": "Why?"}, GREEN]},
     r"p.jsonl:1: the prompt shared by 'chosen' and 'rejected' is empty"),
    ("prompt ending on the assistant", {"prompt": [USER, BLUE], "chosen": [GREEN],
                                        "rejected": [{"role": "assistant", "content": "It is red."}]},
     r"p.jsonl:1: column 'prompt' must end with a user turn \(its turns: user, assistant\)"),
    ("mixed text and messages", {"prompt": "Hi", "chosen": "Hello", "rejected": [GREEN]},
     r"p.jsonl:1: column 'chosen' and column 'rejected' must be both text or both lists of messages"),
    ("score not a number", {"prompt": "Hi", "chosen": "Hello", "rejected": "Go away", "score_chosen": "high"},
     r"p.jsonl:1: column 'score_chosen' must be a finite number"),
    ("empty reply", {"prompt": [USER], "chosen": [{"role": "assistant", "content": " "}], "rejected": [GREEN]},
     r"p.jsonl:1: column 'chosen': an empty assistant reply"),
]


@pytest.mark.parametrize("case,row,message", BAD, ids=[c[0] for c in BAD])
def test_bad_pairs_are_refused_naming_file_line_and_column(tmp_path, case, row, message):
    import re

    good = {"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN]}
    text = _refused(tmp_path, [row, good])
    assert re.search(message, text), text


def test_a_tie_is_kept_and_the_two_refusals_may_be_dropped_and_counted(tmp_path):
    from posttrain.data.prepared import load_all

    rows = [{"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN], "score_chosen": 5.0, "score_rejected": 5.0},
            {"prompt": [USER], "chosen": [BLUE], "rejected": [BLUE]},
            {"prompt": [USER], "chosen": [GREEN], "rejected": [BLUE], "score_chosen": 1, "score_rejected": 9}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    role = load_all(_config(tmp_path, "{path: p.jsonl, drop: [identical_pair, inverted_scores]}"), require=False)["preferences"]
    assert len(role.rows) == 1 and role.rows[0]["score_chosen"] == role.rows[0]["score_rejected"] == 5.0
    assert role.dropped == {"identical_pair": 1, "inverted_scores": 1}


def test_one_role_holds_one_format(tmp_path):
    (tmp_path / "text.jsonl").write_text(json.dumps({"prompt": "Hi", "chosen": "Hello", "rejected": "Go"}) + "\n")
    (tmp_path / "conv.jsonl").write_text(json.dumps({"prompt": [USER], "chosen": [BLUE], "rejected": [GREEN]}) + "\n")
    with pytest.raises(DatasetError, match=r"conv.jsonl:1: role 'preferences' mixes formats: its first row is "
                                           r"standard text, this one conversational"):
        _load(tmp_path, None, "{path: text.jsonl}\n    - {path: conv.jsonl}")


def test_prompt_transforms_are_refused_on_the_role(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "Hi", "chosen": "Hello", "rejected": "Go"}) + "\n")
    with pytest.raises(DatasetError, match="`answer_from:` makes prompt or SFT rows; role 'preferences' holds "
                                           "preference pairs"):
        _load(tmp_path, None, "{path: p.jsonl, answer_from: {column: chosen, extract: boxed}}")


def test_the_role_is_optional_prepared_content_addressed_and_read_by_the_reward_model_stage_only(tmp_path):
    from posttrain.config.pipeline import STAGE_TABLE
    from posttrain.data.prepared import prepare

    shapes.write_gsm8k(tmp_path / "data")
    shapes.write_ultrafeedback(tmp_path / "data")
    reasoning = ("  reasoning_prompts:\n    - {path: data/gsm8k/main/train-00000-of-00001.parquet, kind: math, "
                 "columns: {question: prompt}, answer_from: {column: answer, extract: gsm8k}}\n")
    without = _config(tmp_path, "{path: x.jsonl}", reasoning).model_copy(deep=True)
    without.data.preferences = []
    assert "preferences" not in prepare(without, tmp_path / "p0", ("reasoning_rl", "reward_model")).roles   # optional
    cfg = _config(tmp_path, f"{{path: data/{shapes.ULTRAFEEDBACK_PATH}}}", reasoning)
    assert "preferences" not in prepare(cfg, tmp_path / "p1", ("reasoning_rl",)).roles   # no stage of the run reads it
    prepared = prepare(cfg, tmp_path / "prepared", ("reasoning_rl", "reward_model"))
    ref = prepared.roles["preferences"]
    assert ref.rows == 3 and ref.path.endswith(f"preferences-{ref.md5[:12]}.jsonl") and ref.sources
    assert [stage.name for stage in STAGE_TABLE if "preferences" in stage.roles] == ["reward_model"]
    assert prepared.for_stage("reward_model") == {"preferences": ref}


def test_data_check_shows_the_role(tmp_path):
    shapes.write_ultrafeedback(tmp_path / "data")
    path = tmp_path / "cfg.yaml"
    path.write_text(f"data:\n  preferences: {{path: data/{shapes.ULTRAFEEDBACK_PATH}}}\n")
    done = subprocess.run([sys.executable, "-m", "posttrain.cli", "data", "check", "--config", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "preferences" in done.stdout and "preference 3" in done.stdout
    assert "train/eval overlap: 0 rows" in done.stdout
