"""Report card (nanochat style): one row per capability, one column per stage, plus training
curves; written as report.json (posttrain.schema.RunReport), report.md and PNG plots in the run
folder."""
from __future__ import annotations

import json
import os
from pathlib import Path

from posttrain.metrics import lookup
from posttrain.schema import RunReport, StageEntry

CURVE_KEYS = ["loss", "reward", "rewards/correctness/mean", "rewards/instruction/mean", "completions/mean_length", "entropy"]


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and value > 1.5:
        return f"{value:.1f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def capability_rows(stages: list[StageEntry]) -> list[str]:
    """Every metric any stage was evaluated on, in the order the evaluation produced them (the
    thinking-budget curve has its own section)."""
    return list(dict.fromkeys(key for s in stages for key in s.eval if not _budget_key(key)))


def _budget_key(key: str) -> bool:
    return "/budget_" in key or key.endswith("/think_tokens")


def budget_curves(stages: list[StageEntry]) -> dict[str, tuple[str, list[tuple[str, float, float, float]]]]:
    """Per stage with a thinking-budget curve: (suite, [(label, budget tokens, accuracy, share cut)]),
    by budget, unlimited last."""
    out = {}
    for s in stages:
        suites = [k[:-len("/budget_unlimited/accuracy")] for k in s.eval if k.endswith("/budget_unlimited/accuracy")]
        if not suites:
            continue
        suite, prefix = suites[0], f"{suites[0]}/budget_"
        labels = [k[len(prefix):-len("/tokens")] for k in s.eval if k.startswith(prefix) and k.endswith("/tokens")]
        points = [(label, s.eval[f"{prefix}{label}/tokens"], s.eval[f"{prefix}{label}/accuracy"],
                   s.eval.get(f"{prefix}{label}/cut", 0.0)) for label in labels]
        out[s.name] = (suite, sorted(points, key=lambda p: (p[0] == "unlimited", p[1])))
    return out


def modes_section(stages: list[StageEntry]) -> list[str]:
    """Thinking vs non-thinking (Qwen3 reports both modes) and the thinking budget, per stage that has
    the curve: math accuracy in each mode, mean think length, accuracy at each budget."""
    curves = budget_curves(stages)
    if not curves:
        return []
    lines = ["## Thinking vs non-thinking, and the thinking budget", "",
             "| stage | math, thinking | math, /no_think | mean think tokens | accuracy by thinking budget "
             "(tokens: accuracy, share cut) |", "|---|---|---|---|---|"]
    for s in stages:
        if s.name not in curves:
            continue
        suite, points = curves[s.name]
        no_think = next((k.rpartition("/")[0] for k in s.eval if k.endswith("/mode_compliance")
                         and f"{k.rpartition('/')[0]}/format" in s.eval), None)
        budget = "; ".join(f"{'unlimited' if label == 'unlimited' else f'{tokens:.0f}'}: {acc:.3f}"
                           + ("" if label == "unlimited" else f" ({cut:.0%} cut)") for label, tokens, acc, cut in points)
        lines.append(f"| {s.name} | {_fmt(s.eval.get(f'{suite}/accuracy'))} | "
                     f"{_fmt(s.eval.get(f'{no_think}/accuracy')) if no_think else '–'} | "
                     f"{_fmt(s.eval.get(f'{suite}/think_tokens'))} | {budget} |")
    return lines + ["", "![thinking budget](budget.png)", ""]


def episodes_section(stages: list[StageEntry], shown: int = 3) -> list[str]:
    """A few tool-use episodes of each RL stage that recorded them (its trajectories dataset), from its
    last step: paid ones first, then unpaid ones, each with its calls as the environment answered
    them and the environment's final state. `posttrain replay` re-runs any of them."""
    lines: list[str] = []
    for s in stages:
        for d in s.datasets:
            if not d.name.endswith("_trajectories.jsonl") or not Path(d.path).is_file():
                continue
            records = [json.loads(line) for line in Path(d.path).read_text(encoding="utf-8").splitlines() if line.strip()]
            if not records:
                continue
            last = max(r.get("step") or 0 for r in records)
            at_last = [r for r in records if (r.get("step") or 0) == last]
            picked = ([r for r in at_last if r["score"] == 1.0][:shown - 1] + [r for r in at_last if r["score"] != 1.0])[:shown]
            lines += [f"## Tool episodes: {s.name}", "",
                      f"{len(records)} episodes recorded (`{d.path}`); {len(picked)} of step {last}'s, with what they were paid:", ""]
            for r in picked:
                episode = r["episode"]
                calls = "; ".join(f"{c['tool']}({json.dumps(c.get('arguments'), ensure_ascii=False)}) -> {c['result'][:60]!r}"
                                  for c in episode["calls"]) or "no call"
                lines += [f"- paid {r['score']:.1f} · {episode.get('environment')} {episode['version']} · {calls} · "
                          f"final state `{json.dumps(episode['state'], ensure_ascii=False)[:120]}`", "",
                          "  ```", *(f"  {line}" for line in r["transcript"][:600].splitlines()), "  ```", ""]
    return lines


def plot_budget(report: RunReport, out: Path) -> bool:
    """Accuracy against the thinking budget, a line per stage (unlimited drawn at the evaluation's
    token budget); False when no stage has the curve."""
    curves = budget_curves(report.stages)
    if not curves:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (suite, points) in curves.items():
        ax.plot([p[1] for p in points], [p[2] for p in points], marker="o", label=name)
    ax.set_xlabel("thinking budget (tokens; last point: unlimited)")
    ax.set_ylabel(f"{suite} accuracy")
    ax.set_title("Accuracy against the thinking budget")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def render_markdown(report: RunReport) -> str:
    stages = report.stages
    lines = [f"# Report card — run {report.run_id}", "",
             f"config `{report.config}` · wall time {report.wall_s:.0f} s · code sandbox: {report.sandbox}"
             + (f" · machine: {report.machine}" if report.machine else ""), ""]
    header = "| capability | " + " | ".join(s.name for s in stages) + " |"
    lines += [header, "|" + "---|" * (len(stages) + 1)]
    for key in capability_rows(stages):
        metric = lookup(key)
        label = f"{key.rpartition('/')[0]}: {metric.label if metric else key}"
        lines.append(f"| {label} | " + " | ".join(_fmt(s.eval.get(key)) for s in stages) + " |")
    lines.append("| **gate** | " + " | ".join(
        "–" if not s.gate else ("passed" if s.gate.passed else "**FAILED**") for s in stages) + " |")
    lines.append("| status | " + " | ".join(s.status + (" (cached)" if s.cached else "") for s in stages) + " |")
    lines.append("| wall s | " + " | ".join(f"{s.wall_s:.0f}" for s in stages) + " |")
    lines += ["", "## Gates", ""]
    for s in stages:
        if not s.gate:
            continue
        lines.append(f"**{s.name}** — {'passed' if s.gate.passed else 'FAILED'}")
        lines.append("")
        for c in s.gate.checks:
            mark = "✅" if c.passed else "❌"
            lines.append(f"- {mark} {c.name}: {_fmt(c.value)} (threshold {_fmt(c.threshold)}) {c.detail}")
        lines.append("")
    done = [s for s in stages if s.train_metrics]
    if done:   # what each stage made of its data: rows kept, rewards, loss (a stage can pass and make nothing)
        lines += ["## What each stage did", ""]
        lines += [f"- {s.name}: " + ", ".join(f"{k} {_fmt(v)}" for k, v in s.train_metrics.items()) for s in done]
        lines.append("")
    if report.data_notes:   # rows upsampled or dropped on the way in: counted, never silent
        lines += ["## Data", "", *[f"- {note}" for note in report.data_notes], ""]
    flagged = [s for s in stages if s.alerts or s.policies]
    if flagged:
        lines += ["## Policies and alerts", ""]
        for s in flagged:
            for key, value in s.policies.items():
                if value:
                    lines.append(f"- {s.name} {key.replace('_', ' ')}: {value}")
            lines += [f"- ⚠️ {s.name}: {alert}" for alert in s.alerts]
        lines.append("")
    lines += modes_section(stages)
    lines += episodes_section(stages)
    lines += ["## Checkpoints", "", "| stage | version | digest | path |", "|---|---|---|---|"]
    for s in stages:
        ck = s.checkpoint
        lines.append(f"| {s.name} | {(ck and ck.version) or '–'} | `{(ck.digest if ck else '')[:19]}` | "
                     f"`{ck.path if ck else ''}` |")
    lines += ["", "![capabilities](capabilities.png)", "", "![training curves](training.png)", ""]
    return "\n".join(lines)


def plot_capabilities(report: RunReport, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in report.stages if s.eval]
    # Shares of items done right (lengths and per-language splits are in the table).
    keys = [k for k in capability_rows(stages) if (m := lookup(k)) and m.paired and m.higher_is_better]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for key in keys:
        ax.plot([s.name for s in stages], [s.eval.get(key, 0) for s in stages], marker="o", label=key)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("share of held-out items")
    ax.set_title("Capabilities after each stage")
    ax.legend(fontsize=8, loc="lower right")
    ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_training(report: RunReport, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in report.stages if s.train_log]
    if not stages:
        return
    fig, axes = plt.subplots(1, len(stages), figsize=(3.6 * len(stages), 3.2), squeeze=False)
    for ax, s in zip(axes[0], stages):
        for key in CURVE_KEYS:
            points = [(row.get("step", i), row[key]) for i, row in enumerate(s.train_log) if key in row]
            if points and key != "completions/mean_length":
                ax.plot(*zip(*points), label=key.replace("rewards/", "").replace("/mean", ""))
        ax.set_title(s.name, fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


RL_PANELS = [
    ("reward and held-out accuracy", ["reward", "rewards/correctness/mean", "heldout/math_accuracy"]),
    ("entropy and KL (to the reference; at beta 0 to the start)", ["entropy", "kl"]),
    ("completion length (tokens)", ["length/correct", "length/wrong"]),
    ("groups", ["groups/all_correct", "groups/all_wrong", "groups/mixed"]),
]


def plot_rl(report: RunReport, out: Path) -> bool:
    """One row per RL stage: the curves that say whether RL is learning or just drifting."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in report.stages if any("reward" in row for row in s.train_log)]
    if not stages:
        return False
    fig, axes = plt.subplots(len(stages), len(RL_PANELS), figsize=(3.8 * len(RL_PANELS), 3.0 * len(stages)),
                             squeeze=False)
    for row_axes, s in zip(axes, stages):
        for ax, (title, keys) in zip(row_axes, RL_PANELS):
            for key in keys:
                points = [(row["step"], row[key]) for row in s.train_log if key in row and "step" in row]
                if points:
                    ax.plot(*zip(*points), marker="o" if key.startswith("heldout") else None, markersize=3,
                            label=key.replace("rewards/", "").replace("/mean", ""))
            ax.set_title(f"{s.name}: {title}", fontsize=9)
            ax.set_xlabel("step")
            if ax.lines:
                ax.legend(fontsize=6)
            else:
                ax.set_axis_off()
                ax.text(0.5, 0.5, "not logged by this stage", ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def write_report(run_dir: Path, report: RunReport) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / "report.json.tmp"
    tmp.write_text(report.model_dump_json(indent=2))
    os.replace(tmp, run_dir / "report.json")
    plot_capabilities(report, run_dir / "capabilities.png")
    plot_training(report, run_dir / "training.png")
    has_rl = plot_rl(report, run_dir / "rl.png")
    plot_budget(report, run_dir / "budget.png")
    (run_dir / "report.md").write_text(render_markdown(report) + ("\n![RL curves](rl.png)\n" if has_rl else ""))
    return run_dir / "report.md"
