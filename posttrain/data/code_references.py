"""The reference solutions published code datasets ship, run against their own rows' tests by
`posttrain data check` (posttrain.cli): a row whose reference fails its tests would pay nothing to a
right answer, or its tests were read wrong (posttrain.data.code_tests), so it is refused, naming the
file and row.

Which solution: MBPP's `code`; HumanEval's `prompt` + `canonical_solution`; APPS / TACO's first
entry of the `solutions` JSON list; verifiable-coding-problems' `gold_standard_solution` (its
```python block). Only sources with `tests_from:` are checked. By default a seeded sample of each
source's rows (`SAMPLE` rows, drawn with the config's seed), `--all` for every row. A verdict is
cached by the hash of (reference, the row's tests) and the sandbox version, under
`<paths.runs>/cache/code-references/`, so a second check runs only what changed; timeouts and
sandbox errors are not cached and not held against the row (a loaded machine is no verdict on it);
running out of the judge's time budget for the whole row is (no reply to that row could be paid).
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.data.files import DatasetError
from posttrain.data.transforms import RowRefused

SAMPLE = 20
_FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)
_CACHED_REASONS = ("pass", "wrong_answer", "runtime_error", "bad_test")


def reference_code(fmt: str, row: dict) -> str | None:
    """The row's reference solution, as a reply's code block would hold it (None: the row has none)."""
    if fmt == "mbpp":
        code = row.get("code")
    elif fmt == "humaneval":
        prompt, body = row.get("prompt"), row.get("canonical_solution")
        code = prompt + body if isinstance(prompt, str) and isinstance(body, str) else None
    elif fmt == "apps":
        try:
            solutions = json.loads(row.get("solutions") or "[]")
        except (json.JSONDecodeError, TypeError):
            solutions = row.get("solutions")
        code = solutions[0] if isinstance(solutions, list) and solutions else None
    else:
        code = row.get("gold_standard_solution")
        if isinstance(code, str) and _FENCE.search(code):
            code = _FENCE.findall(code)[-1]
    return code if isinstance(code, str) and code.strip() else None


@dataclass
class ReferenceCheck:
    """What `data check` says about one source's reference solutions."""

    label: str
    rows: int                 # rows of the source
    checked: int = 0          # references run (or found in the cache)
    cached: int = 0
    passed: int = 0
    without: int = 0          # sampled rows that ship no reference
    skipped: int = 0          # sampled rows the source drops (`drop:`)
    unjudged: int = 0         # timeouts and sandbox errors: no verdict
    failures: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def line(self) -> str:
        rate = (self.checked - self.cached) / self.wall_s if self.wall_s and self.checked > self.cached else 0.0
        extra = [f"{n} {what}" for n, what in ((self.without, "without a reference"), (self.skipped, "dropped"),
                                               (self.unjudged, "not judged (timeout)"), (self.cached, "cached"))
                 if n]
        return (f"reference solutions of {self.label}: {self.passed} of {self.checked} pass their tests "
                f"({self.checked} of {self.rows} rows run{', ' if extra else ''}{', '.join(extra)}; "
                f"{rate:.1f} rows/s, {self.wall_s:.1f} s)")


def _key(code: str, tests: list) -> str:
    from posttrain.rewards.code_sandbox import SANDBOX_VERSION

    blob = json.dumps([SANDBOX_VERSION, code, tests], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _verdict(code: str, tests: list, cache: Path) -> tuple[str, str, bool]:
    """(reason, first failure, cached) of one reference against its row's tests."""
    from posttrain.rewards.code_judge import run_tests

    path = cache / f"{_key(code, tests)}.json"
    try:
        found = json.loads(path.read_text())
        return found["reason"], found["detail"], True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    verdict = run_tests(code, tests)
    detail = next((d for d in verdict.details if not d.endswith(": pass")), "")
    if verdict.reason in _CACHED_REASONS:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{random.randrange(1 << 30)}")
        tmp.write_text(json.dumps({"reason": verdict.reason, "detail": detail}))
        tmp.replace(path)
    return verdict.reason, detail, False


def check_source(source, root: Path, seed: int, cache: Path, every: bool = False) -> ReferenceCheck:
    from posttrain.data.sources import _mapped, normalise_prompt, read_source

    raw = read_source(source, root)
    if source.shuffle_seed is not None:
        random.Random(source.shuffle_seed).shuffle(raw)
    raw = raw[:source.limit] if source.limit is not None else raw
    picked = range(len(raw)) if every else sorted(random.Random(f"{source.label}/{seed}").sample(
        range(len(raw)), min(SAMPLE, len(raw))))
    report, t0 = ReferenceCheck(source.label, len(raw)), time.monotonic()
    for i in picked:
        located = raw[i]
        try:
            row = normalise_prompt(located.row, source, located.where)
        except RowRefused as exc:
            if exc.reason not in source.drop:
                raise
            report.skipped += 1
            continue
        code = reference_code(source.tests_from.format, _mapped(located.row, source, located.where))
        if code is None:
            report.without += 1
            continue
        reason, detail, cached = _verdict(code, row["tests"], cache)
        if reason in ("timeout", "cpu_limit", "sandbox_error", "no_isolation"):
            report.unjudged += 1
            continue
        report.checked += 1
        report.cached += cached
        if reason == "pass":
            report.passed += 1
        else:   # `budget`: more cases than one reply's judging time runs, so no reply is ever paid
            hint = "; keep fewer with `tests_from: {max_tests: N}`" if reason == "budget" else ""
            report.failures.append(f"{located.where}: the dataset's reference solution fails its own tests "
                                   f"({detail}{hint})")
    report.wall_s = time.monotonic() - t0
    return report


def check_references(cfg, every: bool = False) -> list[ReferenceCheck]:
    """Every `tests_from` source of the config (roles and evaluation suites), its references run."""
    root = Path(cfg.root)
    cache = cfg.path(cfg.paths.runs) / "cache" / "code-references"
    sources = [s for sources in cfg.data.roles().values() for s in sources]
    sources += [s for suite in cfg.data.suites() for s in suite.sources]
    seen, reports = set(), []
    for source in sources:
        if source.tests_from is None or source.label in seen:
            continue
        seen.add(source.label)
        reports.append(check_source(source, root, cfg.seed, cache, every))
    return reports


def data_check_lines(cfg, every: bool = False):
    """What `data check` prints of the references, line by line; raises DatasetError naming the first
    rows whose reference fails. Without OS isolation (and no opt-in), says so and runs nothing."""
    from posttrain.rewards.code_sandbox import SandboxUnavailable, require_isolation

    if not any(s.tests_from for sources in cfg.data.roles().values() for s in sources) and not any(
            s.tests_from for suite in cfg.data.suites() for s in suite.sources):
        return
    try:
        require_isolation(allow_unisolated=cfg.sandbox.unsafe_allow_unisolated)
    except SandboxUnavailable as exc:
        yield f"reference solutions not run: {str(exc).split('. ')[0]}"
        return
    reports = check_references(cfg, every)
    yield from (r.line() for r in reports)
    failures = [f for r in reports for f in r.failures]
    if failures:
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise DatasetError("; ".join(failures[:3]) + more)
