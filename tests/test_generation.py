"""The sampling loop against transformers' own `generate`: the same greedy tokens whether a row
stops early (and leaves the batch) or runs to the budget, on more than one architecture; sampling
reproducible from its seed without touching the global RNG."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen3Config, Qwen3ForCausalLM

from posttrain.generation.engines import TokenPicker, decode, generate
from tests.userdata import build_tokenizer

ARCHITECTURES = {
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "mistral-sliding-window": (MistralConfig, MistralForCausalLM, {"sliding_window": 6}),
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def tiny_model(kind: str, tokenizer):
    config_cls, model_cls, extra = ARCHITECTURES[kind]
    torch.manual_seed(0)
    config = config_cls(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **extra)
    return model_cls(config).eval()


PROMPTS = ["12 + 7 = ?", "what is 3 times 4", "9", "add 40 and 2 then tell me the answer please", "1 2 3"]


def common_token(model, tokenizer, batch) -> int:
    """A token the greedy continuations emit at different positions: used as the stop id, so that
    some rows end early and others run to the budget."""
    out = model.generate(**batch, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=tokenizer.pad_token_id)
    rows = out[:, batch["input_ids"].shape[1]:].tolist()
    rows_with: dict[int, set[int]] = {}
    first_at: dict[int, int] = {}
    for row, ids in enumerate(rows):
        for position, token in enumerate(ids):
            rows_with.setdefault(token, set()).add(row)
            first_at[token] = min(first_at.get(token, position), position)
    partial = [t for t, r in rows_with.items() if 0 < len(r) < len(rows) and t not in (tokenizer.pad_token_id, tokenizer.eos_token_id)]
    assert partial, "the random model repeats one token in every row: pick another seed"
    return min(partial, key=first_at.__getitem__)


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
@pytest.mark.parametrize("generation_config", [{}, {"repetition_penalty": 1.5, "no_repeat_ngram_size": 2}],
                         ids=["plain", "penalties"])
def test_greedy_replies_equal_transformers_generate(tokenizer, kind, generation_config):
    """Rows that stop early and rows that run to the budget; with processors that keep per-row state
    (which our loop hands to `model.generate`) too."""
    model = tiny_model(kind, tokenizer)
    model.generation_config.update(**generation_config)  # what a checkpoint's generation_config.json may set
    tokenizer.padding_side = "left"
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    stop = common_token(model, tokenizer, batch)
    expected = model.generate(**batch, max_new_tokens=24, do_sample=False, eos_token_id=[stop, tokenizer.eos_token_id],
                              pad_token_id=tokenizer.pad_token_id)[:, batch["input_ids"].shape[1]:].tolist()
    model.generation_config.eos_token_id = stop
    ours = generate(model, tokenizer, PROMPTS, max_new_tokens=24)
    for prompt, want, (got,) in zip(PROMPTS, expected, ours, strict=True):
        ends = [i for i, t in enumerate(want) if t in (stop, tokenizer.eos_token_id)]
        want = want[:ends[0] + 1] if ends else want
        assert (got.text, got.num_tokens, got.truncated) == (tokenizer.decode(want, skip_special_tokens=True), len(want), not ends), prompt
    assert len({r.num_tokens for (r,) in ours}) > 1 and any(r.truncated for (r,) in ours), \
        "the case must mix rows that stop early with rows that do not"
    pick = TokenPicker(model, batch["input_ids"], None, do_sample=False, max_new_tokens=24)
    assert pick.stateful == bool(generation_config)


def test_rows_leave_the_batch_when_they_stop(tokenizer):
    """decode() itself: a stopped row gets no further token."""
    model = tiny_model("qwen3", tokenizer)
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    stop = common_token(model, tokenizer, batch)
    pick = TokenPicker(model, batch["input_ids"], None, do_sample=False, max_new_tokens=24)
    rows = decode(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=24, stop_ids={stop}, pick=pick)
    assert all(stop not in row[:-1] for row in rows)
    assert any(len(row) < 24 and row[-1] == stop for row in rows) and any(len(row) == 24 for row in rows)


def test_sampling_is_reproducible_and_leaves_the_global_rng_alone(tokenizer):
    model = tiny_model("qwen3", tokenizer)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    options = dict(max_new_tokens=12, do_sample=True, temperature=0.9, top_p=0.95, num_samples=3)
    first = generate(model, tokenizer, PROMPTS, seed=5, **options)
    assert torch.equal(torch.get_rng_state(), before)
    assert generate(model, tokenizer, PROMPTS, seed=5, **options) == first
    assert generate(model, tokenizer, PROMPTS, seed=6, **options) != first
    assert all(len(samples) == 3 for samples in first)
    assert any(len({g.text for g in samples}) > 1 for samples in first), "3 samples at T 0.9 all alike everywhere"


def test_the_checkpoints_generation_config_is_honoured(tokenizer):
    """A checkpoint whose generation config suppresses every token but eos answers at once."""
    model = tiny_model("qwen3", tokenizer)
    model.generation_config.suppress_tokens = [i for i in range(len(tokenizer)) if i != tokenizer.eos_token_id]
    replies = generate(model, tokenizer, PROMPTS, max_new_tokens=8)
    assert all(r.num_tokens == 1 and not r.truncated and r.text == "" for (r,) in replies)


def test_truncation_and_token_counts(tokenizer):
    model = tiny_model("qwen3", tokenizer)
    (reply,), = generate(model, tokenizer, ["9"], max_new_tokens=5)
    if reply.truncated:
        assert reply.num_tokens == 5
    else:
        assert reply.num_tokens <= 5
    assert model.training is False and tokenizer.padding_side == "left"


# ----------------------------------------------------------------------------- thinking budget

def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture
def budget_parts(tokenizer):
    from posttrain.generation.engines import ThinkingBudget

    think = ThinkingBudget(tokens=4, sentence="stop now.")
    return think, _ids(tokenizer, "<think>"), _ids(tokenizer, "</think>"), _ids(tokenizer, think.inserted()), _ids(tokenizer, "1 2 3 4 5 6 7 8 9")


def _steer(tracker, stream: list[int]) -> list[int]:
    return [tracker.steer([0], [token])[0] for token in stream]


def test_budget_reached_inserts_the_sentence_and_the_close_marker(tokenizer, budget_parts):
    from posttrain.generation.engines import _BudgetTracker

    think, open_, close, forced, words = budget_parts
    tracker = _BudgetTracker(think, tokenizer, [_ids(tokenizer, "question")])
    free = open_ + words[:4]
    out = _steer(tracker, free + [words[5]] * (len(forced) + 3))
    assert out[:len(free)] == free
    assert out[len(free):len(free) + len(forced)] == forced and tracker.cut[0]
    assert out[len(free) + len(forced):] == [words[5]] * 3, "after the insertion the model answers freely"


def test_a_think_block_closed_in_time_is_left_alone(tokenizer, budget_parts):
    from posttrain.generation.engines import _BudgetTracker

    think, open_, close, forced, words = budget_parts
    tracker = _BudgetTracker(think, tokenizer, [_ids(tokenizer, "question")])
    stream = open_ + words[:3] + close + words * 2
    assert _steer(tracker, stream) == stream and not tracker.cut[0]


def test_budget_zero_inserts_at_once_even_when_the_template_opened_the_block(tokenizer, budget_parts):
    from posttrain.generation.engines import ThinkingBudget, _BudgetTracker

    _, open_, close, _, words = budget_parts
    zero = ThinkingBudget(tokens=0, sentence="stop now.")
    forced = _ids(tokenizer, zero.inserted())
    opened_by_template = _BudgetTracker(zero, tokenizer, [_ids(tokenizer, "question <think>\n")])
    assert _steer(opened_by_template, [words[0]] * len(forced)) == forced and opened_by_template.cut[0]
    by_model = _BudgetTracker(zero, tokenizer, [_ids(tokenizer, "question")])
    assert _steer(by_model, open_ + [words[0]] * len(forced)) == open_ + forced


def test_budget_on_a_model_that_never_closes_its_think_block(tokenizer):
    """A random tiny model never writes </think>: the budget closes the block for it and the reply
    goes on after the inserted sentence; without a budget it thinks to the end."""
    from posttrain.generation.engines import ThinkingBudget

    model = tiny_model("qwen3", tokenizer)
    prompts = [f"{p} <think>" for p in PROMPTS]
    budget = ThinkingBudget(tokens=6, sentence="stop now.")
    replies = generate(model, tokenizer, prompts, max_new_tokens=40, thinking_budget=budget)
    for (reply,) in replies:
        assert reply.budget_cut and "stop now." in reply.text and "</think>" in reply.text
        before, _, after = reply.text.partition("stop now.")
        assert after.strip().startswith("</think>") and after.split("</think>", 1)[1].strip(), reply.text
    plain = generate(model, tokenizer, prompts, max_new_tokens=40)
    assert not any("stop now." in r.text or r.budget_cut for (r,) in plain)
