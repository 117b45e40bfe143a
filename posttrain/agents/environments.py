"""Environments a policy calls tools in, and the budgets that keep an episode from crashing or
stalling the trainer.

An environment is a plain class, the shape TRL's GRPOTrainer takes as `environment_factory`:

    class Lockers:
        version = "lockers/1"                  # goes into cache keys and every recorded episode
        def reset(self, codes: dict) -> str | None:
            self.codes = dict(codes)           # the row's `setup`, as keyword arguments
        def state(self) -> dict:               # what `expected_state` is compared with
            return {"codes": self.codes}
        def open_locker(self, number: int) -> str:
            \"\"\"Read the code in a locker.

            Args:
                number: The locker's number.
            \"\"\"
            return self.codes[str(number)]

Every other public method is a tool: its name, type hints and Google-style docstring are what the
model is shown (transformers' `get_json_schema`). The config names an environment by a built-in
name (`ENVIRONMENTS`) or as `module:Class`.

`episode_class` wraps an environment into the class TRL instantiates. Each tool call goes through
`ToolSession._call`: it counts against the episode's `Budget` (calls, wall time), runs in a worker
thread with a deadline, and returns an error observation (`error: ...`) instead of raising when the
tool raises, hangs or is called with wrong arguments; output past `max_output_chars` is cut. The
session records every call, so the episode is data (posttrain.agents.episodes).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from posttrain.rewards.code_sandbox import (SANDBOX_VERSION, SandboxLimits, how_to_isolate, run_in_sandbox,
                                            sandbox_isolation, unisolated_allowed)

NOT_TOOLS = frozenset({"reset", "state", "get_reward"})


@dataclass(frozen=True)
class Budget:
    """What one episode may spend. A call past a budget is not run: it returns an error observation."""

    max_calls: int = 6               # tool calls per episode
    call_timeout_s: float = 5.0      # one call's wall time; a call still running then stalls the episode
    # All the episode's calls together: the time spent in its tools, never the policy's generation
    # between them, so a slow or busy machine, or a bigger batch, never changes an episode's outcome.
    episode_wall_s: float = 30.0
    max_output_chars: int = 1000     # an observation is cut to this many characters


class KeyValueStore:
    """A store of named values the agent reads and changes; its final contents are what a task
    checks (`expected_state`)."""

    version = "kv_store/1"

    def reset(self, items: dict | None = None) -> None:
        self.items = {str(k): str(v) for k, v in (items or {}).items()}

    def state(self) -> dict:
        return {"items": dict(sorted(self.items.items()))}

    def get(self, key: str) -> str:
        """Read the value stored under a key.

        Args:
            key: The key to read.
        """
        key = str(key)
        if key not in self.items:
            raise KeyError(f"no key {key!r}")
        return self.items[key]

    def set(self, key: str, value: str) -> str:
        """Store a value under a key, replacing any value it had.

        Args:
            key: The key to write.
            value: The value to store.
        """
        self.items[str(key)] = str(value)
        return "ok"


# The interpreter's limits per call: a program that runs long or prints a flood is stopped by the
# sandbox itself (its wall clock and output cap), so a call never outlives `Budget.call_timeout_s`.
PYTHON_LIMITS = SandboxLimits(cpu_s=2.0, wall_s=3.0, total_wall_s=3.0, output_bytes=64 * 1024, max_code_chars=4000)


class PythonInterpreter:
    """Tool-integrated reasoning: a Python interpreter that runs each program in the code sandbox
    (the isolation of posttrain.rewards.code_sandbox, which refuses to run without it unless the
    config opted in) and returns what it printed. Stateless: each call is a fresh interpreter."""

    version = f"python/1+{SANDBOX_VERSION}"

    def reset(self) -> None:
        return None

    def state(self) -> dict:
        return {}

    def python(self, code: str) -> str:
        """Run a Python program and return what it prints.

        Args:
            code: The program; print the values you need.
        """
        isolation = sandbox_isolation(PYTHON_LIMITS.isolation)
        if isolation == "none" and not unisolated_allowed():
            raise PermissionError(how_to_isolate())
        run = run_in_sandbox(isolation, str(code), None, "", PYTHON_LIMITS, time.monotonic() + PYTHON_LIMITS.wall_s)
        if run.timed_out:
            raise TimeoutError(f"the program ran past {PYTHON_LIMITS.wall_s:g} s")
        if run.output_exceeded:
            raise OverflowError(f"the program printed more than {PYTHON_LIMITS.output_bytes} bytes")
        if run.returncode is not None and run.returncode < 0:
            raise TimeoutError(f"the program was killed by signal {-run.returncode}: past its limits "
                               f"({PYTHON_LIMITS.cpu_s:g} s CPU, {PYTHON_LIMITS.memory_bytes >> 20} MiB)")
        if run.returncode != 0:
            lines = run.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(lines[-1] if lines else f"exit status {run.returncode}")
        return run.stdout.decode("utf-8", "replace").strip()


class NoTools:
    """The environment of a row that calls no tool, in a stage that mixes tool rows with others."""

    version = "none/1"

    def reset(self) -> None:
        return None

    def state(self) -> dict:
        return {}


ENVIRONMENTS: dict[str, type] = {"kv_store": KeyValueStore, "python": PythonInterpreter}


def environment_class(spec: str) -> type:
    """The class a config or a row names: a built-in name, or `module:Class` (a user's own)."""
    if spec in ENVIRONMENTS:
        return ENVIRONMENTS[spec]
    module, sep, name = str(spec).partition(":")
    if not sep:
        raise ValueError(f"unknown environment {spec!r}: a built-in one ({', '.join(ENVIRONMENTS)}) or module:Class")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"environment {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    problems = [m for m in ("reset", "state") if not callable(getattr(cls, m, None))]
    if problems or not isinstance(getattr(cls, "version", None), str):
        raise ValueError(f"environment {spec!r} needs a `version` string and methods reset() and state() "
                         f"(missing: {', '.join(problems + ([] if isinstance(getattr(cls, 'version', None), str) else ['version']))})")
    if not tools_of(cls) and cls is not NoTools:
        raise ValueError(f"environment {spec!r} has no tool: no public method besides {', '.join(sorted(NOT_TOOLS))}")
    return cls


def tools_of(cls: type) -> dict[str, Any]:
    """The tools of an environment class: its public methods other than reset / state / get_reward."""
    return {name: fn for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in NOT_TOOLS}


def environment_version(spec: str) -> str:
    return environment_class(spec).version


def observation_text(result) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


class ToolSession:
    """One episode's environment as TRL sees it: `reset` from the row, the tools as methods, and the
    record of every call. Subclassed per environment by `episode_class`; TRL pools the instances and
    resets them between episodes."""

    _environment_class: type = NoTools
    _environment_name: str | None = None
    _budget: Budget = Budget()

    def __init__(self):
        self._env = self._environment_class()
        self._setup: dict = {}
        self._calls: list[dict] = []
        self._tool_s = 0.0   # wall time spent in this episode's tool calls
        self._stalled = False

    def reset(self, **row) -> str | None:
        setup = row.get("setup")
        self._setup = json.loads(setup) if isinstance(setup, str) and setup else dict(setup or {})
        self._env = self._environment_class()
        self._calls, self._tool_s, self._stalled = [], 0.0, False
        observation = self._env.reset(**self._setup)
        return observation if isinstance(observation, str) else None

    def _call(self, name: str, fn, args: tuple, kwargs: dict) -> str:
        arguments = dict(kwargs)
        result, error = "", None
        budget = self._budget
        try:
            bound = inspect.signature(fn).bind(self._env, *args, **kwargs)
            arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
        except TypeError as exc:
            error = f"bad_arguments: {exc}"
        if error is None:
            if self._stalled:
                error = "stalled: an earlier call never returned"
            elif len(self._calls) >= budget.max_calls:
                error = f"call_budget: {budget.max_calls} calls already made"
            elif self._tool_s >= budget.episode_wall_s:
                error = f"wall_budget: {budget.episode_wall_s:g} s spent in tools"
        if error is None:
            started = time.monotonic()
            result, error = self._run(fn, bound, budget.call_timeout_s)
            self._tool_s += time.monotonic() - started
        text = f"error: {error}" if error else result
        if len(text) > budget.max_output_chars:
            text = text[:budget.max_output_chars] + f" [cut: {len(text) - budget.max_output_chars} more characters]"
        self._calls.append({"tool": name, "arguments": arguments, "result": text,
                            "error": error.split(":", 1)[0] if error else None})
        return text

    def _run(self, fn, bound, timeout_s: float) -> tuple[str, str | None]:
        box: dict = {}

        def work():
            try:
                box["result"] = observation_text(fn(*bound.args, **bound.kwargs))
            except BaseException as exc:   # noqa: BLE001 - a tool's failure is an observation
                box["error"] = f"raised: {type(exc).__name__}: {exc}"

        worker = threading.Thread(target=work, daemon=True, name="tool-call")
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            # A Python call cannot be killed from outside: the thread is left behind and the
            # environment is not used again in this episode (the sandboxed interpreter kills its own).
            self._stalled = True
            return "", f"timeout: no result after {timeout_s:g} s"
        return box.get("result", ""), box.get("error")

    def _record(self) -> dict:
        return {"environment": self._environment_name, "version": self._env.version, "setup": self._setup,
                "calls": list(self._calls), "state": self._safe_state()}

    def _safe_state(self) -> dict:
        try:
            return json.loads(json.dumps(self._env.state(), default=str))
        except Exception as exc:   # noqa: BLE001
            return {"error": f"state() raised {type(exc).__name__}: {exc}"}


def _tool_method(name: str, fn):
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        return self._call(name, fn, args, kwargs)

    return call


def episode_class(spec: str | None, budget: Budget = Budget()) -> type:
    """The class TRL's `environment_factory` instantiates for environment `spec` (None: no tools):
    a `ToolSession` whose public methods are the environment's tools, each with its own signature
    and docstring (the schema the model is shown) and every call budgeted and recorded."""
    cls = NoTools if spec is None else environment_class(spec)
    methods = {name: _tool_method(name, fn) for name, fn in tools_of(cls).items()}
    return type(f"{cls.__name__}Session", (ToolSession,),
                {"_environment_class": cls, "_environment_name": spec, "_budget": budget, **methods})
