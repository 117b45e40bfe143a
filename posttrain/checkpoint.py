"""The one checkpoint loader and writer: directories written atomically, identified by digest."""
from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from posttrain.chat import ChatConfig
from posttrain.schema import CheckpointRef, ModelSettings


class MissingCheckpointError(FileNotFoundError):
    pass


def directory_digest(path: Path) -> str:
    """sha256 over (relative name, content) of every file, in sorted order."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def save_checkpoint(model, tokenizer, path: Path, state_dict: dict | None = None) -> CheckpointRef:
    """Write to a sibling temp dir, then rename: a crash never leaves a half-written checkpoint.
    `state_dict`: the weights when the model's own are sharded (gathered by the trainer)."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
    tokenizer.save_pretrained(tmp)
    digest = directory_digest(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    params = sum(p.numel() for p in model.parameters())
    return CheckpointRef(path=str(path), digest=digest, num_parameters=params)


def is_intact(ref: CheckpointRef) -> bool:
    return ref.directory.is_dir() and directory_digest(ref.directory) == ref.digest


def load_checkpoint(ref: CheckpointRef | str | Path, *, for_training: bool = True,
                    settings: ModelSettings | None = None):
    """Load (model, tokenizer) from a checkpoint ref, a local directory or a hub id, ready to chat:
    a tokenizer without a chat template gets the configured one, missing think markers are added
    as tokens when configured (the embeddings resized), and a missing pad token falls back to eos."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = settings or ModelSettings()
    location = ref.path if isinstance(ref, CheckpointRef) else str(ref)
    local = Path(location)
    if isinstance(ref, CheckpointRef) and not local.is_dir():
        raise MissingCheckpointError(
            f"checkpoint {location} is missing; rerun the stage that wrote it (posttrain run --force)")
    dtype = {"auto": "auto", "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[settings.dtype]
    extra = {"attn_implementation": settings.attn_implementation} if settings.attn_implementation else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=settings.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, trust_remote_code=settings.trust_remote_code,
                                                     **extra)
    except OSError as exc:
        raise MissingCheckpointError(
            f"cannot load model {location!r}: it is not a local model directory and the hub is not reachable "
            f"(HF_HUB_OFFLINE=1). Download it beforehand or point base.model at a local path. ({exc})") from None
    prepare_for_chat(model, tokenizer, settings.chat, location)
    model.train(for_training)
    return model, tokenizer


def prepare_for_chat(model, tokenizer, chat: ChatConfig, location: str) -> None:
    if not tokenizer.chat_template:
        if chat.template is None:
            raise ValueError(f"model {location} has no chat template (a base model?): set base.chat.template "
                             "to a Jinja chat template in the config")
        tokenizer.chat_template = chat.template
    if chat.add_think_tokens:
        vocab = tokenizer.get_vocab()
        missing = [m for m in (chat.think_open, chat.think_close) if m not in vocab]
        if missing:
            tokenizer.add_tokens(missing, special_tokens=False)  # special tokens vanish from decoded replies
            model.resize_token_embeddings(len(tokenizer))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
