"""bench/profile_run.py: every progress bar of a make-run log, once, at its last state, in its stage."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))   # as the bench scripts import it

from profile_run import bars, markdown, profile  # noqa: E402

LOG = (
    "pretraining 3.2M:  50%|#####     | 300/600 [04:00<04:00,  1.25step/s]\r"
    "pretraining 3.2M: 100%|##########| 600/600 [08:54<00:00,  1.12step/s]\n"
    "15:37:15.329 | INFO    | Flow run 'x' - role 'general_prompts': upsampled\n"
    "evaluating base: 100%|##########| 1316/1316 [01:01<00:00, 21.5gen/s]\n"
    " 50%|#####     | 100/200 [01:00<01:00,  1.6it/s]\r"
    "100%|##########| 200/200 [02:23<00:00,  1.4it/s]\n"
    "evaluating cold_start_sft: 100%|##########| 1316/1316 [00:31<00:00, 42gen/s]\n"
    "15:41:26.117 | INFO    | Flow run 'x' - cold_start_sft: gate passed; {}\n"
    "  0%|          | 0/60 [00:00<?, ?it/s]\r"
    "100%|##########| 60/60 [05:35<00:00,  5.6s/it]\n"
    "evaluating reasoning_rl: 100%|##########| 1316/1316 [00:29<00:00, 45gen/s]\n"
    "15:47:33.876 | INFO    | Flow run 'x' - reasoning_rl: gate FAILED; {}\n"
)


def test_each_bar_is_counted_once_at_its_last_state_in_its_stage():
    found = [(b["stage"], b["desc"], b["s"]) for b in bars(LOG)]
    assert found == [("world", "pretraining 3.2M", 534), ("base", "evaluating base", 61),
                     ("cold_start_sft", "", 143), ("cold_start_sft", "evaluating cold_start_sft", 31),
                     ("reasoning_rl", "", 335), ("reasoning_rl", "evaluating reasoning_rl", 29)]


def test_the_table_puts_set_up_world_and_stages_beside_their_walls(tmp_path):
    log, report = tmp_path / "make_run.log", tmp_path / "report.json"
    log.write_text(LOG)
    report.write_text(json.dumps({"run_id": "r", "wall_s": 1200.0, "stages": [
        {"name": "base", "wall_s": 0.0}, {"name": "cold_start_sft", "wall_s": 180.0},
        {"name": "reasoning_rl", "wall_s": 370.0}]}))
    result = profile(log, report, total_wall_s=1260.0)
    assert list(result["stages"]) == ["set-up", "world", "base", "cold_start_sft", "reasoning_rl"]
    assert result["stages"]["set-up"]["wall_s"] == 60.0
    assert result["stages"]["world"]["wall_s"] == 1200.0 - 550.0 - 61   # the flow less the stages and the base evaluation
    assert result["stages"]["cold_start_sft"]["by_kind"] == {"training": 143, "evaluation": 31}
    table = markdown(result)
    assert "| cold_start_sft | 180 |  | 31 | 143 |  |  | 6 |" in table
