"""Decontamination benchmark: how long the n-gram check (posttrain.data.decontamination) takes on a
synthetic 100k-row training set against a few thousand evaluation items, and what it finds.

The text is generated: words drawn from a vocabulary of 30,000 weighted as English words are
(Zipf-Mandelbrot, 1 / (rank + 2.7)), interleaved with bits
of LaTeX, and 20 stock phrases of math problems ("Enter your answer in the form", "Express your
answer as a common fraction.") shared by training rows and items alike. `--planted` training rows are
copies of items with the spacing, LaTeX spacing and one word changed: every one of them must be
found, and the other rows (which share only stock phrases with the items) are counted as false
positives. Timed: building the index over the items, scoring every training row (one role of
`--rows` prompt rows), and the whole `decontaminate` call with `action: drop`.

    .venv/bin/python bench/decontamination.py [--rows 100000] [--items 5000] [--planted 200] [--seed 0]

Writes bench/results/decontamination.md.
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from posttrain.data.decontamination import DecontaminationConfig, EvalIndex, decontaminate, find_contamination  # noqa: E402
from posttrain.data.sources import RoleData  # noqa: E402

STOCK = ["Find the value of $x$ such that", "Enter your answer in the form", "Express your answer as a common fraction.",
         "What is the smallest positive integer", "How many ways are there to", "Compute the sum of all",
         "Express your answer in simplest radical form.", "Round your answer to the nearest tenth.",
         "Let $f(x)$ be a function such that", "What is the greatest common divisor of",
         "Find the number of ordered pairs", "in rectangular coordinates to polar coordinates.",
         "If the probability that", "What is the remainder when", "Simplify the expression",
         "Find all real numbers $x$ such that", "The sum of two numbers is", "A right triangle has legs of length",
         "Evaluate the expression", "Determine the largest integer"]
LATEX = ["$x^2 + {a}x + {b} = 0$", "$\\frac{{{a}}}{{{b}}}$", "$\\sqrt{{{a}}}$", "$(x, y) = ({a}, {b})$",
         "$\\left( {a}, \\frac{{\\pi}}{{{b}}} \\right)$", "${a} \\le n \\le {b}$", "$f({a}) = {b}$"]


def _vocabulary(rng: random.Random, size: int = 30000) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(size * 2)})[:size]
    rng.shuffle(words)
    return words, list(itertools.accumulate(1 / (rank + 2.7) for rank in range(len(words))))   # cumulative


def _text(rng: random.Random, vocab, weights, low: int, high: int) -> str:
    parts: list[str] = []
    target = rng.randint(low, high)
    while len(" ".join(parts).split()) < target:
        roll = rng.random()
        if roll < 0.1:
            parts.append(rng.choice(STOCK))
        elif roll < 0.25:
            parts.append(rng.choice(LATEX).format(a=rng.randint(1, 999), b=rng.randint(1, 999)))
        else:
            parts.extend(rng.choices(vocab, cum_weights=weights, k=rng.randint(3, 8)))
    return " ".join(parts)


def _without_stock(row: dict) -> dict:
    text = row["prompt"][0]["content"]
    for phrase in STOCK:
        text = text.replace(phrase, " ")
    return _row(text)


def _edited(rng: random.Random, text: str, vocab) -> str:
    """The item as a training file might hold it: spacing, LaTeX spacing and one word changed."""
    words = text.split(" ")
    plain = [i for i, w in enumerate(words) if w.isalpha()]
    if plain:
        words[rng.choice(plain)] = rng.choice(vocab)
    out = "  ".join(words).replace("\\frac", "\\dfrac").replace(", ", ",\\, ").replace("$x", "$ x")
    return out.replace("\\left( ", "(").replace(" \\right)", ")")


def _row(text: str) -> dict:
    return {"prompt": [{"role": "user", "content": text}], "kind": "math", "answer": "1"}


def run(rows: int, items: int, planted: int, seed: int) -> dict:
    load = os.getloadavg()[0]
    rng = random.Random(seed)
    vocab, weights = _vocabulary(rng)
    eval_rows = [_row(_text(rng, vocab, weights, 12, 80)) for _ in range(items)]
    train_rows = [_row(_text(rng, vocab, weights, 15, 120)) for _ in range(rows - planted)]
    targets = rng.sample(range(items), planted)
    copies = [_row(_edited(rng, eval_rows[i]["prompt"][0]["content"], vocab)) for i in targets]
    train_rows += copies
    rng.shuffle(train_rows)
    settings = DecontaminationConfig()
    evals = {"synthetic": RoleData(eval_rows)}
    t0 = time.perf_counter()
    EvalIndex(evals, settings)
    index_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = find_contamination({"reasoning_prompts": RoleData(train_rows)}, evals, settings)
    find_s = time.perf_counter() - t0
    planted_ids = {id(r) for r in copies}
    caught = {c.key for c in found} & planted_ids
    false_positives = len({c.key for c in found} - planted_ids)
    index = EvalIndex(evals, settings)
    missed = [len(index.items[i].tokens) for i, r in zip(targets, copies) if id(r) not in caught]
    others = [c for c in found if c.key not in planted_ids]
    flagged = [f"{c.overlap:.2f} of item {eval_rows[c.item]['prompt'][0]['content'][:90]!r}" for c in others[:3]]
    rows_by_key = {id(r): r for r in train_rows}
    stock_only = sum(1 for c in others   # one suite: an item's position is its index
                     if index.overlaps(_without_stock(rows_by_key[c.key])).get(c.item, 0.0) <= index.items[c.item].limit)
    loaded = {"reasoning_prompts": RoleData(list(train_rows)), "eval:synthetic": RoleData(eval_rows)}
    t0 = time.perf_counter()
    decontaminate(loaded, settings.model_copy(update={"action": "drop"}))
    drop_s = time.perf_counter() - t0
    return {"rows": rows, "items": items, "planted": planted, "seed": seed, "index_s": index_s, "find_s": find_s,
            "drop_s": drop_s, "caught": len(caught), "false_positives": false_positives,
            "missed_item_tokens": missed, "flagged_examples": flagged, "flagged_by_stock_phrases": stock_only,
            "dropped": loaded["reasoning_prompts"].dropped.get("contaminated", 0),
            "rows_per_s": rows / find_s, "load": load}


def write(result: dict, path: Path) -> None:
    r = result
    path.write_text(f"""# Decontamination: n-gram check on a synthetic 100k-row set

`bench/decontamination.py --rows {r['rows']} --items {r['items']} --planted {r['planted']} --seed {r['seed']}`
(posttrain.data.decontamination, default settings: 8- to 13-grams, max_overlap 0.5), one process, on
{platform.machine()} with {os.cpu_count()} CPUs (load average {r['load']:.1f} when it started: a shared
machine), Python {platform.python_version()}.

| step | seconds |
|---|---|
| index the {r['items']:,} eval items | {r['index_s']:.2f} |
| score {r['rows']:,} training rows (find_contamination) | {r['find_s']:.2f} ({r['rows_per_s']:,.0f} rows/s) |
| whole check with `action: drop` (index + score + drop) | {r['drop_s']:.2f} |

Planted copies of items (spacing, LaTeX spacing and one word changed): {r['caught']} of {r['planted']}
found; other training rows flagged (they share only stock phrases with the items): {r['false_positives']};
rows dropped with `action: drop`: {r['dropped']}.

Of the other rows flagged, {r['flagged_by_stock_phrases']} are not once the 20 stock phrases are deleted
from the row (the item keeps them): the stock phrases, with the LaTeX templates around them, make up
more than half of those items.

Missed copies, by their item's length in tokens: {r['missed_item_tokens'] or 'none'} (an item under
17 tokens edited in its middle keeps no 8-gram on either side of the edit: only the exact check
catches those; an item of 16 tokens or fewer must be covered whole). Flagged rows other than the
copies cover, e.g.:
{chr(10).join('- ' + e for e in r['flagged_examples']) or '- none'}

(an item of 17 tokens or more that is half stock phrase or more is covered past 0.5 by any row with
the same phrases; real items that generic are rare, and a templated sibling of an item, the same
problem with other numbers, is flagged the same way)

Training rows are 15-120 words of a 30,000-word vocabulary (Zipf-Mandelbrot) with LaTeX fragments
and 20 stock problem phrases; items 12-80 words of the same. Only items sharing a seed {8}-gram with a row
are scored, so the time grows with the rows' length and not with rows x items.
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--planted", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(ROOT / "bench" / "results" / "decontamination.md"))
    args = parser.parse_args()
    result = run(args.rows, args.items, args.planted, args.seed)
    print(result)
    write(result, Path(args.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
