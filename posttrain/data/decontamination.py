"""Decontamination: training rows whose question overlaps an evaluation item, beyond exact text.

Every evaluation suite's questions are indexed by their word n-grams; each training row (of every
role: SFT, prompts, preferences) is compared on the text of its user turns. A row *overlaps* an
item by the share of the item's tokens that lie in an n-gram the row also has, the match score of
open-instruct's decontamination (allenai/open-instruct, decontamination/README.md "Matching ngrams"
and search.py `ngram_match`: tokens of the test instance covered by n-grams shared with one training
document, over the test instance's length; an instance counts above `--match_threshold`; 0.5 by
default here, as huggingface/cosmopedia's decontamination discards a sample matching more than half
of a benchmark item). A row is contaminated when that share is above `max_overlap` for some item,
or when its last user turn equals an item's question once normalised
(posttrain.data.sources.normalised_question, the earlier exact check, kept as is).

n: GPT-3 (Brown et al. 2020, appendix C) and lm-evaluation-harness (lm_eval/decontamination/
janitor.py, `Janitor(ngram_n=13)`, text lower-cased, string.punctuation deleted, split on
whitespace) use 13-grams, GPT-3 taking a shorter n for datasets of short examples. Most eval
questions here are short (MATH-500 problems and GSM8K questions run to tens of tokens), and one changed
word removes every n-gram that spans it: with 13-grams a 25-token problem edited in the middle keeps
no 13-gram at all. So each item is matched at n = clamp(tokens // 4, min_ngram, ngram), 13 for items
of 52 tokens and more, never below `min_ngram` (8): a single edited word then leaves at least half of
an item of 17 tokens or more covered (three quarters from 32 tokens on), while a different problem
sharing a stock phrase ("Find the value of x such that") covers one phrase's worth of it. In an
item of 16 tokens or fewer such a phrase alone can cover half: there every token must be covered
(the whole question is in the row, in overlapping n-grams; `overlap_limit`). Items shorter than
`min_ngram` tokens count only on the exact check.

Normalisation (both sides): NFKC, case-folded, the /think and /no_think switches dropped, LaTeX
spacing and sizing removed (``\\,`` ``\\;`` ``\\!`` ``\\quad`` ``~`` ``\\left`` ``\\right``
``\\big``, ``\\displaystyle``), ``\\dfrac``/``\\tfrac`` read as ``\\frac`` (``\\dbinom`` as
``\\binom``), ``\\leq`` as ``\\le``, ``\\text{..}`` and kin unwrapped, thousands separators
``1,000`` / ``1{,}000`` removed. Tokens: runs of letters, runs of digits (so ``3x`` and ``3 x``
agree), each CJK character, and the math operators ``+ - * / = < > ^ | × ÷``; other punctuation,
``$``, braces and whitespace are dropped.

Speed: the items' `min_ngram`-grams go into one dict (n-gram -> items); a training row is looked up
by set intersection, and only items sharing a seed n-gram are scored (bench/decontamination.py,
bench/results/decontamination.md).

Settings: ``data.decontamination: {ngram: 13, min_ngram: 8, max_overlap: 0.5, action: refuse}``;
``action: drop`` drops contaminated training rows instead, counted (RoleData.dropped
``contaminated``, the role's notes) and reported per suite.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from posttrain.data.files import DatasetError
from posttrain.data.sources import RoleData, normalised_question, question_of

SETTING = "data.decontamination"
DROP_REASON = "contaminated"
EXAMPLES = 3   # examples a report line shows per suite

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|\d+|[^\W\d_{_CJK}]+|[+\-*/=<>^|×÷]")
_SWITCH = re.compile(r"/(no_)?think\b")
_LATEX_SPACING = re.compile(r"\\(?:left|right|[bB]igg?[lrm]?|displaystyle|textstyle|scriptstyle|limits|nolimits"
                            r"|quad|qquad)(?![a-zA-Z])|\\[,;:! ]|~")
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mathsf|operatorname|mbox)(?![a-zA-Z])")
_LATEX_SAME = {"dfrac": "frac", "tfrac": "frac", "dbinom": "binom", "tbinom": "binom", "leq": "le", "geq": "ge",
               "neq": "ne", "leqslant": "le", "geqslant": "ge"}
_LATEX_ALIAS = re.compile(r"\\(" + "|".join(_LATEX_SAME) + r")(?![a-zA-Z])")
_THOUSANDS = re.compile(r"(?<=\d)(?:,|\{,\})(?=\d{3}(?!\d))")


class DecontaminationConfig(BaseModel):
    """`data.decontamination`: how training rows are compared with the evaluation suites."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    ngram: int = Field(13, ge=2)          # n for items of 4 * ngram tokens and more
    min_ngram: int = Field(8, ge=2)       # the smallest n (short items); shorter items: exact match only
    max_overlap: float = Field(0.5, ge=0, lt=1)   # share of an item's tokens a row may cover
    action: Literal["refuse", "drop"] = "refuse"  # drop: contaminated rows dropped and counted

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_ngram > self.ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) is more than ngram ({self.ngram})")
        return self

    def describe(self) -> str:
        return (f"{self.min_ngram}- to {self.ngram}-grams, max_overlap {self.max_overlap:g}, "
                f"action {self.action}")


def tokens_of(text: str) -> list[str]:
    """The tokens compared (module docstring)."""
    text = _SWITCH.sub(" ", unicodedata.normalize("NFKC", text).casefold())
    if "\\" in text or "~" in text:
        text = _LATEX_SPACING.sub(" ", text)
        text = _LATEX_WRAPPER.sub(" ", _LATEX_ALIAS.sub(lambda m: "\\" + _LATEX_SAME[m.group(1)], text))
    if "," in text:
        text = _THOUSANDS.sub("", text)
    return _TOKEN.findall(text)


def ngram_size(length: int, settings: DecontaminationConfig) -> int:
    """The n an item of `length` tokens is matched at; 0: too short, exact match only."""
    if length < settings.min_ngram:
        return 0
    return min(settings.ngram, max(settings.min_ngram, length // 4))


def overlap_limit(length: int, settings: DecontaminationConfig) -> float:
    """The share of an item's tokens a row may cover: `max_overlap`; for an item of 2 * min_ngram
    tokens or fewer, where one stock phrase can cover half of it, every token but one."""
    if length > 2 * settings.min_ngram or not length:
        return settings.max_overlap
    return max(settings.max_overlap, (length - 1) / length)


def _grams(tokens: list[str], n: int) -> set[tuple]:
    return set(zip(*(tokens[i:] for i in range(n))))


def user_text(row: dict) -> str:
    """Every user turn of a row (prompt rows, SFT and preference rows alike), one after another."""
    turns = row.get("prompt") or row.get("messages") or []
    if isinstance(turns, str):
        return turns
    return "\n".join(m["content"] for m in turns if m.get("role") == "user")


@dataclass
class _Item:
    suite: str
    index: int
    where: str
    question: str
    tokens: list[str]
    n: int
    grams: list[tuple]   # the item's n-grams, by start position
    limit: float         # overlap_limit


@dataclass
class Contamination:
    """One training row overlapping one evaluation item (the closest item of that suite)."""

    role: str
    row: int        # position in the role's rows
    where: str      # file:line or file row N
    suite: str
    item: int       # position in the suite
    item_where: str
    overlap: float
    question: str   # the training row's question, for the report
    key: int = 0    # id() of the row object (upsampled copies share it)

    def describe(self) -> str:
        return (f"role {self.role!r} {self.where} ~ suite {self.suite!r} item {self.item} ({self.item_where}), "
                f"overlap {self.overlap:.2f}: {self.question[:80]!r}")


class EvalIndex:
    """The evaluation suites' questions, indexed for `overlaps`."""

    def __init__(self, evals: dict[str, RoleData], settings: DecontaminationConfig):
        self.settings = settings
        self.items: list[_Item] = []
        self.exact: dict[str, list[int]] = defaultdict(list)
        self.seeds: dict[tuple, list[tuple[int, int]]] = defaultdict(list)   # seed n-gram -> (item, start)
        m = settings.min_ngram
        for suite, data in evals.items():
            for i, row in enumerate(data.rows):
                question = question_of(row)
                tokens = tokens_of(question)
                n = ngram_size(len(tokens), settings)
                k = len(self.items)
                self.items.append(_Item(suite, i, data.origins.get(id(row), f"row {i}"), question, tokens, n,
                                        list(zip(*(tokens[j:] for j in range(n)))) if n else [],
                                        overlap_limit(len(tokens), settings)))
                if key := normalised_question(question):
                    self.exact[key].append(k)
                for start, gram in enumerate(zip(*(tokens[j:] for j in range(m))) if n else ()):
                    self.seeds[gram].append((k, start))
        self._seed_set = frozenset(self.seeds)

    def overlaps(self, row: dict) -> dict[int, float]:
        """Item -> the share of its tokens the row covers, for every item the row shares a seed
        (`min_ngram`) n-gram with; 1.0 for an exact normalised match. Tokens are first marked by the
        shared seed n-grams, a bound on the share at the item's own n (each of its n-grams is made
        of seed n-grams): an item at or under its limit that way is left there, the others are
        scored at their n."""
        found = {k: 1.0 for k in self.exact.get(normalised_question(question_of(row)), ())}
        tokens = tokens_of(user_text(row))
        m = self.settings.min_ngram
        if len(tokens) < m:
            return found
        have = {m: _grams(tokens, m)}
        marks: dict[int, bytearray] = {}
        for gram in have[m] & self._seed_set:
            for k, start in self.seeds[gram]:
                if k not in found:
                    covered = marks.get(k) or marks.setdefault(k, bytearray(len(self.items[k].tokens)))
                    covered[start:start + m] = b"\1" * m
        for k, covered in marks.items():
            item = self.items[k]
            share = covered.count(1) / len(covered)
            if item.n != m and share > item.limit:   # score at the item's own n
                if item.n not in have:
                    have[item.n] = _grams(tokens, item.n)
                grams, covered = have[item.n], bytearray(len(item.tokens))
                for start, gram in enumerate(item.grams):
                    if gram in grams:
                        covered[start:start + item.n] = b"\1" * item.n
                share = covered.count(1) / len(covered)
            found[k] = share
        return found


def find_contamination(train: dict[str, RoleData], evals: dict[str, RoleData],
                       settings: DecontaminationConfig) -> list[Contamination]:
    """Each training row above an item's limit (`overlap_limit`), once per suite (its closest item)."""
    index = EvalIndex(evals, settings)
    found: list[Contamination] = []
    for role, data in train.items():
        seen: dict[int, dict[str, tuple[int, float]]] = {}   # upsampled copies are scored once
        for position, row in enumerate(data.rows):
            key = id(row)
            if key not in seen:
                best: dict[str, tuple[int, float]] = {}
                for k, overlap in index.overlaps(row).items():
                    suite = index.items[k].suite
                    if overlap > index.items[k].limit and overlap > best.get(suite, (0, -1.0))[1]:
                        best[suite] = (k, overlap)
                seen[key] = best
            for suite, (k, overlap) in seen[key].items():
                item = index.items[k]
                found.append(Contamination(role, position, data.origins.get(key, f"row {position}"), suite,
                                           item.index, item.where, overlap, question_of(row), key))
    return found


def report(found: list[Contamination]) -> list[str]:
    """Per suite: how many training rows overlap it, by role, and a few examples."""
    lines = []
    for suite in dict.fromkeys(c.suite for c in found):
        mine = [c for c in found if c.suite == suite]
        roles = Counter(c.role for c in mine)
        lines.append(f"suite {suite!r}: {len(mine)} training rows overlap it ("
                     + ", ".join(f"{role} {n}" for role, n in roles.items()) + "), e.g. "
                     + "; ".join(c.describe() for c in mine[:EXAMPLES]))
    return lines


def decontaminate(loaded: dict[str, RoleData], settings: DecontaminationConfig) -> list[Contamination]:
    """Check every training role of `loaded` (keys `eval:<suite>` are the suites) against the
    suites: contamination is refused (DatasetError naming the setting) or, with `action: drop`, its
    rows are dropped from their roles, counted and noted. Returns what was found."""
    evals = {key.removeprefix("eval:"): data for key, data in loaded.items() if key.startswith("eval:")}
    train = {key: data for key, data in loaded.items() if not key.startswith("eval:")}
    found = find_contamination(train, evals, settings)
    if not found:
        return found
    if settings.action == "refuse":
        raise DatasetError(f"training data contaminates evaluation ({settings.describe()}): "
                           + " | ".join(report(found)) + f"; drop such rows with `{SETTING}.action: drop`, or "
                           f"set `{SETTING}.max_overlap` (now {settings.max_overlap:g}) if these are not the "
                           "same questions")
    for role, data in train.items():
        mine = [c for c in found if c.role == role]
        if not mine:
            continue
        bad = {c.key for c in mine}
        kept = [row for row in data.rows if id(row) not in bad]
        removed = len(data.rows) - len(kept)
        if not kept:
            raise DatasetError(f"role {role!r}: no row is left after `{SETTING}.action: drop` dropped all "
                               f"{removed} ({settings.describe()})")
        data.rows[:] = kept
        data.dropped[DROP_REASON] = data.dropped.get(DROP_REASON, 0) + removed
        by_suite = Counter(c.suite for c in mine)
        data.notes.append(f"role {role!r}: dropped {removed} rows overlapping evaluation ("
                          + ", ".join(f"suite {s!r} {n}" for s, n in by_suite.items())
                          + f"; {settings.describe()}), e.g. " + "; ".join(c.describe() for c in mine[:EXAMPLES]))
    return found


def summary(loaded: dict[str, RoleData], settings: DecontaminationConfig) -> str:
    """The line `posttrain data check` prints once the check has passed (or dropped its rows)."""
    dropped = {key: data.dropped[DROP_REASON] for key, data in loaded.items() if data.dropped.get(DROP_REASON)}
    suites = [key.removeprefix("eval:") for key in loaded if key.startswith("eval:")]
    said = (", dropped " + ", ".join(f"{role} {n}" for role, n in dropped.items())) if dropped else ""
    return (f"train/eval overlap: 0 rows ({settings.describe()}; suites {', '.join(suites) or 'none'}{said})")
