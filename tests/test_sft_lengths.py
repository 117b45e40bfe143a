"""SFT rows longer than the trainer's max_length: SFTTrainer cuts them at the end, where the reply
is, so the stage says how many replies were cut, drops those cut to nothing, and stops with the
setting to raise when nothing is left (instead of TRL's `num_samples=0` deep in a traceback)."""
from __future__ import annotations

import pytest

from posttrain.chat import ChatConfig
from posttrain.training.trainers import NoUsableRows, sft_dataset
from userdata import build_tokenizer

CHAT = ChatConfig(thinking_switch="template_kwarg")
FIELD = "stages.cold_start_sft.trainer.max_length"


def _row(question: str, reply: str) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": reply}],
            "thinking": True}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def test_short_rows_pass_untouched(tokenizer):
    rows = [_row("What is 2 plus 2?", "<think>\n2 and 2\n</think>\n\n\\boxed{4}")] * 3
    dataset, notes = sft_dataset(tokenizer, CHAT, rows, 256, FIELD)
    assert len(dataset) == 3 and notes == []


def test_cut_replies_are_counted_and_replies_cut_to_nothing_dropped(tokenizer):
    short = _row("What is 2 plus 2?", "<think>\n2 and 2\n</think>\n\n\\boxed{4}")
    long_reply = _row("What is 2 plus 2?", "<think>\n" + "2 and 2 make 4. " * 40 + "\n</think>\n\n\\boxed{4}")
    long_question = _row("What is 2 plus 2? " * 40, "<think>\n2 and 2\n</think>\n\n\\boxed{4}")
    dataset, notes = sft_dataset(tokenizer, CHAT, [short, long_reply, long_question], 48, FIELD)
    assert len(dataset) == 2
    assert len(notes) == 1 and notes[0].startswith(f"2 of 3 examples are longer than {FIELD}=48")
    assert "1 of them to nothing (dropped)" in notes[0]


def test_nothing_left_names_the_setting_to_raise(tokenizer):
    rows = [_row("What is 2 plus 2? " * 40, "\\boxed{4}")] * 2
    with pytest.raises(NoUsableRows, match=f"every one of 2 examples has its reply start past {FIELD}=48 tokens"):
        sft_dataset(tokenizer, CHAT, rows, 48, FIELD)


def test_sft_micro_batches_of_similar_length_train_as_whole_batches(tokenizer, tmp_path):
    """`sampling: batch_rebalance` splits each random batch into micro-batches of similar length: less
    padding computed, and the same rows and loss per optimizer step, so the weights after training
    equal those of whole batches (`random` pads each batch to its longest row)."""
    import random

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import SFTTrainer

    from posttrain.config.trainers import SFTTrainerConfig
    from posttrain.training.trainers import sft_args

    rng = random.Random(0)
    rows = [_row(f"What is {i} plus 2?", "<think>\n" + "add. " * rng.choice([1, 10, 40]) + "\n</think>\n\n\\boxed{4}")
            for i in range(64)]
    dataset, _ = sft_dataset(tokenizer, CHAT, rows, 256, FIELD)

    def train(sampling: str, accumulation: int):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        cfg = SFTTrainerConfig(batch_size=16, max_steps=3, learning_rate=1e-2, sampling=sampling,
                               gradient_accumulation_steps=accumulation)
        trainer = SFTTrainer(model=model, args=sft_args(cfg, tmp_path / f"{sampling}{accumulation}", 0),
                             processing_class=tokenizer, train_dataset=dataset)
        batches = list(trainer.get_train_dataloader())
        fill = sum(int(b["attention_mask"].sum()) for b in batches) / sum(b["attention_mask"].numel() for b in batches)
        trainer.train()
        return fill, {k: v.detach().clone() for k, v in model.state_dict().items()}

    whole_fill, whole = train("batch_rebalance", 1)
    split_fill, split = train("batch_rebalance", 4)
    random_fill, _ = train("random", 1)
    assert split_fill > whole_fill + 0.15 and split_fill > random_fill + 0.15, (split_fill, whole_fill, random_fill)
    for name, weight in whole.items():
        torch.testing.assert_close(split[name], weight, rtol=1e-4, atol=1e-5, msg=name)
