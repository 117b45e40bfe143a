"""`backend: hf | vllm` for the generation that rejection sampling, distillation's teacher and
evaluation do. vLLM cannot run here, so what is ours is tested without it: the config check at
load, which fields key the caches, our options as vLLM's sampling parameters, and the thinking
budget applied in rounds, driven by a stand-in for the engine boundary (`generate` over token ids)
and compared token for token with the hf path's budget bookkeeping."""
from __future__ import annotations

import zlib
from types import SimpleNamespace

import pytest

from posttrain.config.pipeline import DistillationStageConfig, EvaluationConfig, PipelineConfig, RejectionSamplingConfig
from posttrain.generation.engines import ThinkingBudget, VLLMEngine, _BudgetTracker, engine_generate, generate_replies, vllm_sampling_kwargs
from posttrain.config.trainers import cache_relevant
from tests.conftest import config_error
from tests.userdata import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("where, yaml", [
    ("evaluation.backend", "evaluation: {backend: vllm}"),
    ("stages.rejection_sampling.backend", "stages:\n  rejection_sampling: {backend: vllm}"),
    ("stages.distillation.backend", "stages:\n  distillation: {backend: vllm}"),
])
def test_backend_vllm_without_vllm_is_refused_at_load(tmp_path, where, yaml):
    message = config_error(tmp_path, f"name: t\n{yaml}\n")
    assert where in message and "scripts/install.py --engines gpu" in message, message


def test_vllms_gpu_build_on_a_cpu_only_torch_is_refused_at_load_and_its_cpu_build_is_not(tmp_path, monkeypatch):
    import torch

    from posttrain.config import trainers as trainer_config

    monkeypatch.setattr(trainer_config, "_installed", lambda module: True)
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    monkeypatch.setattr(trainer_config, "vllm_cpu_build", lambda: False)
    message = config_error(tmp_path, "name: t\nstages:\n  rejection_sampling: {backend: vllm}\n")
    assert "stages.rejection_sampling.backend" in message and "CPU-only" in message, message
    assert "--engines cpu" in message, message
    monkeypatch.setattr(trainer_config, "vllm_cpu_build", lambda: True)
    assert trainer_config.vllm_unavailable() is None


def test_unknown_backend_is_refused(tmp_path):
    message = config_error(tmp_path, "name: t\nevaluation: {backend: tgi}\n")
    assert "evaluation.backend" in message and "'hf' or 'vllm'" in message, message


def test_the_backend_keys_the_caches_and_vllm_placement_does_not():
    """Two engines sample differently: the data a stage writes and an evaluation's items follow the
    backend; how vLLM sits on the GPUs changes neither."""
    import flows.tasks as tasks

    for config in (RejectionSamplingConfig(), DistillationStageConfig(), EvaluationConfig()):
        base = cache_relevant(config)
        assert cache_relevant(config.model_copy(update={"backend": "vllm"})) != base
        for placement in ({"vllm_gpu_memory_utilization": 0.5}, {"vllm_tensor_parallel_size": 4}):
            assert cache_relevant(config.model_copy(update=placement)) == base, placement

    def eval_key(**evaluation):
        cfg = PipelineConfig()
        cfg = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update=evaluation)})
        return tasks.eval_cache_key(None, {"config": cfg, "checkpoint": SimpleNamespace(digest="sha256:c"),
                                           "suites": {}, "label": "base"})

    assert eval_key() == eval_key(vllm_tensor_parallel_size=2) != eval_key(backend="vllm")


# ----------------------------------------------------------------------------- sampling parameters


def test_options_map_to_vllm_sampling_parameters():
    greedy = vllm_sampling_kwargs(max_tokens=32, do_sample=False, temperature=0.7, top_p=0.9, seed=3, stop_ids={9, 2})
    assert greedy == dict(n=1, max_tokens=32, stop_token_ids=[2, 9], seed=3, top_k=0, temperature=0.0, top_p=1.0)
    sampled = vllm_sampling_kwargs(max_tokens=8, do_sample=True, temperature=0.7, top_p=0.9, seed=3, stop_ids={2},
                                   model_defaults={"top_k": 20, "temperature": 0.6, "repetition_penalty": 1.1,
                                                   "min_p": 0.05, "do_sample": True})
    # the call's temperature and top-p win, top-k stays off (as on the hf path), the checkpoint's
    # repetition penalty and min-p apply
    assert (sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (0.7, 0.9, 0)
    assert (sampled["repetition_penalty"], sampled["min_p"]) == (1.1, 0.05)
    assert "min_p" not in vllm_sampling_kwargs(max_tokens=8, do_sample=False, temperature=1, top_p=1, seed=0,
                                               stop_ids={2}, model_defaults={"min_p": 0.05})


def test_a_generation_setting_vllm_cannot_apply_is_refused():
    with pytest.raises(ValueError, match="no_repeat_ngram_size=3.*backend hf"):
        vllm_sampling_kwargs(max_tokens=8, do_sample=False, temperature=1, top_p=1, seed=0, stop_ids={2},
                             model_defaults={"no_repeat_ngram_size": 3})
    neutral = {"no_repeat_ngram_size": 0, "suppress_tokens": None, "typical_p": 1.0, "min_length": 0}
    vllm_sampling_kwargs(max_tokens=8, do_sample=False, temperature=1, top_p=1, seed=0, stop_ids={2},
                         model_defaults=neutral)


# ----------------------------------------------------------------------------- the engine boundary


class FakeEngine:
    """Stands in for `vllm.LLM.generate`: continues each prompt's token ids with `script(context,
    seed)`, up to the request's max_tokens or a stop id (kept in the output, as vLLM keeps it)."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append([(list(p["prompt_token_ids"]), q) for p, q in zip(prompts, params, strict=True)])
        outputs = []
        for prompt, q in zip(prompts, params):
            context, new = list(prompt["prompt_token_ids"]), []
            while len(new) < q.max_tokens:
                new.append(self.script(context + new, q.seed))
                if new[-1] in q.stop_token_ids:
                    break
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(new))]))
        return outputs


def babbler(tokenizer, salt: int):
    """A deterministic model of the context alone: words, now and then a think marker or the end."""
    words = ids(tokenizer, "one two three four five six seven eight nine")
    open_, close, eos = ids(tokenizer, "<think>")[0], ids(tokenizer, "</think>")[0], tokenizer.eos_token_id

    def script(context, seed=None):
        draw = zlib.crc32(f"{salt}:{context}".encode()) % 100
        if draw < 12:
            return open_
        if draw < 20:
            return close
        if draw < 23:
            return eos
        return words[draw % len(words)]
    return script


def hf_reference(script, tokenizer, prompt: list[int], budget: ThinkingBudget, max_new_tokens: int, stop_ids: set[int]):
    """What the hf loop writes for one row: each step the model's token, unless the budget forces one."""
    tracker = _BudgetTracker(budget, tokenizer, [prompt])
    tokens: list[int] = []
    for _ in range(max_new_tokens):
        tokens.append(tracker.steer([0], [script(prompt + tokens)])[0])
        if tokens[-1] in stop_ids:
            break
    return tokens, tracker.cut[0]


@pytest.mark.parametrize("budget_tokens", [0, 1, 4, 12])
@pytest.mark.parametrize("max_new_tokens", [6, 24, 60])
def test_the_budget_in_rounds_writes_what_the_hf_loop_writes(tokenizer, budget_tokens, max_new_tokens):
    """Prompts with and without the template's open marker, models that close in time, overrun
    the budget, end inside the block or never think: token for token the hf path's reply."""
    budget = ThinkingBudget(tokens=budget_tokens, sentence="stop now.")
    stop_ids = {tokenizer.eos_token_id}
    prompts = [ids(tokenizer, f"question {n}") for n in range(12)] + \
              [ids(tokenizer, f"question {n} <think>\n") for n in range(12)]
    cuts = 0
    for salt in range(4):
        script = babbler(tokenizer, salt)
        tracker = _BudgetTracker(budget, tokenizer, prompts)
        replies = engine_generate(FakeEngine(script), SimpleNamespace, prompts, stop_ids=stop_ids,
                                  max_new_tokens=max_new_tokens, do_sample=False, temperature=1.0, top_p=1.0,
                                  num_samples=1, seed=0, budget=tracker)
        for prompt, (row,) in zip(prompts, replies, strict=True):
            want, cut = hf_reference(script, tokenizer, prompt, budget, max_new_tokens, stop_ids)
            assert (row.tokens, row.cut) == (want, cut), (salt, tokenizer.decode(prompt))
            cuts += cut
    assert cuts or budget_tokens >= max_new_tokens, "no reply was cut by the budget: the case tests nothing"


def test_rounds_think_to_the_budget_then_answer_with_the_tokens_left(tokenizer):
    words = ids(tokenizer, "one two")
    engine = FakeEngine(lambda context, seed: words[len(context) % 2])   # thinks forever, never ends
    prompt = ids(tokenizer, "question <think>\n")
    budget = ThinkingBudget(tokens=4, sentence="stop now.")
    tracker = _BudgetTracker(budget, tokenizer, [prompt])
    (row,), = engine_generate(engine, SimpleNamespace, [prompt], stop_ids={tokenizer.eos_token_id},
                              max_new_tokens=30, do_sample=True, temperature=0.8, top_p=0.95, num_samples=1,
                              seed=1, budget=tracker)
    (think_prompt, think), = engine.calls[0]
    (answer_prompt, answer), = engine.calls[1]
    assert len(engine.calls) == 2 and think_prompt == prompt
    assert think.max_tokens == 4 and ids(tokenizer, "</think>")[0] in think.stop_token_ids
    assert answer_prompt == prompt + row.tokens[:4] + tracker.forced_ids
    assert answer.max_tokens == 30 - 4 - len(tracker.forced_ids)
    assert (think.temperature, think.top_p) == (0.8, 0.95)
    assert row.cut and len(row.tokens) == 30


def test_the_vllm_engine_answers_through_the_one_generation_function(tokenizer):
    """generate_replies on a VLLMEngine: rendered prompts in, whole replies out (text, token count,
    truncation), one seed per sample, reproducible from the call's seed."""
    from posttrain.chat import ChatConfig

    eos = tokenizer.eos_token_id
    words = ids(tokenizer, "one two three four five")

    def script(context, seed):
        step = len(context) + (seed or 0)
        return eos if step % 7 == 0 else words[step % len(words)]

    def engine():
        return VLLMEngine(FakeEngine(script), SimpleNamespace, stop_ids={eos}, model_defaults={}, location="fake")

    chat = ChatConfig(thinking_switch="template_kwarg")
    requests = [([{"role": "user", "content": f"What is {n} plus 1?"}], True) for n in range(3)]
    options = dict(max_new_tokens=5, do_sample=True, temperature=0.9, num_samples=4)
    first = generate_replies(engine(), tokenizer, chat, requests, seed=5, **options)
    assert first == generate_replies(engine(), tokenizer, chat, requests, seed=5, **options)
    assert first != generate_replies(engine(), tokenizer, chat, requests, seed=6, **options)
    assert all(len(samples) == 4 for samples in first)
    replies = [g for samples in first for g in samples]
    assert any(g.truncated and g.num_tokens == 5 for g in replies) and any(not g.truncated for g in replies)
    assert all(len({g.text for g in samples}) > 1 for samples in first), "every sample alike: one seed for all"
    with_no_think = generate_replies(engine(), tokenizer, chat, [(requests[0][0], False)], max_new_tokens=3)
    assert with_no_think[0][0].text.startswith("<think>\n\n</think>"), "the template's prefill is put back"


def test_the_teachers_size_is_read_from_its_config(tmp_path, tokenizer):
    from posttrain.registry.checkpoint import load_checkpoint

    build_model(tmp_path / "m", tokenizer, hidden=32, layers=2, seed=0)
    engine = VLLMEngine(None, SimpleNamespace, stop_ids=set(), model_defaults={}, location=str(tmp_path / "m"))
    model, _ = load_checkpoint(tmp_path / "m", for_training=False)
    assert engine.num_parameters() == model.num_parameters()


def test_a_tokenizer_without_think_tokens_is_refused_for_vllm(tmp_path):
    from transformers import AutoTokenizer

    from posttrain.chat import ChatConfig
    from posttrain.registry.checkpoint import prepare_for_chat
    from posttrain.world.tokenizer import build_tokenizer as world_tokenizer

    world_tokenizer(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    chat = ChatConfig(think_open="<reason>", think_close="</reason>", add_think_tokens=True)
    with pytest.raises(ValueError, match="vLLM cannot add them"):
        prepare_for_chat(None, tok, chat, "m")


def test_one_engine_protocol_for_both_backends(tmp_path, tokenizer):
    """`load_generator` hands back an engine (hf: our loop over the model) that `generate` drives the
    same way as vLLM's; a transformers model given as it is runs in that loop; `release` closes it."""
    from posttrain.config.pipeline import EvaluationConfig
    from posttrain.generation.engines import GenerationEngine, HFEngine, generate, load_generator, release
    from posttrain.schema import ModelSettings

    build_model(tmp_path / "m", tokenizer, hidden=32, layers=2, seed=0)
    engine, tok = load_generator(tmp_path / "m", ModelSettings(), EvaluationConfig())
    assert isinstance(engine, HFEngine) and isinstance(engine, GenerationEngine)
    prompts = ["What is 3 plus 4?", "What is 10 plus 1?"]
    through_engine = generate(engine, tok, prompts, max_new_tokens=6, do_sample=True, seed=3, num_samples=2)
    assert through_engine == generate(engine.model, tok, prompts, max_new_tokens=6, do_sample=True, seed=3,
                                      num_samples=2)
    assert engine.num_parameters() == engine.model.num_parameters()
    release(engine)
    assert engine.model is None
