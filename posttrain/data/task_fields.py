"""The task fields of a prompt row, by task kind (math answer, instruction constraints, code tests,
tool setup): read from the source's columns and checked, or refused with the row and column named."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from posttrain.agents.episodes import tool_fields
from posttrain.data import code_tests as test_forms
from posttrain.data import transforms
from posttrain.data.files import DatasetError

if TYPE_CHECKING:
    from posttrain.data.sources import SourceConfig



def task_fields(kind: str, row: dict, where: str, source: SourceConfig) -> dict:
    """What each kind's verifier needs, checked now so that no reward meets bad data mid-training."""
    if kind in ("math", "direct"):
        answer = row.get("answer")
        if answer is None or isinstance(answer, (dict, list, bool)) or not str(answer).strip():
            raise DatasetError(f"{where}: column 'answer' is missing or empty (a {kind} row needs its gold answer)")
        answer = str(answer)
        if kind == "math":
            if source.answer_from is not None:
                column = f"'answer' (taken from {source.answer_from.column!r} by `answer_from`)"
                file_column = source.answer_from.column
            else:
                column = transforms.origin("answer", source.columns)
                file_column = next((k for k, v in source.columns.items() if v == "answer"), "answer")
            transforms.check_math_gold(answer, where, column, file_column, source.word_answers,
                                       renamed=file_column != "answer")
        return {"answer": answer}
    if kind == "open":
        # Training pays the reward model; constraints (and an answer), where given, are the independent
        # check evaluation gates on (an evaluation suite of this kind needs them: posttrain.data.prepared).
        reference = row.get("answer")
        checks = {"constraints": _constraints(row, where)} if row.get("constraints") else {}
        return {**checks, **({"answer": str(reference)} if reference else {})}
    if kind == "instruction":
        # A reference answer, where the data has one, tells the verifier what counts as content.
        reference = row.get("answer")
        from posttrain.rewards.ifeval_forms import (
            ifeval_field,  # IFEval's ids, for its own four accuracies
        )

        return {"constraints": _constraints(row, where), **ifeval_field(row), **({"answer": str(reference)} if reference else {})}
    if kind == "tool":
        return tool_fields(row, lambda problem: DatasetError(f"{where}: {problem}"))
    return {"tests": _code_tests(row.get("tests"), where, source)}


def _code_tests(value, where: str, source: SourceConfig) -> list:
    """A code row's test cases, each one the judge can run (posttrain.rewards.code_judge.test_problem):
    a row none of whose tests the sandbox can judge would pay 0 for every reply, and a case with a
    non-literal `expected` could only be compared through the candidate's own objects."""
    from posttrain.rewards.code_judge import test_problem

    tests = _json_list(value, where, "tests", "test cases (a code row)")
    for i, test in enumerate(tests):
        problem = test_problem(test)
        if problem:
            raise DatasetError(f"{where}: column 'tests' item {i}: {problem}")
    test_forms.check_cases(tests, where, source)
    return tests


def _json_list(value, where: str, column: str, what: str) -> list:
    """A non-empty list, given as such or as its JSON text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: column {column!r} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: column {column!r} must be a non-empty list of {what}")
    return value


def _constraints(row: dict, where: str) -> list[dict]:
    import importlib

    # (posttrain.rewards also has a reward function named `instruction`: import the module itself)
    verifier = importlib.import_module("posttrain.rewards.instruction")

    if "instruction_id_list" in row and "constraints" not in row:   # IFEval / Tulu-3 form
        try:
            return verifier.constraints_from_ifeval(row["instruction_id_list"], row.get("kwargs") or [])
        except ValueError as exc:
            raise DatasetError(f"{where}: column 'instruction_id_list': {exc}") from None
    if "ground_truth" in row and "constraints" not in row:   # RLVR-IFeval form (posttrain.rewards.ifeval_forms)
        try:
            return importlib.import_module("posttrain.rewards.ifeval_forms").constraints_from_ground_truth(row["ground_truth"])
        except ValueError as exc:
            raise DatasetError(f"{where}: column 'ground_truth': {exc}") from None
    value = _json_list(row.get("constraints"), where, "constraints", "constraints (an instruction row)")
    try:
        verifier.validate_constraints(value)
    except ValueError as exc:
        raise DatasetError(f"{where}: column 'constraints': {exc}") from None
    return value


# ---------------------------------------------------------------- a role: sources mixed by weight
