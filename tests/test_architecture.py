"""The shape of the code (docs/architecture.md): flows orchestrate, stages are recipes, posttrain/
holds the building blocks in packages by concern; TRL and transformers are extended only through
their public points; no module grows past 600 lines; no import cycle between modules."""
import ast
import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600
# The embedded world is built by the `posttrain world` command and by the chain's data step, and
# read by nothing else: a pipeline on a user's own model and data never loads it.
WORLD_READERS = {"posttrain.cli", "flows.chain"}
# The command line is the front that starts flows, not a building block.
FRONT = "posttrain.cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _sources(*tops: str) -> dict[str, Path]:
    return {_module_name(p): p for top in tops for p in sorted((ROOT / top).rglob("*.py"))}


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    """Modules `path` imports (every import, or only those run when it loads)."""
    known = set(_sources("posttrain", "stages", "flows"))
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import submodule` needs the submodule (its package is loaded anyway)
            submodules = {f"{node.module}.{a.name}" for a in node.names} & known
            found |= submodules or {node.module}
    return found


def _reaches(imports: set[str], package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in imports)


def test_stages_never_import_flows_and_building_blocks_import_neither():
    wrong = [f"{name} imports flows" for name, path in _sources("stages").items() if _reaches(_imports(path), "flows")]
    for name, path in _sources("posttrain").items():
        if name == FRONT:
            assert not _reaches(_imports(path), "stages"), "the command line starts flows, never a stage itself"
            continue
        imports = _imports(path)
        wrong += [f"{name} imports {top}" for top in ("stages", "flows") if _reaches(imports, top)]
    assert wrong == []


def test_the_embedded_world_is_read_only_by_the_data_side():
    readers = {name for name, path in _sources("posttrain", "stages", "flows").items()
               if not name.startswith("posttrain.world") and _reaches(_imports(path), "posttrain.world")}
    assert readers <= WORLD_READERS, f"the world is imported by {sorted(readers - WORLD_READERS)}"


def test_no_module_is_longer_than_the_limit():
    long = {name: n for name, path in _sources("posttrain", "stages", "flows").items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_import_cycle_between_modules():
    """Over the imports a module runs when it loads (an import inside a function runs when called)."""
    sources = _sources("posttrain", "stages", "flows")
    graph = {name: {m for m in _imports(path, top_level_only=True) if m in sources and m != name}
             for name, path in sources.items()}
    state, cycles = {}, []

    def visit(node, trail):
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert cycles == []


def _loaded_modules():
    import posttrain

    for info in pkgutil.walk_packages(posttrain.__path__, "posttrain."):
        if info.name.endswith("__main__") or "sandbox" in info.name or "worker_process" in info.name:
            continue   # entry points and sandbox children run on import
        yield importlib.import_module(info.name)
    for top in ("stages", "flows"):
        for path in sorted((ROOT / top).glob("*.py")):
            yield importlib.import_module(_module_name(path))


def private_overrides(cls) -> list[str]:
    """`Class.method` of TRL or transformers whose name starts with `_` that `cls` itself defines."""
    external = [base for base in cls.__mro__[1:] if base.__module__.split(".")[0] in {"trl", "transformers"}]
    return [f"{base.__module__}.{base.__qualname__}.{name}"
            for name, value in vars(cls).items()
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
            and (callable(value) or isinstance(value, (property, classmethod, staticmethod)))
            for base in external[:1] if any(name in vars(b) for b in external)]


@pytest.mark.timeout(300)
def test_no_private_method_of_trl_or_transformers_is_overridden():
    overridden = {}
    for module in _loaded_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and private_overrides(cls):
                overridden[f"{module.__name__}.{cls.__qualname__}"] = private_overrides(cls)
    assert overridden == {}


def test_the_override_check_sees_an_override():
    from trl import GRPOTrainer

    class Overriding(GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            return None

        def compute_loss(self, *args, **kwargs):
            return None

    assert private_overrides(Overriding) == ["trl.trainer.grpo_trainer.GRPOTrainer._get_train_sampler"]
