"""The shape a newcomer relies on: every Python file says what it is for, no module of the product
grows past ~600 lines, the building blocks under posttrain/ know no orchestration, the chain reads
on one screen, and nothing points outside the repository."""
import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 620


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.split() if (ROOT / line).is_file()]


def test_every_python_file_opens_with_a_docstring():
    missing = [str(p.relative_to(ROOT)) for p in _tracked("*.py") if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, f"no module docstring: {missing}"


def test_no_product_module_is_longer_than_about_600_lines():
    product = _tracked("posttrain/*.py", "flows/*.py", "stages/*.py", "bench/*.py", "scripts/*.py")
    long = {str(p.relative_to(ROOT)): n for p in product if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules: {long}"


# The command-line front: `posttrain run` and `posttrain resume` hand over to flows/ (imported
# when those commands run); every other command uses the building blocks only.
COMMAND_LINE_FRONT = "posttrain/cli.py"


def test_building_blocks_import_no_orchestration():
    """posttrain/ and stages/ import neither Prefect nor flows/: the orchestration layer is flows/."""
    pattern = re.compile(r"^\s*(from|import)\s+(prefect|flows)\b", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for p in _tracked("posttrain/*.py", "stages/*.py")
                 if str(p.relative_to(ROOT)) != COMMAND_LINE_FRONT and pattern.search(p.read_text())]
    assert not offenders, f"orchestration imported by building blocks: {offenders}"


@pytest.mark.parametrize("suffix", ["*.py", "*.md", "*.yaml", "*.toml", "Makefile", "*.cfg"])
def test_nothing_points_outside_the_repository(suffix):
    folder = "shared"  # the lab's notes beside a clone; spelled apart so this file does not match itself
    pattern = re.compile(r"(?<![\w.-])(\.\./)+" + folder + r"/|(?<![\w/.-])" + folder + r"/docs")
    offenders = [str(p.relative_to(ROOT)) for p in _tracked(suffix, f"**/{suffix}")
                 if pattern.search(p.read_text(errors="replace"))]
    assert not offenders, f"references to a folder a clone does not have: {offenders}"


def test_the_chain_reads_on_one_screen():
    """flows/pipeline.py's loop names the steps of the chain and stays short."""
    tree = ast.parse((ROOT / "flows" / "pipeline.py").read_text())
    chain = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_chain")
    assert chain.end_lineno - chain.lineno + 1 <= 40
    called = {n.func.attr for n in ast.walk(chain) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert {"prepare_data", "evaluate_base", "train", "evaluate", "judge", "register", "record", "finish"} <= called


def test_every_stage_of_the_chain_has_a_recipe_and_the_embedded_pools_use_its_names():
    """STAGE_TABLE is the one stage list: each name has stages/<name>.py (run, STAGE_VERSION), and
    the embedded world's pool shares are keyed by those names (no second naming of the stages)."""
    import importlib

    from posttrain.config.pipeline import STAGES, PipelineConfig
    from posttrain.world.build import POOL_SHARES

    for name in STAGES:
        recipe = importlib.import_module(f"stages.{name}")
        assert callable(recipe.run) and isinstance(recipe.STAGE_VERSION, str), name
    assert set(PipelineConfig().stages.model_dump()) == set(STAGES)
    assert set(POOL_SHARES) <= set(STAGES)
