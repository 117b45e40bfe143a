"""Agents: multi-turn tool use against environments that really execute.

- `environments`: what an environment is (TRL's `environment_factory` contract: `reset(**setup)`
  and its public methods as tools, plus a `version` and a `state()` the verifier checks), the
  built-in ones (`python`: an interpreter in the code sandbox; `kv_store`: a key-value store whose
  final state is checked), a user's class named in the config, and the per-episode budgets that
  turn a tool that raises, hangs or floods into an error observation.
- `episodes`: one episode as data (the tool calls, their results, the environment's name, version
  and final state), its canonical transcript, replay against the environment, and the verdict
  of the `tool` task kind that training, evaluation and `posttrain verify` share.
"""

# The `tool` task kind (posttrain.rewards) reads these modules, and the interpreter runs in the
# rewards' code sandbox: the rewards package initialises first, whichever side is imported first.
import posttrain.rewards  # noqa: E402,F401
