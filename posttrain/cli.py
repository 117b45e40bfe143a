"""`posttrain` command line: run the pipeline, build the world, verify answers, replay recorded
tool-use episodes; operations: status, promote, rollback, history, lineage, evaluate, resume."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posttrain.env import configure_offline

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _cmd_run(args) -> int:
    from posttrain.config.loading import load_config

    load_config(args.config)  # a bad config fails here, naming the field, before any server starts
    from flows.commands import run_pipeline

    outcome = run_pipeline(str(Path(args.config).absolute()), stages=args.stages, seed=args.seed, force=args.force,
                           on_gate_failure=args.on_gate_failure)
    if outcome.completed:
        print(f"run id: {outcome.result['run_id']}\nreport: {outcome.result['report']}")
        return 0
    print(f"run failed: {outcome.message}", file=sys.stderr)
    if outcome.error is not None:  # the flow's own error: say it once, plainly
        print(f"error: {outcome.error}", file=sys.stderr)
    return 1


def _cmd_world(args) -> int:
    from posttrain.config.loading import load_config
    from posttrain.world import build

    cfg = load_config(args.config)
    if args.step == "data":
        manifest = build.build_data(cfg)
        print("\n".join(f"{k}: {v['rows']} rows" for k, v in manifest.items()))
    elif args.step == "tokenizer":
        build.build_tokenizer(cfg)
    elif args.step == "base":
        print(build.build_base(cfg, args.which))
    return 0


def _cmd_data(args) -> int:
    """`data check`: load every source of the config, print what each role and suite holds; bad
    data exits non-zero with one line naming file, line or row, and column. `data add`: track a
    user file under data/ with DVC (its hash then keys the stages that read it)."""
    from posttrain.config.loading import load_config

    if args.action == "add":
        from posttrain.data.store import track_user_data

        for path in args.paths:
            print(track_user_data(Path(path).absolute(), PROJECT_ROOT))
        return 0
    from posttrain.data.prepared import load_all, missing_roles
    from posttrain.data.decontamination import summary as overlap_summary
    from posttrain.data.code_references import data_check_lines
    from posttrain.data.code_tests import code_notes
    from posttrain.data.sources import role_summary

    cfg = load_config(args.config)
    loaded = load_all(cfg, require=False)
    print(f"{'role / suite':28} {'rows':>6}  {'kinds':24} {'languages':16} {'modes':28} dup")
    for key, data in loaded.items():
        summary = role_summary(data.rows)
        fmt = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=str))  # noqa: E731
        print(f"{key:28} {summary['rows']:>6}  {fmt(summary['kinds']):24} {fmt(summary['languages']):16} "
              f"{fmt(summary['modes']):28} {summary['duplicates']}")
        if len(data.shares) > 1:
            for label, share in data.shares.items():
                print(f"  {'':26} share {share:.1%}  {label}")
        for note in data.notes + code_notes(data.rows):   # code_notes: rows a policy could be paid on unsolved
            print(f"  note: {note}")
    print(overlap_summary(loaded, cfg.data.decontamination))   # load_all refused contamination, or dropped it
    for line in data_check_lines(cfg, every=args.all):   # refuses a row whose reference fails its own tests
        print(line)
    for missing in missing_roles(cfg):
        print(f"missing: {missing}")
    from posttrain.registry.checkpoint import check_models
    from posttrain.config.pipeline import STAGES

    for line in check_models(cfg, STAGES):
        print(f"model {line}")
    return 0


def _cmd_verify(args) -> int:
    """Judge JSONL on stdin with one reward kind (posttrain/rewards/verify_cli.py says what each
    kind reads); exit 1 when any line was bad input or a verifier failed, 2 when code cannot run."""
    from posttrain.rewards import verify_cli

    if args.kind == "math":
        from posttrain.rewards.math import verify_stream as stream
    else:
        check = verify_cli.CHECKS[args.kind]
        stream = lambda inp, out: verify_cli.verify_lines(inp, out, check)  # noqa: E731
    if args.kind in ("code", "tool"):   # the python environment runs the episode's programs
        from posttrain.rewards.code_sandbox import SandboxUnavailable, require_isolation, sandbox_info

        try:
            require_isolation(allow_unisolated=args.unsafe_allow_unisolated)
        except SandboxUnavailable as exc:
            print(f"error: {exc} (or pass --unsafe-allow-unisolated to this command)", file=sys.stderr)
            return 2
        info = sandbox_info()
        print(f"sandbox mode: {info['mode']}" + (f", seccomp {'on' if info['seccomp'] else 'off'}"
                                                  if info["mode"] != "none" else ", UNISOLATED (opted in)"),
              file=sys.stderr, flush=True)
    # bytes in and out: any byte sequence gets a verdict line (bad_input at worst), written as UTF-8
    # whatever the locale
    counts = stream(sys.stdin.buffer, sys.stdout.buffer)
    problems = []
    for total, where, what in (("bad_input", "bad_lines", "bad input"), ("errors", "error_lines", "verifier errors")):
        if counts.get(total):
            more = ", ..." if counts[total] > len(counts[where]) else ""
            problems.append(f"{counts[total]} of {counts['lines']} lines were {what} "
                            f"(line {', '.join(map(str, counts[where]))}{more})")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


def _cmd_replay(args) -> int:
    """Re-run recorded episodes' calls against their environments as they are now; exit 1 when an
    episode does not reach its recorded results and state (a changed environment version is named)."""
    import json

    from posttrain.agents.episodes import replay_record

    path = Path(args.file)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectories file {path}")
    lines = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    chosen = lines if args.index is None else lines[args.index:args.index + 1]
    if not chosen:
        raise CLIError(f"{path} has {len(lines)} episodes; --index {args.index} is not one of them")
    differing = 0
    for n, line in chosen:
        try:
            record = json.loads(line)
            outcome = replay_record(record)
        except (ValueError, KeyError, TypeError) as exc:
            raise CLIError(f"{path} line {n} is not a recorded episode: {type(exc).__name__}: {exc}") from None
        differing += not outcome.matches
        episode = record["episode"]
        print(f"line {n}: {episode.get('environment')} {outcome.current_version}, {len(episode['calls'])} calls: "
              + ("reaches the recorded state" if outcome.matches else "DIFFERS"))
        for difference in outcome.differences:
            print(f"  {difference}")
    print(f"{len(chosen) - differing} of {len(chosen)} episodes replay to their recorded state")
    return 1 if differing else 0


# ------------------------------------------------------------------------------ operations


class CLIError(Exception):
    """A clear one-line error: printed as `error: ...`, exit code 2."""


def _config(args):
    from posttrain.config.loading import load_config

    return load_config(args.config)


def _has_registry(cfg) -> bool:
    """A server counts as there (opening it says if it does not answer); a folder needs its store."""
    from posttrain.config.pipeline import registry_server

    return bool(registry_server(cfg.paths.registry)) or (cfg.path(cfg.paths.registry) / "mlflow.db").is_file()


def _registry(cfg):
    from posttrain.registry.model_registry import Registry, RegistryUnreachable

    if not _has_registry(cfg):
        raise CLIError(f"no registry at {cfg.path(cfg.paths.registry)} (run the pipeline with this config first)")
    try:
        return Registry.for_config(cfg)
    except RegistryUnreachable as exc:
        raise CLIError(str(exc)) from None


def _actor() -> str:
    """Who moves production from this command, as the history records it: user@host."""
    import getpass
    import os
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry (containers)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _table(rows: list[list], header: list[str]) -> str:
    cells = [[str(c) for c in header]] + [["–" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3f}"
    return str(v)


def _run_outcome(report, record) -> str:
    """passed / FAILED at <stage> from the report (a RunReport); running / crashed (process gone)
    while the process record (posttrain.orchestration.liveness) says the flow function has not returned."""
    from posttrain.orchestration import liveness

    failed = [s.name for s in report.stages if s.status == "failed"]
    if record is not None and record.ended is None:
        alive = liveness.is_alive(record.process)
        where = record.process.describe()
        state = ("crashed (process gone)" if alive is False else f"running ({where})" if alive
                 else f"running? ({where}; that process cannot be checked from here)")
        return state + (f", FAILED at {failed[0]}" if failed else "")
    if failed:
        return f"FAILED at {failed[0]}"
    if record is not None and record.error:  # failed outside any stage (world, registry, ...)
        return f"FAILED ({record.error.splitlines()[0][:200]})"
    return "passed"


def _read_report(path: Path):
    """The run report at ``path`` (posttrain.schema.RunReport); CLIError if it cannot be read."""
    from pydantic import ValidationError

    from posttrain.schema import RunReport

    try:
        return RunReport.read(path)
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc}") from None
    except ValidationError as exc:  # one line: the first problem, where it is
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CLIError(f"cannot read {path}: {where + ': ' if where else ''}{first['msg']}") from None


def _cmd_status(args) -> int:
    from posttrain.orchestration import liveness
    from posttrain.schema import RunReport

    cfg = _config(args)
    runs = cfg.path(cfg.paths.runs)
    if args.run_id:
        run_dir = runs / args.run_id
        if not (run_dir / "report.json").is_file() and liveness.read_record(run_dir) is None:
            raise CLIError(f"no report for run {args.run_id} ({run_dir / 'report.json'} does not exist)")
    else:
        # A run killed before its first stage finished has a process record but no report yet.
        found = [*runs.glob("*/report.json"), *runs.glob(f"*/{liveness.RECORD_FILE}")]
        if not found:
            raise CLIError(f"no runs under {runs} yet, the runs folder of {args.config} (runs of another config: "
                           f"posttrain status --config <that config>; a first run: posttrain run --config {args.config})")
        run_dir = max(found, key=lambda p: p.stat().st_mtime).parent
    path, record = run_dir / "report.json", liveness.read_record(run_dir)
    report = _read_report(path) if path.is_file() else RunReport(run_id=run_dir.name)
    overall = _run_outcome(report, record)
    print(f"run {report.run_id}: {overall}  (wall {report.wall_s:.0f} s, config {report.config})")
    if overall.startswith("crashed"):
        print(f"  {record.process.describe()} ended without finishing the run (killed?): "
              f"`posttrain resume {run_dir.name}` continues it, `posttrain run` starts a new run; "
              "either reuses the finished stages")
    rows = [[s.name, s.status, _fmt(s.cached), "–" if not s.gate else ("passed" if s.gate.passed else "FAILED"),
             f"{s.wall_s:.0f}", s.checkpoint.version if s.checkpoint else None] for s in report.stages]
    print(_table(rows, ["stage", "status", "cached", "gate", "wall s", "version"]))
    for s in report.stages:
        if s.gate and not s.gate.passed:
            for c in s.gate.checks:
                if not c.passed:
                    print(f"  {s.name}: failed check {c.name} = {_fmt(c.value)} {c.detail}".rstrip())
    if _has_registry(cfg):
        from posttrain.registry import promotion

        reg = _registry(cfg)
        prod = promotion.current_production(reg)
        print(f"production: {prod or '(none)'}" + (f" ({reg.get(prod)['stage']})" if prod else ""))
    print(f"report: {path.with_suffix('.md')}" if path.is_file() else f"report: none yet (run folder {run_dir})")
    return 0


def _print_entry(entry: dict) -> None:
    reason = f", reason: {entry['reason']}" if entry.get("reason") else ""
    print(f"production: {entry['from'] or '(none)'} -> {entry['to']} ({entry['stage']}) "
          f"[{entry['action']} by {entry['actor']}{reason}]")
    for problem in entry.get("overridden") or []:
        print(f"  overridden: {problem}")


def _cmd_promote(args) -> int:
    from posttrain.registry import promotion

    reg = _registry(_config(args))
    _print_entry(promotion.promote(reg, args.version, reason=args.reason, force=args.force, actor=_actor()))
    return 0


def _cmd_rollback(args) -> int:
    from posttrain.registry import promotion

    reg = _registry(_config(args))
    _print_entry(promotion.rollback(reg, to=args.to, reason=args.reason, force=args.force, actor=_actor()))
    return 0


def _cmd_history(args) -> int:
    import json

    from posttrain.registry import promotion

    reg = _registry(_config(args))
    entries = promotion.history(reg)
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print(f"{reg.model_name}: no production history yet")
        return 0
    rows = [[e["at"], e["action"], e["from"], e["to"], e.get("stage"), e["actor"], e.get("reason")] for e in entries]
    print(_table(rows, ["at (UTC)", "action", "from", "to", "stage", "actor", "reason"]))
    print(f"production: {entries[-1]['to']}")
    return 0


def _cmd_lineage(args) -> int:
    import json

    from posttrain.registry.lineage import lineage

    chain = lineage(_registry(_config(args)), args.version)
    if args.json:
        print(json.dumps(chain, indent=2))
        return 0
    for link in chain:
        if link["version"] == "base":
            print(f"base  digest {link['digest'] or '–'}")
            continue
        aliases = f"  [{', '.join(link['aliases'])}]" if link.get("aliases") else ""
        print(f"v{link['version']}  {link['stage']}  gate {link['gate'] or '–'}"
              f"{' (rejected)' if link.get('status') == 'rejected' else ''}{aliases}")
        dirty = f" + uncommitted diff {link['code_dirty']}" if link.get("code_dirty") not in (None, "no") else ""
        print(f"    flow run {link['flow_run']}  config {link['config_hash']}  code {link['code_revision']}{dirty}  "
              f"seed {link['seed']}")
        print(f"    digest {link['digest']}")
        if link["verifiers"]:
            print("    verifiers " + ", ".join(f"{k}={v}" for k, v in sorted(link["verifiers"].items())))
        for name, md5 in sorted(link["datasets_consumed"].items()):
            print(f"    consumed {name}  md5 {md5}")
        for name, md5 in sorted((link["datasets_produced"] or {}).items()):
            print(f"    produced {name}  md5 {md5}")
    return 0


def _cmd_evaluate(args) -> int:
    import json

    from posttrain.registry.versus_production import evaluate_version

    cfg = _config(args)
    reg = _registry(cfg)
    out = evaluate_version(reg, cfg, args.version, against_production=not args.no_compare,
                           auto_rollback=args.auto_rollback, actor=_actor())
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    v, prod, against, comparison = out["version"], out["production"], out["against"], out["comparison"]
    if comparison is None:
        rows = [[k, _fmt(val)] for k, val in out["metrics"].items()]
        print(_table(rows, ["metric", f"v{v}"]))
        if args.auto_rollback:
            print(f"(no earlier production version to compare v{v} with: nothing to roll back to)")
        elif prod == v:
            print(f"(v{v} is production)")
        elif prod is None and not args.no_compare:
            print("(no production version to compare with)")
        return 0
    rows = [[r["metric"], _fmt(r["new"]), _fmt(r["old"]),
             "–" if r["diff"] is None else f"{r['diff']:+.3f}",
             "–" if r["low"] is None else f"[{r['low']:+.3f}, {r['high']:+.3f}]", r["verdict"]]
            for r in comparison]
    label = f"previous production v{against}" if args.auto_rollback else f"production v{against}"
    print(_table(rows, ["metric", f"v{v}", label, "diff", f"{cfg.evaluation.confidence:.0%} CI", "paired"]))
    if out["rollback"] is not None:
        _print_entry(out["rollback"])
    elif args.auto_rollback:
        print(f"no capability significantly worse than v{against}: v{v} stays production")
    return 0


def _cmd_generate(args) -> int:
    """Replies of a checkpoint (a directory, or a registry version / stage / alias) to prompts,
    optionally under a thinking budget (the stop-thinking sentence is shown where it was inserted)."""
    from pathlib import Path

    from posttrain.registry.checkpoint import load_checkpoint
    from posttrain.generation.engines import ThinkingBudget, generate_replies

    cfg = _config(args)
    settings = cfg.base.settings()
    location = Path(args.model)
    if not location.is_dir():
        from posttrain.registry.promotion import resolve_version

        reg = _registry(cfg)
        location = Path(reg.get(resolve_version(reg, args.model))["source"])
    model, tokenizer = load_checkpoint(location, for_training=False, settings=settings)
    budget = None
    if args.thinking_budget is not None:
        budget = ThinkingBudget(tokens=args.thinking_budget, sentence=settings.chat.stop_thinking,
                                think_open=settings.chat.think_open, think_close=settings.chat.think_close)
    requests = [([{"role": "user", "content": p}], not args.no_think) for p in args.prompt]
    replies = generate_replies(model, tokenizer, settings.chat, requests, max_new_tokens=args.max_new_tokens,
                               thinking_budget=budget, desc="generating")
    for prompt, (reply,) in zip(args.prompt, replies):
        status = []
        if reply.budget_cut:
            status.append(f"thinking cut at {args.thinking_budget} tokens")
        if reply.truncated:
            status.append(f"cut at {args.max_new_tokens} new tokens")
        print(f"> {prompt}\n{reply.text}\n[{reply.num_tokens} tokens{'; ' + '; '.join(status) if status else ''}]\n")
    return 0


def _cmd_resume(args) -> int:
    """Retry a failed flow run as the UI's Retry does, or one whose process was killed
    (flows/commands.py: resume): by a live runner of its deployment, else here."""
    from flows.commands import resume

    outcome = resume(args.flow_run, say=print)
    if outcome is None:  # handed to the runner serving its deployment
        return 0
    if outcome.completed:
        out = outcome.result
        if isinstance(out, dict) and out.get("report"):
            print(f"run id: {out.get('run_id')}\nreport: {out['report']}")
        print(f"flow run {outcome.flow_run} completed")
        return 0
    print(f"flow run {outcome.flow_run} finished {outcome.state}: {outcome.message}", file=sys.stderr)
    return 1


def build_parser() -> argparse.ArgumentParser:
    from posttrain.config.pipeline import STAGES
    from posttrain.rewards import verify_cli

    parser = argparse.ArgumentParser(prog="posttrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the pipeline (stages, gates, registry, report card)")
    run.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "default.yaml"))
    run.add_argument("--stages", nargs="+", choices=STAGES, help="run only these stages (default: all)")
    run.add_argument("--seed", type=int, help="override the config's seed")
    run.add_argument("--force", action="store_true", help="recompute cached stages")
    run.add_argument("--on-gate-failure", choices=["stop", "continue"], default="stop",
                     help="continue: run the rest of the chain after a failed gate (the run still fails)")
    run.set_defaults(func=_cmd_run)

    world = sub.add_parser("world", help="build the embedded world (dvc.yaml runs these)")
    world.add_argument("step", choices=["data", "tokenizer", "base"])
    world.add_argument("--which", choices=["teacher", "student"], default="teacher")
    world.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "default.yaml"))
    world.set_defaults(func=_cmd_world)

    data = sub.add_parser("data", help="check the config's data sources, or track a data file with DVC")
    data.add_argument("action", choices=["check", "add"])
    data.add_argument("paths", nargs="*", help="add: files or directories under data/ to track")
    data.add_argument("--config", default=str(PROJECT_ROOT / "configs" / "default.yaml"))
    data.add_argument("--all", action="store_true", help="check: run the reference solution of every code row "
                      "read with `tests_from:` (default: a seeded sample of 20 per source)")
    data.set_defaults(func=_cmd_data)

    verify = sub.add_parser(
        "verify", help="audit a reward on your data: JSON lines on stdin, one verdict per line out",
        description="Judge JSON lines on stdin with one reward; one JSON verdict per line on stdout "
                    "(reward, reason, and what the kind can explain). Each line holds \"response\" "
                    "(the whole reply) and what the kind needs: math: \"answer\"; instruction: "
                    "\"constraints\" (or IFEval's \"instruction_id_list\" + \"kwargs\"), optional "
                    "\"answer\"; code: \"tests\"; tool: the episode's transcript as \"response\" (or its "
                    "\"messages\"), \"environment\", \"setup\", \"expected_state\" and/or \"answer\"; format: \"thinking\" (true/false); language: "
                    "\"language\" (en/zh). A line that is not UTF-8 JSON or lacks a field gets reason "
                    "bad_input naming it. Exit status: 0 all lines judged, 1 some were bad input (counts "
                    "on stderr), 2 code without OS isolation.")
    verify.add_argument("--kind", default="math", choices=verify_cli.KINDS, help="which reward (default: math)")
    verify.add_argument("--unsafe-allow-unisolated", action="store_true",
                        help="code: run the responses' programs even where no OS isolation (bubblewrap, "
                             "namespaces) is available; they can then read, write and reach what you can")
    verify.set_defaults(func=_cmd_verify)

    replay = sub.add_parser("replay", help="re-run recorded tool-use episodes against their environments",
                            description="Re-run the calls of episodes a stage recorded (its trajectories "
                                        "JSONL) against the environments as they are now, and say whether "
                                        "each reaches the recorded results and final state; a changed "
                                        "environment version is reported. Exit 1 when one differs.")
    replay.add_argument("file", help="a trajectories file, e.g. runs/<run>/general_rl_trajectories.jsonl")
    replay.add_argument("--index", type=int, help="replay only the episode at this position (0-based)")
    replay.set_defaults(func=_cmd_replay)

    default_config = str(PROJECT_ROOT / "configs" / "default.yaml")

    def op(name: str, help: str, func):
        p = sub.add_parser(name, help=help)
        p.add_argument("--config", default=default_config, help="pipeline YAML (locates runs and registry)")
        p.set_defaults(func=func)
        return p

    status = op("status", "summary of the latest run's report (or of RUN_ID)", _cmd_status)
    status.add_argument("run_id", nargs="?", help="a run id (folder under the runs directory)")
    promote = op("promote", "move the production alias to a version (or a stage's candidate)", _cmd_promote)
    promote.add_argument("version", help="version number, or a stage name meaning its candidate-<stage> alias")
    promote.add_argument("--reason", help="why (recorded in the history; required with --force)")
    promote.add_argument("--force", action="store_true",
                         help="promote even if the gate failed or the checkpoint changed (needs --reason)")
    rollback = op("rollback", "move production back to the previous (or a named) version", _cmd_rollback)
    rollback.add_argument("--to", help="version to roll back to (default: the one before the current)")
    rollback.add_argument("--reason", help="why (recorded in the history)")
    rollback.add_argument("--force", action="store_true", help="skip the checks on the target (needs --reason)")
    hist = op("history", "every move of the production alias", _cmd_history)
    hist.add_argument("--json", action="store_true")
    lin = op("lineage", "a version's chain back to the base model", _cmd_lineage)
    lin.add_argument("version", help="version number, stage name (its candidate) or alias (e.g. production)")
    lin.add_argument("--json", action="store_true")
    ev = op("evaluate", "evaluate a version on the held-out suites and compare it to production", _cmd_evaluate)
    ev.add_argument("version", help="version number, stage name (its candidate) or alias")
    ev.add_argument("--no-compare", action="store_true", help="do not evaluate production for comparison")
    ev.add_argument("--auto-rollback", action="store_true",
                    help="VERSION must be production: compare it with the previous production and roll back "
                         "if any capability is significantly worse (paired CI); the reason is recorded")
    ev.add_argument("--json", action="store_true")
    gen = op("generate", "a checkpoint's replies to prompts, optionally under a thinking budget", _cmd_generate)
    gen.add_argument("model", help="checkpoint directory, or a registry version number, stage name or alias")
    gen.add_argument("--prompt", action="append", required=True, help="a user message (repeatable)")
    gen.add_argument("--thinking-budget", type=int, help="think tokens before the stop-thinking sentence is inserted")
    gen.add_argument("--no-think", action="store_true", help="ask for the non-thinking mode")
    gen.add_argument("--max-new-tokens", type=int, default=256)
    resume = op("resume", "retry a failed flow run (as the UI's Retry), or a running one whose process is gone, "
                          "reusing finished stages", _cmd_resume)
    resume.add_argument("flow_run", help="flow run id (or unique name)")
    return parser


_OPERATIONS = (_cmd_status, _cmd_promote, _cmd_rollback, _cmd_history, _cmd_lineage, _cmd_evaluate, _cmd_resume,
               _cmd_generate)


def main(argv: list[str] | None = None) -> int:
    configure_offline()
    args = build_parser().parse_args(argv)
    from posttrain.config.pipeline import ConfigError
    from posttrain.data.files import DatasetError

    errors: tuple[type[BaseException], ...] = (ConfigError, DatasetError, FileNotFoundError, CLIError)
    if args.func is _cmd_data:
        errors += (ValueError,)   # `data add` of a file outside the project, a model that cannot be used
    if args.func in _OPERATIONS:
        from posttrain.registry.promotion import PromotionError

        errors += (PromotionError,)
    if args.func in (_cmd_run, _cmd_resume):
        from flows.commands import CommandError
        from flows.server import ServerError

        errors += (CommandError, ServerError)
    try:
        return args.func(args)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
