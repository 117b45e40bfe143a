"""Seeded generators for the embedded world: math (English and Chinese), non-reasoning and
instruction-following tasks.

Held-out suites are disjoint from training in two ways: they use template variants that training
never uses, and their operands come from a hash partition that training never draws from
(`is_held_out`). `check_no_overlap` verifies the result on normalised prompt text.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Iterable, Literal

Language = Literal["en", "zh"]
Split = Literal["train", "eval"]

NAMES_EN = ["Tom", "Amy", "Ben", "Lily", "Sam", "Mia", "Max", "Zoe"]
NAMES_ZH = ["小明", "小红", "小刚", "小丽", "小华", "小林"]
ITEMS_EN = ["apple", "book", "pen", "card", "coin", "egg", "ball", "cup"]
ITEMS_ZH = ["苹果", "本书", "支笔", "张卡片", "枚硬币", "个鸡蛋", "个球", "个杯子"]
# Chinese counting needs a measure word; the item table above carries it for the non-apple items.

TEMPLATES = {
    # (language, kind, op) -> (train variants, eval-only variants). Several training phrasings per
    # kind, with the operands in either order, so a model learns to read a problem rather than the
    # position of its numbers: with one training phrasing per kind, most held-out errors were
    # operands copied from the wrong place in an unseen phrasing (bench/results/calibration.md).
    ("en", "bare", "any"): (
        ["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "Calculate {a} {op} {b}.",
         "Work out {a} {op} {b}.", "{a} {op} {b} = ?"],
        ["Find the value of {a} {op} {b}.", "Evaluate {a} {op} {b}."],
    ),
    ("zh", "bare", "any"): (
        ["计算 {a} {op} {b}。", "{a} {op} {b} 等于多少？", "{a} {op} {b} 是多少？", "算一算 {a} {op} {b}。"],
        ["求 {a} {op} {b} 的值。", "请算出 {a} {op} {b}。"],
    ),
    ("en", "word", "+"): (
        ["{name} has {a} {item}s and buys {b} more. How many {item}s does {name} have now?",
         "A box holds {a} {item}s. {name} puts in {b} more. How many {item}s are in the box?",
         "{name} collected {a} {item}s on Monday and {b} {item}s on Tuesday. How many {item}s did {name} collect?",
         "There are {a} red {item}s and {b} blue {item}s. How many {item}s are there altogether?",
         "{name} gets {b} {item}s and already owns {a}. How many {item}s does {name} own now?"],
        ["{name} had {a} {item}s and found {b} more. How many {item}s are there in total?"],
    ),
    ("en", "word", "-"): (
        ["{name} had {a} {item}s and gave away {b}. How many {item}s are left?",
         "A shop has {a} {item}s and sells {b}. How many {item}s does the shop have left?",
         "{name} needs {a} {item}s and already has {b}. How many more {item}s does {name} need?",
         "Out of {a} {item}s, {b} are broken. How many {item}s are not broken?",
         "{b} of the {a} {item}s on the table are gone. How many {item}s are still on the table?"],
        ["There were {a} {item}s and {name} took {b}. How many {item}s remain?"],
    ),
    ("en", "word", "*"): (
        ["There are {b} boxes with {a} {item}s in each box. How many {item}s are there?",
         "Each bag holds {a} {item}s. How many {item}s are in {b} bags?",
         "{name} has {b} rows of {a} {item}s. How many {item}s does {name} have?",
         "One pack has {a} {item}s. {name} buys {b} packs. How many {item}s is that?",
         "One {item} costs {a} coins. How many coins do {b} {item}s cost?"],
        ["{name} buys {b} bags of {a} {item}s each. How many {item}s does {name} get?"],
    ),
    ("zh", "word", "+"): (
        ["{name}有{a}{item}，又买了{b}{item_short}。现在一共有多少{item_short}？",
         "盒子里有{a}{item}，{name}又放进去{b}{item_short}。盒子里现在有多少{item_short}？",
         "{name}星期一收集了{a}{item}，星期二收集了{b}{item_short}。一共收集了多少{item_short}？",
         "桌上有{a}{item}，{name}又拿来{b}{item_short}。桌上一共有多少{item_short}？"],
        ["{name}原来有{a}{item}，后来又得到{b}{item_short}。现在有多少{item_short}？"],
    ),
    ("zh", "word", "-"): (
        ["{name}有{a}{item}，送给别人{b}{item_short}。还剩多少{item_short}？",
         "商店有{a}{item}，卖出了{b}{item_short}。商店还有多少{item_short}？",
         "{name}需要{a}{item}，已经有{b}{item_short}。还需要多少{item_short}？",
         "{a}{item}中有{b}{item_short}坏了。没坏的有多少{item_short}？"],
        ["{name}有{a}{item}，用掉了{b}{item_short}。还剩下多少{item_short}？"],
    ),
    ("zh", "word", "*"): (
        ["有{b}个盒子，每个盒子里有{a}{item}。一共有多少{item_short}？",
         "每袋有{a}{item}，{b}袋一共有多少{item_short}？",
         "{name}摆了{b}排，每排{a}{item}。一共摆了多少{item_short}？",
         "一包有{a}{item}，{name}买了{b}包。一共有多少{item_short}？"],
        ["{name}买了{b}袋，每袋{a}{item}。一共买了多少{item_short}？"],
    ),
}

OP_SYMBOL = {"+": "+", "-": "-", "*": "×"}


@dataclass
class MathProblem:
    id: str
    language: Language
    level: int
    op: str
    a: int
    b: int
    question: str
    answer: str
    reasoning: str

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class DirectTask:
    """A short non-reasoning question with one right answer."""

    id: str
    language: Language
    kind: str
    question: str
    answer: str

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class InstructionTask:
    """A question plus programmatically checkable constraints (see posttrain.rewards.instruction)."""

    id: str
    language: Language
    question: str
    constraints: list[dict]
    gold_response: str
    thinking: bool
    answer: str
    base_kind: str  # "math" or "direct"
    extra: dict = field(default_factory=dict)

    def to_row(self) -> dict:
        row = asdict(self)
        row["constraints"] = json.dumps(self.constraints, ensure_ascii=False)
        return row


# ---------------------------------------------------------------- the held-out partition


def _bucket(key: str) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 10


def is_held_out(key: str) -> bool:
    """One tenth of all operand triples / task keys belong to evaluation only."""
    return _bucket(key) == 0


def _split_ok(key: str, split: Split) -> bool:
    return is_held_out(key) == (split == "eval")


# ---------------------------------------------------------------- math reasoning traces


def _digits(n: int) -> list[int]:
    return [int(ch) for ch in reversed(str(n))]


def reasoning_steps(op: str, a: int, b: int) -> list[tuple[str, str]]:
    """Digit-wise steps as (english, chinese) pairs, least significant digit first.

    Each step says which digit to write: the model assembles the result from those digits, which a
    few-million-parameter model learns far more reliably than producing the sum in one go.
    """
    steps: list[tuple[str, str]] = []
    if op == "+":
        da, db, carry = _digits(a), _digits(b), 0
        for i in range(max(len(da), len(db))):
            x = da[i] if i < len(da) else 0
            y = db[i] if i < len(db) else 0
            total = x + y + carry
            expr = f"{x}+{y}" + (f"+{carry}" if carry else "")
            carry_new = total // 10
            en = f"{expr}={total}, write {total % 10}" + (f" carry {carry_new}" if carry_new else "")
            zh = f"{expr}={total}，写{total % 10}" + (f"进{carry_new}" if carry_new else "")
            steps.append((en, zh))
            carry = carry_new
        if carry:
            steps.append((f"write {carry}", f"写{carry}"))
    elif op == "-":
        da, db, borrow = _digits(a), _digits(b), 0
        for i in range(len(da)):
            x = da[i]
            y = db[i] if i < len(db) else 0
            top = x - borrow
            if top < y:
                value = top + 10 - y
                en = f"{x}-{borrow}-{y} borrow, {top + 10}-{y}={value}, write {value}" if borrow else \
                    f"{x}-{y} borrow, {top + 10}-{y}={value}, write {value}"
                zh = f"{x}-{borrow}-{y}借位，{top + 10}-{y}={value}，写{value}" if borrow else \
                    f"{x}-{y}借位，{top + 10}-{y}={value}，写{value}"
                borrow = 1
            else:
                value = top - y
                expr = f"{x}-{borrow}-{y}" if borrow else f"{x}-{y}"
                en, zh = f"{expr}={value}, write {value}", f"{expr}={value}，写{value}"
                borrow = 0
            steps.append((en, zh))
    elif op == "*":
        # One fact per equation: the product from the times table, then the carry added to it
        # (a fused "4×7+6=34" step asks a tiny model for two facts in one go; it never learnt them).
        da, carry = _digits(a), 0
        for i, x in enumerate(da):
            product = x * b
            total = product + carry
            facts = f"{x}×{b}={product}" + (f", {product}+{carry}={total}" if carry else "")
            facts_zh = f"{x}×{b}={product}" + (f"，{product}+{carry}={total}" if carry else "")
            carry_new = total // 10
            en = f"{facts}, write {total % 10}" + (f" carry {carry_new}" if carry_new else "")
            zh = f"{facts_zh}，写{total % 10}" + (f"进{carry_new}" if carry_new else "")
            steps.append((en, zh))
            carry = carry_new
        if carry:
            steps.append((f"write {carry}", f"写{carry}"))
    else:
        raise ValueError(f"unknown operator {op!r}")
    return steps


def render_reasoning(op: str, a: int, b: int, language: Language, english_step_share: float = 0.0,
                     rng: random.Random | None = None) -> str:
    """The worked solution; `english_step_share` > 0 mixes English steps into Chinese reasoning."""
    result = compute(op, a, b)
    head = f"{a}{OP_SYMBOL[op]}{b}"
    parts = []
    for en, zh in reasoning_steps(op, a, b):
        if language == "zh":
            use_en = rng is not None and rng.random() < english_step_share
            parts.append(en if use_en else zh)
        else:
            use_zh = rng is not None and rng.random() < english_step_share
            parts.append(zh if use_zh else en)
    if language == "zh":
        return f"{head}：" + "；".join(parts) + f"；所以{result}"
    return f"{head}: " + "; ".join(parts) + f"; so {result}"


def compute(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


# ---------------------------------------------------------------- math problems

LEVELS = {
    # level -> list of (op, a-range, b-range)
    1: [("+", (10, 99), (10, 99)), ("-", (10, 99), (10, 99))],
    2: [("+", (100, 999), (10, 99)), ("-", (100, 999), (10, 99)), ("*", (10, 99), (2, 9))],
    3: [("+", (100, 999), (100, 999)), ("-", (100, 999), (100, 999)), ("*", (100, 999), (2, 9))],
}


def math_problems(n: int, seed: int, split: Split, languages: Iterable[Language] = ("en", "zh"),
                  levels: Iterable[int] = (1, 2, 3), word_share: float = 0.4,
                  english_step_share: float = 0.0) -> list[MathProblem]:
    rng = random.Random(f"math/{seed}/{split}")
    languages, levels = list(languages), list(levels)
    problems: list[MathProblem] = []
    seen: set[str] = set()
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > n * 200:
            raise RuntimeError(f"could not draw {n} distinct {split} math problems; widen the levels")
        language = languages[len(problems) % len(languages)]
        level = rng.choice(levels)
        op, ra, rb = rng.choice(LEVELS[level])
        a, b = rng.randint(*ra), rng.randint(*rb)
        if op == "-" and a < b:
            a, b = b, a
        key = f"{a}{op}{b}"
        if not _split_ok(key, split) or (key, language) in seen:
            continue
        kind = "word" if rng.random() < word_share else "bare"
        train_variants, eval_variants = TEMPLATES[(language, kind, "any" if kind == "bare" else op)]
        template = rng.choice(eval_variants if split == "eval" else train_variants)
        question = _fill(template, language, op, a, b, rng)
        seen.add((key, language))
        reasoning = render_reasoning(op, a, b, language, english_step_share, rng)
        pid = f"math-{split}-{seed}-{len(problems)}"
        problems.append(MathProblem(pid, language, level, op, a, b, question, str(compute(op, a, b)),
                                    reasoning))
    return problems


def _fill(template: str, language: Language, op: str, a: int, b: int, rng: random.Random) -> str:
    if language == "zh":
        item = rng.choice(ITEMS_ZH)
        item_full = item if item.startswith(("个", "本", "支", "张", "枚")) else "个" + item
        short = item_full[0]
        return template.format(a=a, b=b, op=OP_SYMBOL[op], name=rng.choice(NAMES_ZH), item=item_full,
                               item_short=short)
    return template.format(a=a, b=b, op=OP_SYMBOL[op], name=rng.choice(NAMES_EN),
                           item=rng.choice(ITEMS_EN))


# ---------------------------------------------------------------- non-reasoning (direct) tasks

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ZH_DIGITS = "零一二三四五六七八九"
WEEKDAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS_ZH = ["星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"]
OPPOSITES = [("hot", "cold", "热", "冷"), ("big", "small", "大", "小"), ("up", "down", "上", "下"),
             ("fast", "slow", "快", "慢"), ("long", "short", "长", "短"), ("old", "new", "旧", "新"),
             ("high", "low", "高", "低"), ("open", "closed", "开", "关"), ("left", "right", "左", "右"),
             ("early", "late", "早", "晚"), ("many", "few", "多", "少"), ("light", "dark", "明", "暗")]
WORDS = ["apple", "river", "green", "table", "cloud", "music", "house", "light", "stone", "tiger",
         "paper", "chair", "water", "bread", "smile", "plant", "train", "dream", "beach", "sugar"]


def number_words_en(n: int) -> str:
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + number_words_en(rest))


def number_words_zh(n: int) -> str:
    if n < 10:
        return ZH_DIGITS[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return ("" if tens == 1 else ZH_DIGITS[tens]) + "十" + ("" if ones == 0 else ZH_DIGITS[ones])
    hundreds, rest = divmod(n, 100)
    head = ZH_DIGITS[hundreds] + "百"
    if rest == 0:
        return head
    if rest < 10:
        return head + "零" + ZH_DIGITS[rest]
    tens, ones = divmod(rest, 10)
    return head + ZH_DIGITS[tens] + "十" + ("" if ones == 0 else ZH_DIGITS[ones])


DIRECT_KINDS = {
    # kind -> (train templates, eval templates) per language; {x} is the subject
    "number_words": {"en": (["Write {x} in words."], ["Spell out the number {x}."]),
                     "zh": (["用中文写出数字{x}。"], ["数字{x}的中文写法是什么？"])},
    "next_day": {"en": (["What day comes after {x}?"], ["Which day follows {x}?"]),
                 "zh": (["{x}的后一天是星期几？"], ["{x}之后是星期几？"])},
    "opposite": {"en": (["What is the opposite of {x}?"], ["Give the opposite of {x}."]),
                 "zh": (["“{x}”的反义词是什么？"], ["请说出“{x}”的反义词。"])},
    "uppercase": {"en": (["Write {x} in capital letters."], ["Convert {x} to uppercase."]),
                  "zh": (["把{x}写成大写字母。"], ["请将{x}转换为大写。"])},
    "reverse": {"en": (["Spell {x} backwards."], ["Write {x} in reverse order."]),
                "zh": (["把{x}倒过来写。"], ["请倒序写出{x}。"])},
    "count_letters": {"en": (["How many letters are in the word {x}?"], ["Count the letters in {x}."]),
                      "zh": (["单词{x}有几个字母？"], ["{x}这个词有多少个字母？"])},
}


def _direct_subject(kind: str, language: Language, rng: random.Random) -> tuple[str, str, str]:
    """(key, subject, answer)"""
    if kind == "number_words":
        n = rng.randint(0, 999)
        return f"nw{n}", str(n), number_words_en(n) if language == "en" else number_words_zh(n)
    if kind == "next_day":
        i = rng.randrange(7)
        days = WEEKDAYS_EN if language == "en" else WEEKDAYS_ZH
        return f"nd{i}", days[i], days[(i + 1) % 7]
    if kind == "opposite":
        i, flip = rng.randrange(len(OPPOSITES)), rng.random() < 0.5
        en_a, en_b, zh_a, zh_b = OPPOSITES[i]
        pair = (en_a, en_b) if language == "en" else (zh_a, zh_b)
        x, y = (pair[1], pair[0]) if flip else pair
        return f"op{i}{flip}", x, y
    word = rng.choice(WORDS)
    if kind == "uppercase":
        return f"up{word}", word, word.upper()
    if kind == "reverse":
        return f"rv{word}", word, word[::-1]
    if kind == "count_letters":
        return f"cl{word}", word, str(len(word))
    raise ValueError(f"unknown direct task kind {kind!r}")


def direct_tasks(n: int, seed: int, split: Split, languages: Iterable[Language] = ("en", "zh")) -> list[DirectTask]:
    rng = random.Random(f"direct/{seed}/{split}")
    languages = list(languages)
    kinds = list(DIRECT_KINDS)
    tasks: list[DirectTask] = []
    attempts = 0
    while len(tasks) < n:
        attempts += 1
        if attempts > n * 500:
            raise RuntimeError(f"could not draw {n} {split} direct tasks")
        language = languages[len(tasks) % len(languages)]
        kind = rng.choice(kinds)
        key, subject, answer = _direct_subject(kind, language, rng)
        # Small tables (weekdays, opposites) cannot be split by subject; their eval items differ
        # from training by template only, which the overlap check still guarantees.
        if kind in ("number_words", "uppercase", "reverse", "count_letters") and not _split_ok(key, split):
            continue
        train_t, eval_t = DIRECT_KINDS[kind][language]
        question = rng.choice(eval_t if split == "eval" else train_t).format(x=subject)
        tasks.append(DirectTask(f"direct-{split}-{seed}-{len(tasks)}", language, kind, question, answer))
    return tasks


# ---------------------------------------------------------------- instruction-following tasks

CONSTRAINT_PHRASES = {
    # type -> (en train, en eval, zh train, zh eval); {v} is the constraint's parameter
    "json": ('Reply in JSON as {{"answer": ...}}.', 'Give the result as a JSON object with key "answer".',
             '请用JSON格式回答，形如{{"answer": ...}}。', '请以JSON对象给出结果，键为"answer"。'),
    "ends_with": ('End your reply with the word "{v}".', 'Your reply must finish with "{v}".',
                  '回答的最后一个词必须是“{v}”。', '请以“{v}”结尾。'),
    "starts_with": ('Start your reply with "{v}".', 'Begin your reply with "{v}".',
                    '回答必须以“{v}”开头。', '请用“{v}”开头。'),
    "no_thinking": ("Answer without thinking.", "Reply directly, without thinking.",
                    "不要思考，直接回答。", "请直接作答，不要思考。"),
    "max_words": ("Use at most {v} words.", "Reply in no more than {v} words.",
                  "回答不超过{v}个词。", "最多用{v}个词回答。"),
    "uppercase": ("Reply in capital letters only.", "Use only uppercase letters.",
                  "只用大写字母回答。", "回答全部使用大写字母。"),
    "lowercase": ("Reply in lowercase letters only.", "Use only lowercase letters.",
                  "只用小写字母回答。", "回答全部使用小写字母。"),
    "forbidden_words": ('Do not use the word "{v}".', 'Avoid the word "{v}".',
                        '不要使用“{v}”这个词。', '回答中不能出现“{v}”。'),
    "language": ("Answer in {v}.", "Please reply in {v}.", "请用{v}回答。", "回答请使用{v}。"),
}
LANGUAGE_NAMES = {"en": {"en": "English", "zh": "Chinese"}, "zh": {"en": "英文", "zh": "中文"}}
END_WORDS = ["done", "ok", "end", "thanks"]
START_WORDS = ["Answer:", "Result:", "Sure."]


def default_math_answer(answer: str, language: Language) -> str:
    """The answer sentence after the think block in the target format."""
    return f"答案是\\boxed{{{answer}}}。" if language == "zh" else f"The answer is \\boxed{{{answer}}}."


def instruction_tasks(n: int, seed: int, split: Split, languages: Iterable[Language] = ("en", "zh")) -> list[InstructionTask]:
    """Each task: a math or direct question plus one constraint, with a gold response meeting both."""
    from posttrain.chat import assemble_response  # the one place that knows the response layout

    rng = random.Random(f"instruction/{seed}/{split}")
    languages = list(languages)
    math_pool = math_problems(max(n, 50), seed + 17, split, languages, levels=(1, 2), word_share=0.0)
    direct_pool = [t for t in direct_tasks(max(n, 50), seed + 29, split, languages)]
    tasks: list[InstructionTask] = []
    types = list(CONSTRAINT_PHRASES)
    for i in range(n):
        language = languages[i % len(languages)]
        ctype = types[i % len(types)] if split == "eval" else rng.choice(types)
        # The content is think-mode arithmetic, which the world's model computes, so an honest
        # verdict (constraint met and the embedded answer right) is learnable; only `no_thinking`
        # also draws direct questions. Case rules need cased text: English problems.
        use_math = ctype != "no_thinking" or rng.random() < 0.5
        if use_math:
            if ctype in ("uppercase", "lowercase"):
                language = "en"
            p = next(q for q in rng.sample(math_pool, len(math_pool)) if q.language == language)
            question, answer, reasoning = p.question, p.answer, p.reasoning
        else:
            pool = [t for t in direct_pool if t.language == language]
            if ctype in ("uppercase", "lowercase"):
                pool = [t for t in pool if t.kind in ("uppercase", "reverse")] or pool
                pool = [t for t in pool if t.language == "en"] or [t for t in direct_pool if t.language == "en" and t.kind in ("uppercase", "reverse")]
            if ctype == "language":
                pool = [t for t in direct_pool if t.kind in ("next_day", "opposite", "number_words")]
            d = rng.choice(pool)
            question, answer, reasoning = d.question, d.answer, ""
            language = d.language if ctype in ("uppercase", "lowercase") else language
        constraint, answer_text = _constraint_and_answer(ctype, language, answer, use_math, rng, d if not use_math else None)
        variant = 1 if split == "eval" else 0
        en_t, en_e, zh_t, zh_e = CONSTRAINT_PHRASES[ctype]
        phrase = (zh_e if variant else zh_t) if language == "zh" else (en_e if variant else en_t)
        value = constraint.get("value", "")
        if ctype == "language":
            value = LANGUAGE_NAMES[language][constraint["language"]]
        phrase = phrase.format(v=value)
        thinking = use_math and ctype != "no_thinking"
        response = assemble_response(reasoning if thinking else "", answer_text)
        # A reply in another language states the answer translated: that is what it is checked against.
        tasks.append(InstructionTask(f"if-{split}-{seed}-{i}", language, f"{question} {phrase}", [constraint],
                                     response, thinking, answer_text if ctype == "language" and not use_math else answer,
                                     "math" if use_math else "direct"))
    return tasks


def _constraint_and_answer(ctype: str, language: Language, answer: str, is_math: bool,
                           rng: random.Random, direct: DirectTask | None) -> tuple[dict, str]:
    plain = default_math_answer(answer, language) if is_math else answer
    if ctype == "json":
        return {"type": "json", "keys": {"answer": "int" if is_math else "str"}}, json.dumps({"answer": int(answer) if is_math else answer}, ensure_ascii=False)
    if ctype == "ends_with":
        word = rng.choice(END_WORDS)
        return {"type": "ends_with", "value": word}, f"{plain} {word}"
    if ctype == "starts_with":
        word = rng.choice(START_WORDS)
        return {"type": "starts_with", "value": word}, f"{word} {plain}"
    if ctype == "no_thinking":
        return {"type": "no_thinking"}, plain
    if ctype == "max_words":
        return {"type": "max_words", "value": 2}, f"\\boxed{{{answer}}}"
    if ctype == "uppercase":
        return {"type": "uppercase"}, f"THE ANSWER IS {answer}." if is_math else answer.upper()
    if ctype == "lowercase":
        return {"type": "lowercase"}, plain.lower()
    if ctype == "forbidden_words":
        word = "答案" if language == "zh" else "answer"
        return {"type": "forbidden_words", "value": word, "words": [word]}, f"\\boxed{{{answer}}}"
    if ctype == "language":
        target: Language = rng.choice(["en", "zh"])
        translated = _translate_direct(direct, target) if direct else default_math_answer(answer, target)
        return {"type": "language", "language": target}, translated
    raise ValueError(f"unknown constraint type {ctype!r}")


def _translate_direct(task: DirectTask, target: Language) -> str:
    """The direct answer rendered in the target language (tables exist for both)."""
    if task.language == target:
        return task.answer
    if task.kind == "next_day":
        src, dst = (WEEKDAYS_ZH, WEEKDAYS_EN) if task.language == "zh" else (WEEKDAYS_EN, WEEKDAYS_ZH)
        return dst[src.index(task.answer)]
    if task.kind == "opposite":
        for en_a, en_b, zh_a, zh_b in OPPOSITES:
            table = {en_a: zh_a, en_b: zh_b, zh_a: en_a, zh_b: en_b}
            if task.answer in table:
                return table[task.answer]
    if task.kind == "number_words":
        n = _parse_number_words(task.answer, task.language)
        return number_words_en(n) if target == "en" else number_words_zh(n)
    return task.answer


def _parse_number_words(text: str, language: Language) -> int:
    for n in range(1000):
        if (number_words_en(n) if language == "en" else number_words_zh(n)) == text:
            return n
    raise ValueError(f"not a number in words: {text!r}")


# ---------------------------------------------------------------- overlap check


def normalise_prompt(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[\s\W_]+", " ", text).strip()


class OverlapError(AssertionError):
    pass


def check_no_overlap(eval_prompts: Iterable[str], train_prompts: Iterable[str], what: str = "") -> int:
    """Raise OverlapError listing eval prompts that also occur (normalised) in training data."""
    train = {normalise_prompt(p) for p in train_prompts}
    leaked = [p for p in eval_prompts if normalise_prompt(p) in train]
    if leaked:
        sample = "; ".join(repr(p) for p in leaked[:5])
        raise OverlapError(f"{len(leaked)} held-out prompts {what} also appear in training data, e.g. {sample}")
    return len(train)


def instruction_mode(row: dict) -> bool | None:
    """Mode switch for an instruction task's user turn: a `no_thinking` constraint says it in words."""
    constraints = row["constraints"]
    if isinstance(constraints, str):
        constraints = json.loads(constraints)
    if any(c.get("type") == "no_thinking" for c in constraints):
        return None
    return bool(row["thinking"])
