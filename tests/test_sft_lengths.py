"""SFT rows longer than the trainer's max_length: SFTTrainer cuts them at the end, where the reply
is, so the stage says how many replies were cut, drops those cut to nothing, and stops with the
setting to raise when nothing is left (instead of TRL's `num_samples=0` deep in a traceback)."""
from __future__ import annotations

import pytest

from posttrain.chat import ChatConfig
from posttrain.trainers import NoUsableRows, sft_dataset
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


def test_sft_batches_rows_of_similar_length(tokenizer, tmp_path):
    """The stages' SFT batches group rows by length (transformers' LengthGroupedSampler), so a
    batch pads little; with `group_by_length: false` they are drawn at random."""
    import random

    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl import SFTTrainer

    from posttrain.trainer_config import SFTTrainerConfig
    from posttrain.trainers import sft_args

    rng = random.Random(0)
    rows = [_row(f"What is {i} plus 2?", "<think>\n" + "add. " * rng.choice([1, 40]) + "\n</think>\n\n\\boxed{4}")
            for i in range(128)]
    dataset, _ = sft_dataset(tokenizer, CHAT, rows, 256, FIELD)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))

    def fill(group_by_length: bool) -> float:
        cfg = SFTTrainerConfig(batch_size=8, max_steps=1, group_by_length=group_by_length)
        trainer = SFTTrainer(model=model, args=sft_args(cfg, tmp_path / str(group_by_length), 0),
                             processing_class=tokenizer, train_dataset=dataset)
        batches = list(trainer.get_train_dataloader())
        return sum(int(b["attention_mask"].sum()) for b in batches) / sum(b["attention_mask"].numel() for b in batches)

    grouped, drawn = fill(True), fill(False)
    assert grouped > 0.9 and drawn < 0.7, (grouped, drawn)
