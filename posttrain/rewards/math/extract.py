"""Finding the final answer in a response: the answer part after the first ``</think>`` and the
contents of its top-level ``\\boxed{...}`` / ``\\fbox{...}`` boxes (braces nest, escapes honoured)."""
from __future__ import annotations

import re

from posttrain.rewards.math.limits import tick

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
TRAIL_PUNCT = ".,;:?。，；：？、 \t\r\n"


_BRACE_SCAN_RE = re.compile(r"\\.|[{}]", re.S)


def match_brace(text: str, i: int) -> int:
    """Index of the brace closing the '{' at text[i], or -1; backslash escapes are skipped."""
    depth = 0
    for k, m in enumerate(_BRACE_SCAN_RE.finditer(text, i)):  # visits braces and escapes only
        if k & 4095 == 4095:
            tick()
        ch = m.group(0)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


_BARE_TOKEN_RE = re.compile(r"[^\s$]+")
_BARE_TRAIL = TRAIL_PUNCT.replace("?", "").replace("？", "")


def find_boxes(text: str) -> list[str | None]:
    """Contents of the top-level boxes in text, in order; None marks a box that is never closed."""
    return _scan_boxes(text)[0]


def _scan_boxes(text: str) -> tuple[list[str | None], int]:
    """(the boxes' contents, where the last box ends in text: -1 when it never closes)."""
    out: list[str | None] = []
    pos = end = 0
    n = len(text)
    while True:
        tick()
        m = _BOX_RE.search(text, pos)
        if m is None:
            return out, end
        i = m.end()
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i < n and text[i] == "{":
            j = match_brace(text, i)
            if j < 0:
                out.append(None)
                return out, -1
            out.append(text[i + 1 : j])
            pos = end = j + 1
        else:
            t = _BARE_TOKEN_RE.match(text, i)
            if t is None:
                out.append(None)
                return out, -1
            tok = t.group(0)
            # "\boxed 5." / "\boxed 5\)" : keep the token itself, and a question mark: "\boxed 5?" is a doubt
            tok = re.sub(r"(\\\)|\\\])+$", "", tok).rstrip(_BARE_TRAIL)
            out.append(tok if tok else None)
            if not tok:
                return out, -1
            pos = t.end()
            end = t.start() + len(tok)   # what the token's own trailing punctuation left: the tail


# The end of the final answer's sentence, and what may close it: math delimiters, spaces, closing
# brackets, quotes and punctuation (a question mark is a doubt, not a close).
_SENTENCE_END_RE = re.compile(r"[.。!！\n]")
_CLOSERS_RE = re.compile(r"\\[)\],;:! \\]|\$|\*|[\s,;:，；：、()\]（）【】「」『』\"'“”‘’]")
# a sentence that only says what the box is: `\\boxed{5} is the final answer.`
_STATES_ANSWER_RE = re.compile(r"(?:is|was)\s+(?:the|our|my)\s+(?:final\s+)?(?:answer|result)|是(?:最终)?(?:的)?(?:答案|结果)",
                               re.I)


def qualified(tail: str) -> bool:
    """Whether the text after the last box, up to the end of its sentence, goes on with the answer's
    value: `\\boxed{130} 以上` (130 or more), `\\boxed{130} or more`, `\\boxed{130}+`, `approximately`.
    Only closing punctuation, `$` and a unit the in-box unit allowlist accepts may stand there
    (`\\boxed{12} cm.`, `$\\boxed{5}$.`, `\\boxed{5}. This is the final answer.`)."""
    from posttrain.rewards.math.normalise import is_unit_text   # normalise imports this module

    end = _SENTENCE_END_RE.search(tail)
    rest = _CLOSERS_RE.sub(" ", tail[: end.start()] if end else tail).strip()
    return bool(rest.strip("{} ")) and not is_unit_text(rest) and not _STATES_ANSWER_RE.fullmatch(rest)


def _split_think(response: str) -> tuple[str, str]:
    """(reasoning part, answer part): the answer follows the FIRST ``</think>`` (as reasoning parsers
    serve it), so a second ``</think>`` cannot hide a hedge before it."""
    close = response.find(_THINK_CLOSE)
    if close >= 0:
        think = response[:close]
        ans = response[close + len(_THINK_CLOSE) :]
        k = ans.find(_THINK_OPEN)
        if k >= 0:  # a new thought opened after the answer and never closed
            think, ans = think + ans[k:], ans[:k]
        return think, ans
    if _THINK_OPEN in response:  # truncated mid-thought
        return response, ""
    return "", response


def extract_boxes(response: str) -> tuple[list[str | None], str | None]:
    """The boxes of the answer part and None, or the reason no answer can be taken from them
    (think_only | no_box | unparsable_response | qualified: words after the last box qualify it)."""
    think, ans = _split_think(response)
    boxes, end = _scan_boxes(ans) if "\\" in ans else ([], -1)
    if not boxes:
        if think and _BOX_RE.search(think):
            return [], "think_only"
        return [], "no_box"
    if boxes[-1] is None or not boxes[-1].strip():  # truncated or empty box
        return boxes, "unparsable_response"
    if end >= 0 and qualified(ans[end:]):   # the value goes on after its box: `\\boxed{130} or more`
        return boxes, "qualified"
    return boxes, None
