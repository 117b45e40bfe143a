"""A user's project as a new user brings it: a tiny HF model directory with a byte-level BPE
tokenizer (trained here with `tokenizers`) and a Qwen3-style chat template without `{% generation %}`
markers, and datasets in several forms (JSONL `messages`, parquet `prompt`/`completion`, CSV with
the user's own column names, a `save_to_disk` directory). Nothing comes from the embedded world."""
from __future__ import annotations

import json
import random
from pathlib import Path

# Qwen3's shape: ChatML turns; with enable_thinking false the generation prompt pre-fills an empty
# think block, which the reply has to carry back for its mode to be checked.
QWEN3_STYLE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]


def _problems(seed: int, n: int, lo: int, hi: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        out.append((f"What is {a} plus {b}?", a + b))
    return out


def build_tokenizer(directory: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [f"{q} <think> {a} </think> The answer is \\boxed{{{a}}}. Write in lowercase, no comma."
              for q, a in _problems(0, 300, 0, 99)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>",
                                   bos_token=None, unk_token=None, padding_side="left")
    fast.add_tokens(["<think>", "</think>"], special_tokens=False)
    fast.chat_template = QWEN3_STYLE_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def build_model(directory: Path, tokenizer, hidden: int, layers: int, seed: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=hidden // 2,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def train_on_sums(directory: Path, tokenizer, steps: int = 300, hi: int = 49) -> None:
    """A few hundred AdamW steps on chat-formatted sums of numbers up to `hi` (think block, boxed
    answer, end of turn): enough for a tiny model whose replies have structure and are sometimes right."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory)
    model.train()
    texts = []
    for question, answer in _problems(1, 400, 0, hi):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                               add_generation_prompt=True, enable_thinking=True)
        texts.append(f"{prompt}<think>\nadd them: {answer}\n</think>\n\nThe answer is \\boxed{{{answer}}}.<|im_end|>")
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    for _ in range(steps):
        batch = tokenizer(rng.sample(texts, 16), return_tensors="pt", padding=True, add_special_tokens=False)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(directory)


def judge_rows(n: int, seed: int, split: str = "train") -> list[dict]:
    """The embedded world's judge rows (posttrain.world.open_tasks.judge_rows), English tasks."""
    from posttrain.world.open_tasks import equation_tasks
    from posttrain.world.open_tasks import judge_rows as world_judge_rows

    return world_judge_rows(equation_tasks(n, seed, split, levels=(1,), languages=("en",)), seed,
                            training=split == "train")


def train_as_judge(source: Path, directory: Path, tokenizer, steps: int = 400) -> None:
    """`source`'s model fine-tuned on the world's judge rows (loss on the verdict only), saved to
    `directory`: a judge checkpoint whose verdicts the world's checker can grade."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(source, directory, dirs_exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(directory)
    model.train()
    examples = []
    for row in judge_rows(300, 3):
        prompt = tokenizer.apply_chat_template(row["messages"][:1], tokenize=False, add_generation_prompt=True,
                                               enable_thinking=False)
        verdict = row["messages"][1]["content"].rsplit("\n", 1)[-1] + "<|im_end|>"
        examples.append((tokenizer(prompt, add_special_tokens=False)["input_ids"],
                         tokenizer(verdict, add_special_tokens=False)["input_ids"]))
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    for _ in range(steps):
        batch = rng.sample(examples, 16)
        width = max(len(p) + len(v) for p, v in batch)
        ids = torch.full((16, width), tokenizer.pad_token_id)
        labels = torch.full((16, width), -100)
        mask = torch.zeros((16, width), dtype=torch.long)
        for i, (p, v) in enumerate(batch):   # left padding, as generation pads
            ids[i, width - len(p) - len(v):] = torch.tensor(p + v)
            labels[i, width - len(v):] = torch.tensor(v)
            mask[i, width - len(p) - len(v):] = 1
        loss = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                     labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(directory)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_datasets(data: Path) -> None:
    from datasets import Dataset

    trace = lambda q, a: f"<think>\n{q} {a}\n</think>\n\nThe answer is \\boxed{{{a}}}."  # noqa: E731
    _write_jsonl(data / "cold_start.jsonl", [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": trace(q, a)}]}
        for q, a in _problems(1, 24, 0, 49)])
    # The user's own column names, mapped in the config.
    with open(data / "rl_prompts.csv", "w", encoding="utf-8") as f:
        f.write("problem,solution_value,lang\n")
        for q, a in _problems(2, 24, 50, 99):
            f.write(f"\"{q}\",{a},en\n")
    Dataset.from_list([{"prompt": f"Say the word {w}.", "completion": w}
                       for w in ["apple", "river", "stone", "cloud", "light", "tiger"]]).to_parquet(
        str(data / "chat.parquet"))
    Dataset.from_list([{"prompt": f"Name a colour, in lowercase, starting with {c}.", "kind": "instruction",
                        "constraints": json.dumps([{"type": "lowercase"}]), "answer": "", "thinking": False}
                       for c in "abcdefgh"]
                      + [{"prompt": q, "kind": "math", "constraints": "", "answer": str(a), "thinking": True}
                         for q, a in _problems(3, 4, 100, 149)]).save_to_disk(str(data / "general"))
    _write_jsonl(data / "distill.jsonl", [{"prompt": q, "answer": str(a), "kind": "math", "thinking": i % 2 == 0}
                                          for i, (q, a) in enumerate(_problems(4, 12, 150, 199))])
    _write_jsonl(data / "eval_math.jsonl", [{"prompt": q, "answer": str(a), "kind": "math"}
                                            for q, a in _problems(5, 8, 200, 299)])
    _write_jsonl(data / "eval_instruction.jsonl", [
        {"prompt": f"Describe the number {n} in lowercase.", "kind": "instruction",
         "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]} for n in range(300, 306)])


def write_config(root: Path) -> Path:
    import yaml

    trainer_sft = {"max_steps": 4, "batch_size": 4, "max_length": 96, "learning_rate": 0.005}
    trainer_rl = {"max_steps": 2, "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 12,
                  "save_steps": 1}
    config = {
        "name": "user",
        "paths": {"runs": "runs", "registry": "runs/registry", "data_store": "runs/data-store",
                  "dvc_remote": "runs/dvc-remote", "world": "unused-world"},
        "base": {"model": "models/teacher", "student": "models/student", "dtype": "fp32",
                 "chat": {"thinking_switch": "template_kwarg"}},
        "data": {
            "cold_start": {"path": "data/cold_start.jsonl"},
            "reasoning_prompts": {"path": "data/rl_prompts.csv", "kind": "math",
                                  "columns": {"problem": "prompt", "solution_value": "answer", "lang": "language"}},
            "rejection_prompts": {"path": "data/rl_prompts.csv", "kind": "math", "limit": 6,
                                  "columns": {"problem": "prompt", "solution_value": "answer", "lang": "language"}},
            "non_reasoning": {"path": "data/chat.parquet"},
            "general_prompts": {"path": "data/general"},
            "distillation_prompts": {"path": "data/distill.jsonl"},
            "eval": [{"name": "math", "kind": "math", "mode": "both", "sources": {"path": "data/eval_math.jsonl"}},
                     {"name": "instruction", "kind": "instruction", "mode": "no_think",
                      "sources": {"path": "data/eval_instruction.jsonl"}}],
        },
        "evaluation": {"max_new_tokens": 16, "batch_size": 32},
        "stages": {
            "cold_start_sft": {"trainer": trainer_sft},
            "reasoning_rl": {"trainer": trainer_rl, "probe_every": 1, "probe_items": 4},
            "rejection_sampling": {"samples_per_prompt": 2, "max_new_tokens": 16,
                                   "gate": {"targets": [], "regression": []}},
            "mode_fusion_sft": {"no_think_pairs": 4, "trainer": trainer_sft},
            "general_rl": {"trainer": trainer_rl, "rewards": {"correctness": 1.0, "instruction": 1.0, "mode": 0.3}},
            "distillation": {"max_new_tokens": 16, "verified_only": False, "sft": trainer_sft},
        },
    }
    path = root / "user.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def build_project(root: Path) -> Path:
    tokenizer = build_tokenizer(root / "tokenizer")
    build_model(root / "models" / "teacher", tokenizer, hidden=64, layers=2, seed=0)
    build_model(root / "models" / "student", tokenizer, hidden=16, layers=1, seed=1)
    write_datasets(root / "data")
    return write_config(root)
