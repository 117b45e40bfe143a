"""Code tests in the forms they are published in, read into the judge's cases by a source's
`tests_from: {format: ...}` (posttrain.data.sources.SourceConfig); the judge is posttrain.rewards.code_judge.

Every form ends as a list of cases the judge runs (code_judge.test_problem): {"input", "output"}
(stdin/stdout), {"call", "expected"} (an expression the child evaluates, its value sent back and
compared in the parent with a literal the child never sees) or, where neither can say the test, a
forgeable assert program (rewards/code_cases.py), refused unless the source says
`forgeable_tests: run_in_child` (or dropped, counted, with `drop: [forgeable_tests]`).

- mbpp (`mbpp` full: text, code, test_list, test_setup_code, challenge_test_list; `sanitized`:
  prompt, code, test_imports, test_list): each `assert CALL == LITERAL` of test_list and
  challenge_test_list becomes a call case; test_imports and test_setup_code become the case's
  "setup", run after the candidate's code and before the call (they define what the call uses).
- humaneval (`openai_humaneval`, and EvalPlus's `humanevalplus`: prompt, canonical_solution, test,
  entry_point): each `assert candidate(ARGS) == LITERAL` in `check(candidate)` becomes a call of
  `entry_point(ARGS)`; EvalPlus's `inputs = [...]; results = [...]` loop over `assertion(candidate
  (*inp), exp, atol)` becomes one call per input (floats within 1e-6, or its atol). The prompt is
  each case's "prelude" (run before the candidate: its imports and helper functions).
- apps (`codeparrot/apps`, `BAAI/TACO`: question, solutions, input_output, starter_code): the
  `input_output` JSON's inputs and outputs, stdin/stdout cases; with `fn_name`, call cases
  `fn_name(*inputs[i])` (`Solution().fn_name(...)` when the starter code holds `class Solution`,
  LeetCode's form). Their expected output is usually the return value wrapped in a one-element
  list; their judge accepts the result equal to either, and so does this one (the case's "also"),
  tuples read as lists (JSON has none). Every case gets the imports their judge puts before each
  program (`APPS_PRELUDE`: typing's List, collections, math, heapq...; numpy left out). JSON's
  string dict keys are not turned back into ints, as their judge tries: a row that needs it fails
  its reference check in `data check` (posttrain.data.code_references).
- verifiable_coding (`PrimeIntellect/verifiable-coding-problems`: verification_info JSON with
  test_cases of type stdin_stdout or function_call): stdin_stdout as stdin/stdout cases,
  function_call (input: the argument list, output: as apps; both as JSON text in open-r1's copy) as
  call cases of its fn_name.

Assert conversion (mbpp, humaneval): `assert CALL == LIT` (either side, parenthesised, with a
message), `assert CALL is None / True / False` (judged as ==), `assert math.isclose(CALL, LIT,
rel_tol=.., abs_tol=..)`, `assert abs(CALL - LIT) < TOL` (abs_tol; < read as <=), bare `assert CALL`
and `assert not CALL` (the call `bool(CALL)`, expected True / False). LIT is a literal, or set /
frozenset / tuple / list / sorted of one, evaluated here, in the parent: `assert set(f(x)) ==
set([1, 2])` becomes the call `set(f(x))` and the value {1, 2}. The wrapper runs in the child, where
the candidate could rebind it; that buys nothing, as a forged result still has to equal a value the
child never saw. Anything else (!=, <, `in`, several comparisons, names bound inside `check`, loops)
is a forgeable case: the whole assert (humaneval: the whole `check`) run in the child.

Shown and held-out cases: a case is shown (not `hidden`) when the prompt shows it: `show: N` appends
the first N cases to the prompt (default 1 for mbpp, whose prompt does not name the function, else
0), and a case whose call (or stdin input and output) the prompt already holds is shown too
(HumanEval's docstring examples, APPS's examples). Every other case is held out and judged.

Prompts (`wrap: true`, the default): humaneval's code prompt goes in a ```python block after one
line asking for the whole function in a ```python block (the reward judges the reply's last
```python block, code_judge.extract_code; a reply that only continues the body has no function);
apps call-based rows get their starter code (or the function's name) appended. `max_tests: N` keeps
the first N cases (EvalPlus holds hundreds per row; the judge runs one child per case within a
20 s budget per reply).
"""
from __future__ import annotations

import ast
import builtins
import json
import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posttrain.data.files import DatasetError
from posttrain.data.transforms import RowRefused
from posttrain.config.yamlconfig import short

TestForm = Literal["mbpp", "humaneval", "apps", "verifiable_coding"]
ForgeablePolicy = Literal["refuse", "run_in_child"]
DEFAULT_SHOW = {"mbpp": 1}
# The columns each form needs (as named after `columns:`).
FORM_COLUMNS = {"mbpp": ("test_list",), "humaneval": ("test", "entry_point"), "apps": ("input_output",),
                "verifiable_coding": ("verification_info",)}
HUMANEVAL_ASK = "Complete the following Python function. Reply with the whole function, imports included, in one " \
                "```python code block."
# What APPS's and TACO's judge puts before every program it runs (numpy left out: the sandbox holds
# the standard library only); the apps and verifiable_coding forms give it to each case as "prelude".
APPS_PRELUDE = ("import sys\nimport time\nimport itertools\nfrom itertools import accumulate, product, permutations, "
                "combinations\nimport collections\nfrom collections import Counter, OrderedDict, deque, defaultdict, "
                "ChainMap\nfrom functools import lru_cache\nimport math\nfrom math import sqrt, sin, cos, tan, ceil, "
                "fabs, floor, gcd, exp, log, log2\nimport fractions\nfrom typing import List, Tuple\nimport random\n"
                "import heapq\nfrom heapq import *\n")
_WRAPPERS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "sorted": sorted}
_BUILTIN_NAMES = frozenset(dir(builtins))


class TestsFrom(BaseModel):
    """`tests_from:` on a code source: the published form its tests are in."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False   # not a pytest class

    format: TestForm
    show: int | None = Field(None, ge=0)         # cases appended to the prompt; default: mbpp 1, others 0
    wrap: bool = True                            # humaneval's ask + code block; apps' starter code
    max_tests: int | None = Field(None, ge=1)    # keep the first N cases


def check_source(source) -> None:
    """Config-time checks of a source's `tests_from` (SourceConfig's validator); sets `kind: code`."""
    if source.tests_from is None:
        return
    if source.kind not in (None, "code"):
        raise ValueError(f"`tests_from:` reads code tests; the source says `kind: {source.kind}`")
    source.kind = "code"


def check_role(role: str, source, prompt_role: bool) -> None:
    if source.tests_from is not None and not prompt_role:
        raise DatasetError(f"{source.label}: `tests_from:` reads code tests for prompt rows; role {role!r} holds none")


# ---------------------------------------------------------------- literals and calls


def _literal_text(value) -> str:
    """Python text for a JSON-like value (infinite floats as 1e999, which text and literal_eval read)."""
    if type(value) is float and not math.isfinite(value):
        return "float('nan')" if value != value else ("1e999" if value > 0 else "-1e999")
    if type(value) is list:
        return "[" + ", ".join(map(_literal_text, value)) + "]"
    if type(value) is dict:
        return "{" + ", ".join(f"{_literal_text(k)}: {_literal_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _parent_value(node: ast.AST) -> tuple[bool, object]:
    """(True, value) when `node` is a literal, or a builtin wrapper of one, computed here."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords \
            and node.func.id in _WRAPPERS and len(node.args) <= 1:
        ok, inner = _parent_value(node.args[0]) if node.args else (True, ())
        if ok:
            try:
                return True, _WRAPPERS[node.func.id](inner)
            except TypeError:
                pass
    return False, None


def _expected_text(node: ast.AST, value) -> str:
    try:
        ast.literal_eval(node)
        return ast.unparse(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return repr(set(value) if type(value) is frozenset else value)   # a set equals its frozenset


def _has_call(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        return ast.copy_location(ast.Name(self.names.get(node.id, node.id), node.ctx), node)


def _number(node: ast.AST) -> float | None:
    ok, value = _parent_value(node)
    return value if ok and type(value) in (int, float) and math.isfinite(value) and value >= 0 else None


def _sides(a: ast.AST, b: ast.AST) -> tuple[ast.AST, ast.AST, object] | None:
    """(call side, literal side, its value) of two operands, either order."""
    for call, lit in ((a, b), (b, a)):
        ok, value = _parent_value(lit)
        if ok and _has_call(call):
            return call, lit, value
    return None


def assert_case(expr: ast.AST) -> dict | None:
    """The call case an assert's test expression says, or None when it says no call and literal."""
    if isinstance(expr, ast.Call) and not expr.keywords[2:] and len(expr.args) == 2 and (
            ast.unparse(expr.func) in ("math.isclose", "isclose")):
        found = _sides(*expr.args)
        tols = {k.arg: _number(k.value) for k in expr.keywords}
        if found and set(tols) <= {"rel_tol", "abs_tol"} and None not in tols.values():
            return _case(found, {"rel_tol": 1e-09, **tols})
        return None
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        op, right = expr.ops[0], expr.comparators[0]
        left = expr.left
        if isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and ast.unparse(left.func) == "abs" \
                and len(left.args) == 1 and isinstance(left.args[0], ast.BinOp) and isinstance(left.args[0].op, ast.Sub):
            tol, found = _number(right), _sides(left.args[0].left, left.args[0].right)
            return _case(found, {"abs_tol": tol}) if found and tol is not None else None
        if isinstance(op, ast.Is) and not (isinstance(right, ast.Constant) and right.value in (None, True, False)):
            return None
        if isinstance(op, (ast.Eq, ast.Is)):
            found = _sides(left, right)
            return _case(found, {}) if found else None
        return None
    if isinstance(expr, (ast.Compare, ast.BoolOp)):
        return None
    negated = isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not)
    inner = expr.operand if negated else expr
    if not _has_call(inner):
        return None
    return {"call": f"bool({ast.unparse(inner)})", "expected": "False" if negated else "True"}


def _case(found, extra: dict) -> dict:
    call, lit, value = found
    return {"call": ast.unparse(call), "expected": _expected_text(lit, value), **extra}


def assert_to_case(text: str) -> dict:
    """The case one assert statement (dataset text) says: a call and its literal where it says one the
    judge takes, else a forgeable assert program. Raises SyntaxError on text that is not Python."""
    tree = ast.parse(text)
    stmt = tree.body[0] if len(tree.body) == 1 else None
    case = assert_case(stmt.test) if isinstance(stmt, ast.Assert) else None
    return case if case and _usable(case) else {"assert": text, "forgeable": True}


def _usable(case: dict) -> bool:
    from posttrain.rewards.code_judge import test_problem

    return test_problem(case) is None


def _free_names(text: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}


# ---------------------------------------------------------------- the forms


def _text_list(value, where: str, column: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DatasetError(f"{where}: column {column!r} must be a list of texts (got {short(value, 80)})")
    return value


def _mbpp(row: dict, where: str) -> list[tuple[dict, str]]:
    setup = "\n".join(_text_list(row.get("test_imports"), where, "test_imports") + [row.get("test_setup_code") or ""])
    out = []
    for column in ("test_list", "challenge_test_list"):
        for i, text in enumerate(_text_list(row.get(column), where, column)):
            try:
                case = assert_to_case(text)
            except (SyntaxError, ValueError) as exc:
                raise DatasetError(f"{where}: column {column!r} item {i} is not Python "
                                   f"({getattr(exc, 'msg', exc)})") from None
            case = {**case, "_text": text, **({"setup": setup.strip()} if setup.strip() else {})}
            out.append((case, f"{column!r} item {i}"))
    if not out:
        raise RowRefused(f"{where}: column 'test_list' holds no test", "no_tests")
    return out


def _evalplus(body: list, param: str) -> list[tuple[list, object, float]] | None:
    """EvalPlus's check: `inputs = [...]`, `results = [...]`, then a loop calling
    `assertion(candidate(*inp), exp, atol)`: (arguments, expected, atol) per input, or None."""
    if len(body) != 3 or not all(isinstance(s, ast.Assign) and len(s.targets) == 1 for s in body[:2]):
        return None
    named = {s.targets[0].id: s.value for s in body[:2] if isinstance(s.targets[0], ast.Name)}
    loop = body[2]
    if set(named) != {"inputs", "results"} or not isinstance(loop, ast.For) or len(loop.body) != 1:
        return None
    call = loop.body[0].value if isinstance(loop.body[0], ast.Expr) else None
    src = ast.unparse(call) if call is not None else ""
    found = re.fullmatch(rf"assertion\({param}\(\*(\w+)\), (\w+), (.+)\)", src)
    if not found or ast.unparse(loop.iter) not in ("enumerate(zip(inputs, results))", "zip(inputs, results)"):
        return None
    try:
        inputs, results = ast.literal_eval(named["inputs"]), ast.literal_eval(named["results"])
        atol = float(ast.literal_eval(found.group(3)))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if len(inputs) != len(results) or not all(isinstance(a, list) for a in inputs):
        return None
    return [(a, r, atol) for a, r in zip(inputs, results)]


def _floats(value) -> bool:
    return type(value) is float or (type(value) in (list, tuple) and any(_floats(v) for v in value))


def _humaneval(row: dict, where: str) -> list[tuple[dict, str]]:
    test, entry = row.get("test"), row.get("entry_point")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise DatasetError(f"{where}: column 'entry_point' must name the function (got {short(entry, 80)})")
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, TypeError):
        raise DatasetError(f"{where}: column 'test' is not Python") from None
    prelude = {"prelude": row["prompt"]} if isinstance(row.get("prompt"), str) else {}
    whole = {"assert": f"{test}\n\ncheck({entry})\n", "forgeable": True, **prelude}
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or len(check.args.args) != 1:
        return [(whole, "'test'")]
    param = check.args.args[0].arg
    body = [s for s in check.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    plus = _evalplus(body, param)
    if plus is not None:
        return [({"call": f"{entry}({', '.join(_literal_text(a) for a in args)})", "expected": _literal_text(exp),
                  **({"abs_tol": atol or 1e-6, "rel_tol": 1e-07} if atol or _floats(exp) else {}), **prelude},
                 f"'test' input {i}") for i, (args, exp, atol) in enumerate(plus)]
    module = "\n".join(ast.get_source_segment(test, n) or "" for n in tree.body if n is not check).strip()
    local = {n.id for n in ast.walk(check) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    out, rest = [], False
    for stmt in body:
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and stmt.test.value:
            continue   # `assert True, "This prints if this assert fails"`: says nothing
        source_text = ast.get_source_segment(test, stmt)
        case = assert_case(_Rename({param: entry}).visit(stmt.test)) if isinstance(stmt, ast.Assert) else None
        if case is None or not _usable(case) or _free_names(case["call"]) & local:
            rest = rest or not isinstance(stmt, ast.Pass)
            continue
        needs = _free_names(case["call"]) - {entry} - _BUILTIN_NAMES
        out.append(({**case, **prelude, "_text": source_text, **({"setup": module} if needs and module else {})},
                    f"'test' line {stmt.lineno}"))
    if rest:
        out.append((whole, "'test' (its `check` runs as a whole)"))
    return out


def _io_text(value, where: str, column: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n".join(value)
    if not isinstance(value, str):
        raise DatasetError(f"{where}: column {column!r}: a stdin/stdout test's input and output are text "
                           f"(got {short(value, 80)})")
    return value


def _call_case(target: str, args, output, where: str, column: str) -> dict:
    if not isinstance(args, list):
        raise DatasetError(f"{where}: column {column!r}: a function call's input is its argument list "
                           f"(got {short(args, 80)})")
    case = {"call": f"{target}({', '.join(map(_literal_text, args))})", "tuples_as_lists": True}
    if isinstance(output, list) and len(output) == 1:
        return {**case, "expected": _literal_text(output[0]), "also": [_literal_text(output)]}
    return {**case, "expected": _literal_text(output)}


def _target(fn_name, starter: str, where: str, column: str) -> str:
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise DatasetError(f"{where}: column {column!r}: fn_name {short(fn_name, 80)} is no Python name")
    return f"Solution().{fn_name}" if "class Solution" in (starter or "") else fn_name


def _json(value, where: str, column: str):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: column {column!r} is not valid JSON ({exc.msg})") from None
    return value


def _apps(row: dict, where: str) -> list[tuple[dict, str]]:
    data = _json(row.get("input_output"), where, "input_output")
    if not data:
        raise RowRefused(f"{where}: column 'input_output' is empty: no test", "no_tests")
    inputs, outputs = (data.get("inputs"), data.get("outputs")) if isinstance(data, dict) else (None, None)
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise DatasetError(f"{where}: column 'input_output' needs equally long, non-empty \"inputs\" and \"outputs\"")
    fn_name = data.get("fn_name")
    if fn_name:
        target = _target(fn_name, row.get("starter_code") or "", where, "input_output")
        return [(_call_case(target, i, o, where, "input_output"), f"'input_output' case {n}")
                for n, (i, o) in enumerate(zip(inputs, outputs))]
    return [({"input": _io_text(i, where, "input_output"), "output": _io_text(o, where, "input_output")},
             f"'input_output' case {n}") for n, (i, o) in enumerate(zip(inputs, outputs))]


def _verifiable(row: dict, where: str) -> list[tuple[dict, str]]:
    info = _json(row.get("verification_info"), where, "verification_info")
    cases = info.get("test_cases") if isinstance(info, dict) else None
    language = info.get("language", "python") if isinstance(info, dict) else "python"
    if language not in ("python", None):
        raise RowRefused(f"{where}: column 'verification_info' is for language {short(language, 40)}; the judge "
                         "runs Python", "no_tests")
    if not isinstance(cases, list) or not cases:
        raise RowRefused(f"{where}: column 'verification_info' holds no test_cases", "no_tests")
    out = []
    for n, case in enumerate(cases):
        kind = case.get("type") if isinstance(case, dict) else None
        column = f"'verification_info' test_cases item {n}"
        if kind == "function_call":
            args, output = case.get("input"), case.get("output")
            if isinstance(args, str):   # the argument list kept as JSON text: its output is too, if it parses
                args = _json(args, where, column)
                try:
                    output = json.loads(output) if isinstance(output, str) else output
                except json.JSONDecodeError:
                    pass
            target = _target(case.get("fn_name"), str(row.get("prompt") or ""), where, column)
            out.append((_call_case(target, args, output, where, column), column))
        elif kind in ("stdin_stdout", None):
            out.append(({"input": _io_text(case.get("input"), where, column),
                         "output": _io_text(case.get("output"), where, column)}, column))
        else:
            raise DatasetError(f"{where}: column {column}: test type {short(kind, 40)} (known: stdin_stdout, "
                               "function_call)")
    return out


FORMS = {"mbpp": _mbpp, "humaneval": _humaneval, "apps": _apps, "verifiable_coding": _verifiable}


# ---------------------------------------------------------------- rows


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _shows(prompt: str, case: dict) -> bool:
    """Whether the prompt already holds the case (its call, assert or stdin input and output)."""
    squashed = _squash(prompt)
    if case.get("_text") and _squash(case["_text"]) in squashed:
        return True
    if "call" in case:
        return _squash(case["call"]) in squashed
    if "assert" in case:
        return _squash(case["assert"]) in squashed
    inp, out = _squash(case["input"]), _squash(case["output"])
    return bool(out) and inp in squashed and out in squashed


def _example(case: dict) -> str:
    if case.get("_text"):
        return case["_text"].strip()
    if "call" in case:
        return f"assert {case['call']} == {case['expected']}"
    if "assert" in case:
        return case["assert"].strip()
    return f"Input:\n{case['input'].rstrip()}\nOutput:\n{case['output'].rstrip()}"


def _prompt(row: dict, spec: TestsFrom, cases: list[dict], where: str) -> str:
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DatasetError(f"{where}: a `tests_from` row needs its question as text in column 'prompt' (map yours "
                           "with `columns:`, e.g. {text: prompt} for MBPP, {question: prompt} for APPS / TACO)")
    if spec.wrap and spec.format == "humaneval":
        prompt = f"{HUMANEVAL_ASK}\n\n```python\n{prompt.rstrip()}\n```"
    elif spec.wrap and spec.format == "apps" and cases and "call" in cases[0]:
        starter = (row.get("starter_code") or "").strip()
        name = cases[0]["call"].split("(", 1)[0].removeprefix("Solution().")
        prompt += (f"\n\nUse this starter code:\n```python\n{starter}\n```" if starter
                   else f"\n\nWrite it as a Python function named `{name}`.")
    show = spec.show if spec.show is not None else DEFAULT_SHOW.get(spec.format, 0)
    if show:
        shown = "\n\n".join(_example(c) for c in cases[:show])
        prompt += f"\n\nYour code should pass {'this test' if min(show, len(cases)) == 1 else 'these tests'}:\n\n{shown}"
    return prompt


def apply(row: dict, source, where: str) -> None:
    """The row's `tests` read from its published form, its prompt as the model is to see it; forgeable
    cases refused unless the source accepts them."""
    spec: TestsFrom = source.tests_from
    if "tests" in row:
        raise DatasetError(f"{where}: the row has its own 'tests' column, which `tests_from` would replace: map it "
                           "elsewhere with `columns:`")
    missing = [c for c in FORM_COLUMNS[spec.format] if c not in row]
    if missing:
        raise DatasetError(f"{where}: `tests_from: {{format: {spec.format}}}` reads column {missing[0]!r}, which the "
                           f"row lacks (it has {', '.join(sorted(row))})")
    found = FORMS[spec.format](row, where)[:spec.max_tests]
    if spec.format in ("apps", "verifiable_coding"):
        found = [({**case, "prelude": APPS_PRELUDE}, origin) for case, origin in found]
    forged = [(case, origin) for case, origin in found if "assert" in case]
    if forged and source.forgeable_tests != "run_in_child":
        case, origin = forged[0]
        raise RowRefused(f"{where}: column {origin}: {short(case['assert'].strip(), 80)} is no call and literal the "
                         f"judge can compare outside the program ({len(forged)} such test(s) in the row); accept "
                         "them with `forgeable_tests: run_in_child` (they run in the child, where a reply can forge "
                         "their pass; data check and the stage alerts count them)", "forgeable_tests")
    from posttrain.rewards.code_judge import test_problem

    for case, origin in found:
        problem = test_problem(case)
        if problem:
            raise DatasetError(f"{where}: column {origin}: {problem}")
    cases = [case for case, _ in found]
    row["prompt"] = _prompt(row, spec, cases, where)
    row["tests"] = [{k: v for k, v in case.items() if k != "_text"} | ({} if _shows(row["prompt"], case) else
                                                                     {"hidden": True}) for case in cases]


def check_cases(tests: list, where: str, source) -> None:
    """A forgeable case in a row's own `tests` column that the source has not accepted (a function_call
    case, which would run as stdin, the judge refuses itself: code_cases.parts_problem)."""
    for i, test in enumerate(tests):
        if isinstance(test, dict) and "assert" in test and source.forgeable_tests != "run_in_child":
            raise RowRefused(f"{where}: column 'tests' item {i} is a forgeable assert program; accept such cases "
                             "with `forgeable_tests: run_in_child`", "forgeable_tests")


def forgeable_code_rows(rows: list[dict]) -> str | None:
    """What data check, a stage's alerts and the report card say about code rows holding forgeable
    cases (run in the child, where a reply can forge their pass)."""
    from posttrain.rewards.code_judge import tests_of
    from posttrain.rewards.code_cases import is_forgeable

    code = [r for r in rows if r.get("kind") == "code"]
    counts = []
    for r in code:
        try:
            counts.append(sum(map(is_forgeable, tests_of(r.get("tests")) or [])))
        except (ValueError, TypeError, RecursionError):
            counts.append(0)
    rows_with = sum(1 for n in counts if n)
    return (f"{rows_with} of {len(code)} code rows hold forgeable tests ({sum(counts)} assert programs run in the "
            "child, `forgeable_tests: run_in_child`): a reply can pass those without solving the task"
            ) if rows_with else None


def code_notes(rows: list[dict]) -> list[str]:
    """What `data check` says of a role's code rows beyond its sources' notes: rows that hold no test
    out (a policy special-casing the shown tests is paid there)."""
    from posttrain.rewards import unguarded_code_rows

    return [n for n in [unguarded_code_rows(rows)] if n]


def source_note(role: str, source, rows: list[dict]) -> str | None:
    note = forgeable_code_rows(rows) if source.forgeable_tests == "run_in_child" else None
    return f"role {role!r}: {source.label}: {note}" if note else None
