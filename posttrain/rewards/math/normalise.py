"""LaTeX / plain-text normalisation of an answer before parsing: unicode, spacing and sizing
commands, ``\\text{}`` wrappers, fraction spellings, degrees, percent, thousands separators, unit
words on an allowlist (dropped; any other word after a value refuses the answer), value words (read
with the number), and the folding of plain-text answers."""
from __future__ import annotations

import re
import unicodedata

from posttrain.rewards.math.extract import TRAIL_PUNCT, match_brace
from posttrain.rewards.math.limits import MAX_CLEAN, MAX_RAW_ANSWER, TooExpensive, Unparsable

_UNICODE_MAP = {
    "\u2212": "-", "\u2013": "-", "\u2014": "-", "\ufe63": "-", "\uff0d": "-", "\u2010": "-",
    "\u2011": "-", "\u00d7": r"\times ", "\u22c5": r"\cdot ", "\u00b7": r"\cdot ", "\u2217": "*",
    "\u00f7": r"\div ", "\u03c0": r"\pi ", "\u221e": r"\infty ", "\u221a": r"\sqrt", "\u00b0": r"^\circ",
    "\u2103": r"^\circ C", "\u2109": r"^\circ F",
    "\u2264": r"\le ", "\u2265": r"\ge ", "\u2260": r"\ne ", "\u222a": r"\cup ", "\u2229": r"\cap ",
    "\u00b1": r"\pm ", "\u2213": r"\mp ", "\u2208": r"\in ", "\u2205": r"\emptyset ",
    "\u00bd": r"\frac{1}{2}", "\u2153": r"\frac{1}{3}", "\u2154": r"\frac{2}{3}", "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}", "\u211d": r"\mathbb{R}", "\u3002": ".", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u3000": " ", "\u2032": "'", "\u03b8": r"\theta ", "\u03b1": r"\alpha ",
    "\u03b2": r"\beta ",
}
_UNICODE_RE = re.compile("|".join(re.escape(k) for k in _UNICODE_MAP))
# A run of superscripts is one exponent (2¹⁰ is 2^{10}) and a run of subscripts one subscript
# (10₂ is 10_{2}, not the digits 102): mapped before NFKC, which would flatten both into the line.
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱ", "0123456789+-=()ni"))
_SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₔₕₖₗₘₙₚₛₜᵢⱼᵣᵤᵥ", "0123456789+-=()aeoxəhklmnpstijruv"))
_SUPER_RUN_RE = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")
_SUB_RUN_RE = re.compile("[" + "".join(_SUBSCRIPTS) + "]+")

_WRAPPERS = (
    "text", "textbf", "textit", "textrm", "textsf", "texttt", "textnormal", "mathrm", "mathbf",
    "mathit", "mathsf", "mathtt", "mathnormal", "mbox", "hbox", "operatorname", "boldsymbol", "bm",
    "emph", "boxed", "fbox", "displaystyle", "mathbb", "mathcal", "pmb",
)
_WRAPPER_RE = re.compile(r"\\(?:" + "|".join(_WRAPPERS) + r")\s*\{")
_TEXTISH = r"\\(?:text|textrm|textnormal|textit|textbf|mathrm|mbox|hbox|textsf)\s*"
# \text{ or } / \text{and} between values: a list separator
_TEXT_OR_RE = re.compile(_TEXTISH + r"\{\s*(?:or|and|,)\s*\}")
# \text{ cm}, \mathrm{~m}^2 after a number: a unit, dropped (unless its words change the value)
_TEXT_UNIT_RE = re.compile(
    r"(?<=[\d}.)])\s*" + _TEXTISH + r"\{\s*(?P<u>[A-Za-z\u4e00-\u9fff][^{}\d]*)\}"
    r"(?P<e>\s*\^\s*(?:\{[^{}]*\}|[^\s{}]))?"
)
# Words after a number that change its value: read with the number, never dropped as a unit
# (5 thousand is 5000, 3 halves is 3/2).  Only leading words count: "5 cm squared" is 5 cm².
# A number name (hundred, thousand, million; k) is a power of ten: "5 hundred thousand" is written
# 5*10^{5}, a number in scientific notation, not a product to work out; the other words are
# operations (5 squared is 5^2, an unevaluated expression for the gold 25).
_VALUE_WORDS: dict[str, str | int] = {
    **dict.fromkeys(("hundred", "hundreds"), 2), **dict.fromkeys(("thousand", "thousands"), 3),
    **dict.fromkeys(("million", "millions"), 6), **dict.fromkeys(("billion", "billions"), 9),
    **dict.fromkeys(("trillion", "trillions"), 12), **dict.fromkeys(("dozen", "dozens"), "*12"),
    "squared": "^2", "cubed": "^3", "factorial": "!",
    **dict.fromkeys(("half", "halves"), "/2"), **dict.fromkeys(("third", "thirds"), "/3"),
    **dict.fromkeys(("quarter", "quarters", "fourth", "fourths"), "/4"),
    **{w: f"/{d}" for d, ws in ((5, ("fifth", "fifths")), (6, ("sixth", "sixths")), (7, ("seventh", "sevenths")),
                                (8, ("eighth", "eighths")), (9, ("ninth", "ninths")), (10, ("tenth", "tenths")),
                                (100, ("hundredth", "hundredths")), (1000, ("thousandth", "thousandths")))
       for w in ws},
}
# in \text{} a lone k is the thousands prefix (5\text{k}); in math mode "5 k" stays the product 5k
_TEXT_VALUE_WORDS = {**_VALUE_WORDS, "k": 3}
# The units a value may carry (dropped: the unit is not compared).  Only these: any other word
# after a value (85 maybe, 85 wrong, 85 apples, 85左右) refuses the answer, since a list of hedges
# could never be complete.  Single letters are matched as written: K is kelvin, k the thousands
# prefix, and a lower-case letter other than these (2 x) is a variable.
_UNITS = frozenset("""
    cm mm km dm nm um meter meters metre metres centimeter centimeters centimetre centimetres millimeter
    millimeters millimetre millimetres kilometer kilometers kilometre kilometres micrometer micrometers
    nanometer nanometers in inch inches ft foot feet yd yds yard yards mi mile miles
    mg kg gram grams milligram milligrams kilogram kilograms ton tons tonne tonnes lb lbs pound pounds
    oz ounce ounces ml liter liters litre litres milliliter milliliters millilitre millilitres gal gallon
    gallons quart quarts pint pints cup cups tablespoon tablespoons teaspoon teaspoons tbsp tsp cc
    sec secs second seconds ms millisecond milliseconds min mins minute minutes hr hrs hour hours day days
    week weeks month months year years yr yrs decade decades century centuries am pm
    mph kph kmh fps rpm deg degree degrees rad radian radians kelvin celsius fahrenheit
    newton newtons joule joules kj watt watts kw kwh volt volts amp amps ampere amperes ohm ohms hz hertz
    pa pascal pascals kpa atm cal calorie calories kcal mol mole moles byte bytes kb mb gb tb bit bits
    acre acres hectare hectares ha dollar dollars cent cents euro euros yuan yen rupee rupees rs usd eur
    rmb cny penny pennies nickel nickels dime dimes unit units people person persons
""".split())
_LETTER_UNITS = frozenset("mglshKNJWVL")
# words that qualify a unit next to it (5 cm squared, 3 square meters, 6 meters per second)
_UNIT_MODIFIERS = frozenset(("per", "square", "squared", "sq", "cubic", "cubed"))
# measure words and units after a number in Chinese (85个, 12岁, 3平方米); 千 (thousand), 左右
# (about), 以上 (or more) are not among them
_CJK_UNITS = frozenset("""
    个 只 人 名 位 本 支 枝 张 条 辆 头 匹 棵 朵 颗 件 双 盒 箱 瓶 袋 页 道 题 次 块 元 角 分 毛 户 组 套 把
    根 片 粒 座 间 台 部 份 首 层 米 厘米 毫米 分米 千米 公里 克 千克 公斤 斤 吨 升 毫升 公顷 亩 秒 秒钟
    分钟 小时 时 天 日 周 星期 月 年 岁 度 平方米 平方厘米 平方分米 平方千米 平方公里 立方米 立方厘米 立方分米
""".split())


def _is_unit(word: str) -> bool:
    return word in _LETTER_UNITS if len(word) == 1 else word.lower() in _UNITS


def _unit_suffix(words: list[str], value_words: dict[str, str | int]) -> str:
    """What the words after a number leave of it: an operator suffix for leading value words
    ("hundred thousand" -> "*10^{5}", "squared" -> "^2"), then nothing for the units on the
    allowlist; Unparsable when any other word follows."""
    suffix, tens, k = "", 0, 0
    for w in words:
        w = w if len(w) == 1 else w.lower()  # k is kilo; K is kelvin, a unit
        op = value_words.get(w)
        if op is None:
            break
        if isinstance(op, int):
            tens += op
        else:
            suffix += (f"*10^{{{tens}}}" if tens else "") + op
            tens = 0
        k += 1
    suffix += f"*10^{{{tens}}}" if tens else ""
    rest = words[k:]
    if rest and not (any(_is_unit(w) for w in rest)
                     and all(_is_unit(w) or w.lower() in _UNIT_MODIFIERS for w in rest)):
        raise Unparsable("words after the value that are not units")
    return suffix


def _cjk_unit(text: str) -> None:
    if re.sub(r"\s+", "", text) not in _CJK_UNITS:
        raise Unparsable("words after the value that are not units")


_UNIT_TEXT_RE = re.compile(r"[A-Za-z]+(?:[\s/\-]+[A-Za-z]+)*")
_UNIT_WRAP_RE = re.compile(r"\\(?:text|mathrm|mbox|rm|textrm)\s*\{([^{}]*)\}|[{}~]|\\[,;:! ]")
_UNIT_POWER_RE = re.compile(r"\s*(?:\^\s*\{?\s*[23]\s*\}?|[²³])\s*$")


def is_unit_text(text: str) -> bool:
    """Whether text (after a value, outside its box) is nothing but a unit the in-box allowlist drops:
    `cm`, `square meters`, `\\text{ km}^2`, `个`; never value words (`thousand`), hedges or other words."""
    text = _UNIT_POWER_RE.sub("", _UNIT_WRAP_RE.sub(lambda m: f" {m.group(1) or ''} ", text)).strip()
    if not text:
        return False
    if CJK_RE.search(text):
        return re.sub(r"\s+", "", text) in _CJK_UNITS
    if not _UNIT_TEXT_RE.fullmatch(text):
        return False
    try:
        _unit_suffix(re.split(r"[\s/\-]+", text), {})   # no value words: every word a unit or its modifier
    except Unparsable:
        return False
    return True


def _text_unit(m: re.Match) -> str:
    """\\text{...} after a number: a unit on the allowlist (to the power 2 or 3) is dropped, value
    words are read; a lone letter that is neither (2\\mathrm{i}) stays in the expression."""
    u, power = m.group("u").strip(), m.group("e")
    if len(u) == 1 and u.isascii() and not _is_unit(u) and u not in _TEXT_VALUE_WORDS:
        return " " + u + (power or "")
    if power and re.sub(r"[\s^{}]", "", power) not in ("2", "3"):
        raise Unparsable("a unit to a power other than 2 or 3")
    if CJK_RE.search(u):
        _cjk_unit(u)
        return ""
    if not _UNIT_TEXT_RE.fullmatch(u):
        raise Unparsable("words after the value that are not units")
    return _unit_suffix(re.split(r"[\s/\-]+", u), _TEXT_VALUE_WORDS)


_SPACING_RE = re.compile(r"\\[,;:!>]|\\(?:thinspace|negthinspace|medspace|thickspace)(?![A-Za-z])")
_WIDE_SPACE_RE = re.compile(r"\\q?quad(?![A-Za-z])|\\enspace(?![A-Za-z])|\\hspace\*?\{[^{}]*\}|\\ |~")
_SIZING_RE = re.compile(
    r"\\(?:left|right)\s*\."
    r"|\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|bigm|big|Big|bigg|Bigg)(?![A-Za-z])"
)
# degrees after a value (30^\circ, 30°C): dropped; a \circ before anything is not a degree sign
_DEGREE_RE = re.compile(
    r"(?<=[\w}.)\]])\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\\circ(?![A-Za-z])|\^?\s*\\degree(?![A-Za-z]))"
    r"(?:\s*(?:\\(?:text|mathrm)\s*\{\s*[CF]\s*\}|[CF](?![A-Za-z])))?"
)
PERCENT_RE = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\}|\\percent(?![A-Za-z]))\s*$")
# "percent" / "per cent" in words is the percent sign (so that it is never a unit word, "cent")
_PERCENT_WORD_RE = re.compile(r"(?:" + _TEXTISH + r"\{\s*per\s*cent\s*\}|(?<![A-Za-z])per\s*cent(?![A-Za-z]))")
_FRAC_NAMES_RE = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_BINOM_NAMES_RE = re.compile(r"\\[dt]binom(?![A-Za-z])")
_SINGLE_ARG = r"(\d|[A-Za-z]|\\[A-Za-z]+)"
_FRAC_TT_RE = re.compile(r"\\(frac|binom)\s*" + _SINGLE_ARG + r"\s*" + _SINGLE_ARG)
_FRAC_TG_RE = re.compile(r"\\(frac|binom)\s*" + _SINGLE_ARG + r"\s*\{")
_FRAC_GT_RE = re.compile(r"\\(frac|binom)\s*(\{(?:[^{}]|\{[^{}]*\})*\})\s*" + _SINGLE_ARG)
_SQRT_T_RE = re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z])|\\[A-Za-z]+)")
_MIXED_RE = re.compile(r"(?<![\d.}^_)\]a-zA-Z])(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")
THOUSANDS_WHOLE_RE = re.compile(r"^\$?\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*\$?\.?$")
_THOUSANDS_RE = re.compile(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d])")
_THOUSANDS_SPACE_RE = re.compile(r"(?<![\d.])(\d{1,3})((?: \d{3})+)(?![\d.])")
_OR_WORD_RE = re.compile(r"\s+(?:or|and)\s+")
_MATH_WORDS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "exp", "pi", "sqrt", "inf", "infty", "oo", "lim", "mod", "gcd", "lcm", "max", "min",
}
_UNIT_WORDS_RE = re.compile(
    r"^(?P<v>.*?[\d}\)])\s+(?P<u>[A-Za-z]+(?:[\s/\-]+[A-Za-z]+)*)\s*(?:\^\s*\{?\s*[23]\s*\}?)?$"
)
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_RE = re.compile("[" + CJK + "]")
_CJK_UNIT_RE = re.compile(r"^(?P<v>.*?[\d}\)])\s*(?P<u>[" + CJK + r"][" + CJK + r"\s]*)$")


def _unwrap(s: str) -> str:
    """\\text{X} -> X for the wrapper commands (balanced braces); unbalanced -> Unparsable."""
    for _ in range(200):
        m = _WRAPPER_RE.search(s)
        if m is None:
            return s
        j = match_brace(s, m.end() - 1)
        if j < 0:
            raise Unparsable("unbalanced braces")
        inner = s[m.end() : j]
        name = s[m.start() + 1 : m.end() - 1].strip()
        if name.startswith("mathbb") and inner.strip() == "R":
            inner = "\\Reals "
        s = s[: m.start()] + " " + inner + " " + s[j + 1 :]
    raise TooExpensive("too many wrappers")


def check_balanced(s: str) -> int:
    """Max nesting depth; Unparsable when brackets/braces do not balance."""
    depth = 0
    brace = 0
    mx = 0
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == "\\" and i + 1 < n:
            nx = s[i + 1]
            if nx == "{":
                depth += 1
            elif nx == "}":
                depth -= 1
            i += 2
            if depth < 0:
                raise Unparsable("unbalanced brackets")
            mx = max(mx, depth)
            continue
        if ch == "{":
            brace += 1
            depth += 1
        elif ch == "}":
            brace -= 1
            depth -= 1
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if depth < 0 or brace < 0:
            raise Unparsable("unbalanced brackets")
        if depth > mx:
            mx = depth
        i += 1
    if depth != 0 or brace != 0:
        raise Unparsable("unbalanced brackets")
    return mx


def _strip_end(s: str) -> str:
    """s without its closing punctuation; Unparsable when that holds a question mark or an
    ellipsis ("5?", "5..."): a doubt or a value left open (a lone period ends a sentence)."""
    kept = s.rstrip(TRAIL_PUNCT)
    tail = s[len(kept):]
    if "?" in tail or ".." in tail:
        raise Unparsable("an answer ending in doubt")
    return kept.strip()


def clean_answer(s: str, thousands: bool) -> tuple[str, bool]:
    """Normalise LaTeX / plain text.  Returns (string, percent flag)."""
    if len(s) > MAX_RAW_ANSWER:
        raise TooExpensive("answer too long")
    s = _SUPER_RUN_RE.sub(lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group(0)) + "}", s)
    s = _SUB_RUN_RE.sub(lambda m: "_{" + "".join(_SUBSCRIPTS[c] for c in m.group(0)) + "}", s)
    s = _UNICODE_RE.sub(lambda m: _UNICODE_MAP[m.group(0)], s)
    s = unicodedata.normalize("NFKC", s)
    s = s.replace("\\\\", "\x01")  # LaTeX row break (matrices)
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"\\[()\[\]]", " ", s)
    s = re.sub(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits)(?![A-Za-z])", " ", s)
    s = _SIZING_RE.sub("", s)
    s = re.sub(r"\\l(floor|ceil)(?![A-Za-z])", r"\\\1(", s)
    s = re.sub(r"\\r(?:floor|ceil)(?![A-Za-z])", ")", s)
    s = _SPACING_RE.sub("", s)
    s = _WIDE_SPACE_RE.sub(" ", s)
    s = s.replace("{,}", "").replace("\\lbrace", "\\{").replace("\\rbrace", "\\}")
    s = _DEGREE_RE.sub("", s)
    s = _FRAC_NAMES_RE.sub(r"\\frac", s)
    s = _BINOM_NAMES_RE.sub(r"\\binom", s)
    s = _TEXT_OR_RE.sub(",", s)
    s = _PERCENT_WORD_RE.sub(r"\\%", s)
    s = _TEXT_UNIT_RE.sub(_text_unit, s)
    # percent (before unwrapping, \text{\%})
    s = _strip_end(s)
    pct = False
    m = PERCENT_RE.search(s)
    if m:
        pct = True
        s = s[: m.start()]
    s = _unwrap(s)
    s = re.sub(r"\\(?:mathbb|mathbf)\s*R(?![A-Za-z])", r"\\Reals ", s)
    s = s.replace("\\!", "")
    s = _strip_end(re.sub(r"\s+", " ", s))
    if not pct:
        m = PERCENT_RE.search(s)
        if m:
            pct = True
            s = s[: m.start()].strip()
    s = _OR_WORD_RE.sub(", ", s) if re.search(r"\d|\\", s) else s
    if thousands:
        s = _THOUSANDS_RE.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), s)
        s = _THOUSANDS_SPACE_RE.sub(lambda m: m.group(1) + m.group(2).replace(" ", ""), s)
    # \frac12, \frac1{2}, \frac{1}2, \sqrt2
    s = _FRAC_TT_RE.sub(r"\\\1{\2}{\3}", s)
    s = _FRAC_TG_RE.sub(r"\\\1{\2}{", s)
    s = _FRAC_GT_RE.sub(r"\\\1\2{\3}", s)
    s = _SQRT_T_RE.sub(r"\\sqrt{\1}", s)
    s = _MIXED_RE.sub(r"(\1+\\frac{\2}{\3})", s)
    if len(s) > MAX_CLEAN:
        raise TooExpensive("answer too long")
    return s, pct


def strip_units(s: str) -> str:
    """Drop the units after a number (cm, meters per second, 个) and read the value words with it
    (5 thousand -> 5*10^{3}).  Other words there refuse the answer; one- and two-letter words
    (2 x, 3 ab) and math words (2 sin x) are left to the parser as products."""
    m = _UNIT_WORDS_RE.match(s)
    if m:
        words = [w for w in re.split(r"[\s/\-]+", m.group("u")) if w]
        if any(w.lower() in _MATH_WORDS and not _is_unit(w) for w in words):
            return s
        try:
            return m.group("v").strip() + _unit_suffix(words, _VALUE_WORDS)
        except Unparsable:
            if all(len(w) <= 2 for w in words):
                return s
            raise
    m = _CJK_UNIT_RE.match(s)
    if m:
        _cjk_unit(m.group("u"))
        return m.group("v").strip()
    return s


def normalise_text(s: str) -> str:
    """A plain-text answer compared case-, space- and punctuation-free; "(B)" is "b"."""
    s = s.lower()
    s = re.sub(r"[\s'\".,!?;:。，！？、]+", "", s)
    if len(s) == 3 and s[0] == "(" and s[2] == ")":
        s = s[1]
    return s


_SHORT_WORDS = {"no", "ok", "na", "up", "on", "at", "by", "to", "it", "is", "an", "am", "pm"}


def is_wordy(s: str) -> bool:
    """Plain words (not a product of variables like "xy" or "AB")."""
    words = re.findall(r"[A-Za-z]+", s)
    content = [w for w in words if w.lower() not in _MATH_WORDS]
    if not content:
        return False
    if len(words) > 1 and any(len(w) >= 2 for w in content):
        return True
    return any(len(w) >= 3 or w.lower() in _SHORT_WORDS for w in content)
