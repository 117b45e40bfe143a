"""GRPO rollouts on the plain transformers path come from posttrain.generation.engines.decode through TRL's
`rollout_func` (finished rows leave the batch): the tokens TRL's `generate` gives, forced or
sampled from the same RNG state, and TRL's own path where a logits processor needs every row's
history."""
import pytest
import torch

pytestmark = pytest.mark.timeout(300)


def _trainer(tokenizer, tmp_path, **generation):
    from datasets import Dataset

    from posttrain.config.trainers import GRPOTrainerConfig
    from posttrain.rl.trainer import StageGRPOTrainer
    from posttrain.training.trainers import grpo_args
    from posttrain.world.model import Architecture, build_model

    model = build_model(Architecture(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                     intermediate_size=64), tokenizer, seed=0)
    cfg = GRPOTrainerConfig(max_steps=1, prompts_per_step=2, num_generations=2, max_completion_length=12)
    args = grpo_args(cfg, tmp_path, 0, [1.0])
    for key, value in generation.items():
        setattr(args, key, value)
    return StageGRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                            processing_class=tokenizer, args=args,
                            train_dataset=Dataset.from_list([{"prompt": "1+1="}, {"prompt": "2+2="}]))


TEXTS = ["12+7=", "12+7=", "where 300 - 41 is", "where 300 - 41 is"]   # two lengths: left padding


def _prompts(tokenizer, times: int = 1) -> list[list[int]]:
    return tokenizer(TEXTS * times, add_special_tokens=False)["input_ids"]


def _ours(trainer, times: int = 1):
    out = trainer.rollout_func(TEXTS * times, trainer)
    assert out["prompt_ids"] == _prompts(trainer.processing_class, times)
    return out["completion_ids"], out["logprobs"]


def _force(trainer, **settings):
    for key, value in settings.items():
        setattr(trainer.generation_config, key, value)
        trainer.generation_kwargs[key] = value


def test_forced_draws_give_the_tokens_of_trls_generate_and_stop_at_the_first_eos(tokenizer, tmp_path):
    from trl import GRPOTrainer

    trainer = _trainer(tokenizer, tmp_path)
    prompts = _prompts(tokenizer)
    _force(trainer, top_k=1)   # a draw from one token: both paths must pick the argmax
    free_run = GRPOTrainer._generate_single_turn(trainer, prompts, None, {}, 2)[0]
    assert all(len(c) == 12 for c in free_run)
    # Make a token of the first prompt's reply that the other's lacks an eos: the first prompt's rows
    # end at it, the others run on.
    stop = next(t for t in free_run[0] if t not in free_run[2])
    trainer.eos_token_ids = [*trainer.eos_token_ids, stop]
    _force(trainer, eos_token_id=trainer.eos_token_ids)
    theirs = GRPOTrainer._generate_single_turn(trainer, prompts, None, {}, 2)[0]
    ours, logprobs = _ours(trainer)
    assert ours == theirs and logprobs is None
    assert len(ours[0]) == free_run[0].index(stop) + 1 < 12 and ours[0][-1] == stop
    assert len(ours[2]) == 12


def test_sampled_rollouts_are_the_ones_trls_generate_draws_from_the_same_rng_state(tokenizer, tmp_path):
    """Rows that end early leave our batch but keep their share of every draw: the rows still
    decoding get generate's tokens, and the RNG ends where generate leaves it (what a resume restores)."""
    from trl import GRPOTrainer

    trainer = _trainer(tokenizer, tmp_path)
    prompts = _prompts(tokenizer, 4)
    torch.manual_seed(7)
    sampled = GRPOTrainer._generate_single_turn(trainer, prompts, None, {}, 2)[0]
    assert len({tuple(c) for c in sampled}) > 1, "sampled rows of the same prompt all alike"
    # The most frequent sampled token becomes an eos: rows end at different lengths.
    counts = {}
    for completion in sampled:
        for token in completion:
            counts[token] = counts.get(token, 0) + 1
    trainer.eos_token_ids = [*trainer.eos_token_ids, max(counts, key=counts.get)]
    _force(trainer, eos_token_id=trainer.eos_token_ids)
    torch.manual_seed(7)
    theirs = GRPOTrainer._generate_single_turn(trainer, prompts, None, {}, 2)[0]
    after_theirs = torch.get_rng_state()
    torch.manual_seed(7)
    ours = _ours(trainer, 4)[0]
    assert ours == theirs
    assert torch.equal(torch.get_rng_state(), after_theirs)
    assert len({len(c) for c in ours}) > 2 and min(len(c) for c in ours) < 12


def test_a_processor_that_reads_each_rows_history_keeps_trls_path(tokenizer, tmp_path):
    from posttrain.rl.trainer import decode_rollouts

    assert _trainer(tokenizer, tmp_path / "plain").rollout_func is decode_rollouts
    trainer = _trainer(tokenizer, tmp_path / "penalty", repetition_penalty=1.3)
    assert trainer.rollout_func is None   # TRL's own generation
    prompt_ids, completion_ids = trainer._generate(TEXTS)[:2]
    assert prompt_ids == _prompts(tokenizer) and len(completion_ids) == len(TEXTS)   # no second BOS either


def test_a_template_that_writes_bos_gives_trl_one_bos_not_two():
    """TRL tokenizes text prompts with the tokenizer's special tokens: the BOS a template already
    wrote comes off the text, so TRL's ids are the rendered prompt's own."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from posttrain.chat import as_trl_prompt

    vocab = {"<s>": 0, "<unk>": 1, "hello": 2, "world": 3}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", unk_token="<unk>")
    rendered = "<s> hello world"
    assert tokenizer(rendered)["input_ids"] == [0, 0, 2, 3]          # what TRL would get unchanged
    given = as_trl_prompt(tokenizer, rendered)
    assert tokenizer(given)["input_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"] == [0, 2, 3]
    assert as_trl_prompt(tokenizer, "hello world") == "hello world"   # the template wrote none: TRL adds its own
