"""The one checkpoint loader and writer: directories written atomically, identified by digest."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from posttrain.chat import ChatConfig, check_template, turn_end_id
from posttrain.schema import CheckpointRef, ModelSettings


class MissingCheckpointError(FileNotFoundError):
    pass


MANIFEST = ".posttrain-manifest.json"


def directory_digest(path: Path, manifest: Path | None = None) -> str:
    """sha256 over (relative name, size, sha256 of content) of every file, in sorted order.

    A manifest of those per-file hashes (the one `seal` writes inside a checkpoint, or `manifest`
    elsewhere) lets a file whose size and modification time are unchanged keep its recorded hash, as
    rsync's quick check does: a 16 GB checkpoint is hashed once, when it is saved, not on every
    cache hit. A file that changed, appeared or vanished is rehashed or dropped, so an altered
    checkpoint still gets a different digest."""
    path = Path(path)
    known = _read_manifest(manifest or path / MANIFEST)
    entries = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel, stat = file.relative_to(path).as_posix(), file.stat()
        recorded = known.get(rel)
        if recorded and recorded[0] == stat.st_size and recorded[1] == stat.st_mtime_ns:
            entries[rel] = recorded
        else:
            entries[rel] = [stat.st_size, stat.st_mtime_ns, _file_sha256(file)]
    digest = "sha256:" + hashlib.sha256("".join(f"{rel}\0{size}\0{sha}\n" for rel, (size, _, sha) in entries.items())
                                        .encode()).hexdigest()
    if manifest is not None and entries != known:
        _write_manifest(manifest, entries, digest)
    return digest


def seal(path: Path) -> str:
    """Hash a checkpoint directory once and record the per-file hashes inside it; its digest."""
    return directory_digest(path, manifest=Path(path) / MANIFEST)


def foreign_digest(path: Path, manifests: Path) -> str:
    """The digest of a directory this pipeline did not write (a base model, a DVC output), with its
    manifest kept under `manifests` instead of inside it."""
    name = hashlib.sha256(str(Path(path).absolute()).encode()).hexdigest()[:24]
    return directory_digest(path, manifest=Path(manifests) / f"{name}.json")


def _file_sha256(file: Path) -> str:
    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_manifest(manifest: Path) -> dict[str, list]:
    try:
        data = json.loads(manifest.read_text())
        return {k: v for k, v in data["files"].items() if isinstance(v, list) and len(v) == 3}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_manifest(manifest: Path, entries: dict[str, list], digest: str) -> None:
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_name(f"{manifest.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps({"digest": digest, "files": entries}))
    os.replace(tmp, manifest)


def save_checkpoint(model, tokenizer, path: Path, state_dict: dict | None = None) -> CheckpointRef:
    """Write to a sibling temp dir, then rename: a crash never leaves a half-written checkpoint.
    `state_dict`: the weights when the model's own are sharded (gathered by the trainer)."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    model.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
    tokenizer.save_pretrained(tmp)
    digest = seal(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    params = sum(p.numel() for p in model.parameters())
    return CheckpointRef(path=str(path), digest=digest, num_parameters=params)


def is_intact(ref: CheckpointRef) -> bool:
    return ref.directory.is_dir() and directory_digest(ref.directory) == ref.digest


def restore_copy(target: Path, intact: CheckpointRef) -> bool:
    """Make `target`, a copy of `intact` that went missing or was altered (the same digest recorded
    for both), whole again from `intact`, atomically as `save_checkpoint` writes. False when there
    is nothing to do: `target` is `intact` itself, or already holds its digest, or `intact` is not
    intact either."""
    target = Path(target).absolute()
    if target == intact.directory.absolute() or (target.is_dir() and directory_digest(target) == intact.digest) \
            or not is_intact(intact):
        return False
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    shutil.copytree(intact.directory, tmp)
    if seal(tmp) != intact.digest:   # the source changed while it was copied
        shutil.rmtree(tmp)
        return False
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return True


def checkpoint_location(ref: CheckpointRef | str | Path) -> str:
    """The directory or hub id to load; a checkpoint ref whose directory is gone is an error."""
    location = ref.path if isinstance(ref, CheckpointRef) else str(ref)
    if isinstance(ref, CheckpointRef) and not ref.digest.startswith("hub:") and not Path(location).is_dir():
        raise MissingCheckpointError(
            f"checkpoint {location} is missing; rerun the stage that wrote it (posttrain run --force)")
    return location


def load_checkpoint(ref: CheckpointRef | str | Path, *, for_training: bool = True,
                    settings: ModelSettings | None = None):
    """Load (model, tokenizer) from a checkpoint ref, a local directory or a hub id, ready to chat:
    a tokenizer without a chat template gets the configured one, missing think markers are added
    as tokens when configured (the embeddings resized), and a missing pad token falls back to eos."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = settings or ModelSettings()
    location = checkpoint_location(ref)
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


def _chat_ready(tokenizer, chat: ChatConfig, location: str) -> None:
    """The tokenizer gets the configured template if it has none; one that cannot chat is refused."""
    if not tokenizer.chat_template:
        if chat.template is None:
            raise ValueError(f"model {location} has no chat template (a base model?): set base.chat.template "
                             "to a Jinja chat template in the config")
        tokenizer.chat_template = chat.template
    if tokenizer.eos_token is None and tokenizer.pad_token is None:
        raise ValueError(f"model {location}: its tokenizer has neither an eos nor a pad token, so replies cannot "
                         "end and batches cannot be padded: set eos_token in its tokenizer_config.json")
    check_template(tokenizer, chat, f"model {location}")


def prepare_for_chat(model, tokenizer, chat: ChatConfig, location: str) -> None:
    """`model` None: the weights are another engine's (vLLM), which cannot grow the vocabulary. The
    template's end-of-turn token becomes a stop token of the model's generation config (saved with
    every checkpoint), so replies end where the template ends them."""
    _chat_ready(tokenizer, chat, location)
    turn_end = turn_end_id(tokenizer)
    config = getattr(model, "generation_config", None)
    if turn_end is not None and config is not None:
        stops = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
        stops = [t for t in stops if t is not None]
        if turn_end not in stops and turn_end != tokenizer.eos_token_id:
            config.eos_token_id = [*stops, turn_end] if stops or tokenizer.eos_token_id is None \
                else [tokenizer.eos_token_id, turn_end]
    if chat.add_think_tokens:
        vocab = tokenizer.get_vocab()
        missing = [m for m in (chat.think_open, chat.think_close) if m not in vocab]
        if missing and model is None:
            raise ValueError(f"model {location} lacks the think marker token(s) {', '.join(missing)}, and vLLM "
                             "cannot add them (base.chat.add_think_tokens): generate with backend hf, or "
                             "from a checkpoint saved by a stage, which has them")
        if missing:
            tokenizer.add_tokens(missing, special_tokens=False)  # special tokens vanish from decoded replies
            model.resize_token_embeddings(len(tokenizer))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        if model is not None:
            model.config.pad_token_id = tokenizer.pad_token_id


class ModelCheckError(ValueError):
    """A configured model that cannot be used, found before any work starts."""


def configured_model(cfg, which: str = "teacher") -> str:
    """The local directory (absolute, or relative to the project) or hub id base.model / base.student names."""
    location = cfg.base.model if which == "teacher" else cfg.base.student
    local = Path(location) if Path(location).is_absolute() else cfg.path(location)
    return str(local) if local.is_dir() else location


def check_models(cfg, stages) -> list[str]:
    """The configured models (not the embedded world's) checked (`check_model`): the teacher always,
    the student when a stage that trains it runs."""
    from posttrain.config.pipeline import STAGE_BY_NAME

    reward_model_field, reward_model_at = cfg.stages.reward_model.source()
    makes_reward_model = any(STAGE_BY_NAME[name].reward_model == "makes" for name in stages)
    trains_student = (any(STAGE_BY_NAME[name].student for name in stages)
                      or (makes_reward_model and reward_model_field.endswith("init") and reward_model_at == "student"))
    wanted = [("teacher", "base.model")] + ([("student", "base.student")] if trains_student else [])
    lines = [check_model(configured_model(cfg, which), cfg.base.settings(), field) for which, field in wanted
             if (cfg.base.model if which == "teacher" else cfg.base.student) != "embedded"]
    if makes_reward_model and (reward_model_field.endswith("bring") or reward_model_at not in ("student", "base")):
        local = cfg.path(reward_model_at)
        locate_model(str(local) if local.is_dir() else reward_model_at, reward_model_field)
        lines.append(f"{reward_model_field}: {reward_model_at}")
    return lines


def locate_model(location: str, field: str) -> None:
    """A local model directory, or a hub id whose files are in the local cache; else ModelCheckError."""
    if Path(location).is_dir():
        return
    from huggingface_hub import try_to_load_from_cache

    looks_like_path = location.startswith((".", "/", "~")) or os.sep in location.strip("/").replace("/", "", 1)
    cached = None if looks_like_path else try_to_load_from_cache(location, "config.json")
    if not isinstance(cached, str):
        raise ModelCheckError(f"{field}: {location!r} is " + ("not a directory" if looks_like_path else
                              "neither a local model directory nor a hub model in the local cache") +
                              " (HF_HUB_OFFLINE=1: nothing is downloaded); point it at a model directory "
                              "(save_pretrained) or download the model beforehand")


def check_model(location: str, settings: ModelSettings, field: str) -> str:
    """What `field` (base.model, base.student) names, checked before any work: a local model
    directory or a hub id already in the local cache (nothing is downloaded), whose tokenizer loads
    and whose chat template passes `prepare_for_chat`'s checks. Returns a one-line description;
    raises ValueError naming the field."""
    from transformers import AutoTokenizer

    locate_model(location, field)
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=settings.trust_remote_code)
        _chat_ready(tokenizer, settings.chat, location)
    except (OSError, ValueError) as exc:
        raise ModelCheckError(f"{field}: {exc}") from None
    except Exception as exc:   # the template itself raised (jinja2: "System role not supported", ...)
        raise ModelCheckError(f"{field}: model {location}: its chat template fails on a plain conversation "
                              f"({type(exc).__name__}: {exc}); check base.chat.thinking_switch and base.chat.template") from None
    turn_end = turn_end_id(tokenizer)
    ends = tokenizer.convert_ids_to_tokens(turn_end) if turn_end is not None else tokenizer.eos_token
    return f"{field}: {location} (replies end at {ends}, mode switch {settings.chat.thinking_switch})"
