"""The README's dataset table is config a user copies: every source line in it validates as what
its role column says it is (a source, or an evaluation suite), and every link in README and docs/
points at a file that exists."""
import re

import pytest
import yaml

from conftest import ROOT
from posttrain.config.pipeline import EvalSuiteConfig
from posttrain.data.sources import SourceConfig

README = (ROOT / "README.md").read_text()


def _table_rows() -> list[tuple[str, str, str]]:
    table = README[README.index("| dataset | role | source line |"):].split("\n\n")[0]
    rows = []
    for line in table.splitlines()[2:]:
        dataset, role, source = (cell.strip() for cell in line.strip("|").split(" | ", 2))
        rows.append((dataset, role, re.match(r"`([^`]+)`", source).group(1)))
    return rows


@pytest.mark.parametrize("dataset, role, line", _table_rows(), ids=lambda v: v if len(v) < 40 else None)
def test_each_source_line_of_the_dataset_table_validates(dataset, role, line):
    value = yaml.safe_load(line.replace("...", "data/file.parquet"))
    if role == "eval suite":
        EvalSuiteConfig.model_validate(value)
    else:
        SourceConfig.model_validate(value)


def test_the_example_config_of_the_guide_validates():
    section = README[README.index("## Post-train your own model and data"):]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    from posttrain.config.pipeline import BaseModelConfig

    BaseModelConfig.model_validate(example["base"])
    for role, sources in example["data"].items():
        for source in sources if isinstance(sources, list) else [sources]:
            (EvalSuiteConfig if role == "eval" else SourceConfig).model_validate(source)


def test_the_table_names_every_dataset_the_issue_lists():
    datasets = " ".join(d for d, _, _ in _table_rows())
    for name in ("GSM8K", "MATH", "NuminaMath", "OpenR1", "IFEval", "RLVR-IFeval", "MBPP", "HumanEval", "APPS",
                 "OpenThoughts", "UltraFeedback", "s1K", "ShareGPT"):
        assert name in datasets, name


def test_links_in_the_readme_and_docs_point_at_files_that_exist():
    broken = []
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, broken
