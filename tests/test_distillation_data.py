"""What the distilled student is taught: verified teacher replies, and for a `/no_think` prompt
whose reply was refused, the teacher's verified thinking answer after an empty think block."""
from posttrain.generation.engines import Generation


def _math(question: str, answer: str, thinking: bool | None) -> dict:
    return {"prompt": [{"role": "user", "content": question}], "kind": "math", "answer": answer, "thinking": thinking}


def test_a_refused_no_think_reply_is_replaced_by_the_verified_thinking_answer(monkeypatch):
    from stages import distillation

    prompts = [_math("2+3?", "5", False), _math("4+4?", "8", False), _math("1+1?", "2", True), _math("3+3?", "6", False)]
    kept = "<think>\n\n</think>\n\n\\boxed{6}"
    texts = [None, None, None, kept]
    asked = []

    def teacher_thinks(teacher, tokenizer, chat, requests, **_):
        asked.extend(requests)
        replies = {"2+3?": "<think>\n2+3=5\n</think>\n\n\\boxed{5}", "4+4?": "<think>\n4+4=9\n</think>\n\n\\boxed{9}"}
        return [[Generation(replies[turns[0]["content"]], 12, False, thinking=thinking)] for turns, thinking in requests]

    monkeypatch.setattr(distillation, "generate_replies", teacher_thinks)
    out = distillation.with_no_think_from_thinking(None, None, None, prompts, texts, 64)
    # Only the refused /no_think prompts are asked again, and in thinking mode.
    assert [(turns[0]["content"], thinking) for turns, thinking in asked] == [("2+3?", True), ("4+4?", True)]
    assert out[0] == "<think>\n\n</think>\n\n\\boxed{5}"
    assert distillation.trusted(out[0], prompts[0], False)
    assert out[1] is None            # the thinking answer was wrong too
    assert out[2] is None            # a thinking prompt is not re-asked
    assert out[3] == kept


def test_nothing_refused_asks_the_teacher_nothing(monkeypatch):
    from stages import distillation

    def no_call(*_, **__):
        raise AssertionError("the teacher was asked")

    monkeypatch.setattr(distillation, "generate_replies", no_call)
    texts = ["<think>\n\n</think>\n\n\\boxed{5}"]
    assert distillation.with_no_think_from_thinking(None, None, None, [_math("2+3?", "5", False)], texts, 64) == texts


def _direct(question: str, answer: str) -> dict:
    return {"prompt": [{"role": "user", "content": question}], "kind": "direct", "answer": answer, "thinking": False}


def test_refused_prompts_of_the_resampled_kinds_are_sampled_again_and_the_first_verified_sample_kept(monkeypatch):
    from posttrain.config.pipeline import DistillationStageConfig
    from stages import distillation

    prompts = [_math("2+3?", "5", True), _math("4+4?", "8", False), _math("1+1?", "2", True), _direct("capital?", "Paris")]
    kept = "<think>\n1+1=2\n</think>\n\n\\boxed{2}"
    texts = [None, None, kept, None]
    samples = {"2+3?": ["<think>\n2+3=6\n</think>\n\n\\boxed{6}", "<think>\n2+3=5\n</think>\n\n\\boxed{5}",
                        "<think>\n\n</think>\n\n\\boxed{5}"],
               "4+4?": ["<think>\n4+4=8\n</think>\n\n\\boxed{8}", "<think>\n</think>\n\n\\boxed{9}", "\\boxed{8}"]}
    asked, options = [], {}

    def teacher_samples(teacher, tokenizer, chat, requests, **kwargs):
        asked.extend(requests)
        options.update(kwargs)
        return [[Generation(t, 12, False, thinking=thinking) for t in samples[turns[0]["content"]]]
                for turns, thinking in requests]

    monkeypatch.setattr(distillation, "generate_replies", teacher_samples)
    config = DistillationStageConfig(resample=3, resample_temperature=0.7, resample_kinds=["math"])
    out = distillation.with_resampled(None, None, None, config, prompts, texts, seed=5)
    # Only refused math prompts, each in its own mode, sampled `resample` times at the temperature.
    assert [(turns[0]["content"], thinking) for turns, thinking in asked] == [("2+3?", True), ("4+4?", False)]
    assert (options["do_sample"], options["num_samples"], options["temperature"], options["seed"]) == (True, 3, 0.7, 5)
    assert out[0] == "<think>\n2+3=5\n</think>\n\n\\boxed{5}"   # the first verified sample, not the wrong first one
    assert out[1] is None    # a thinking reply or a bare answer does not pass as /no_think
    assert out[2] == kept and out[3] is None   # kept as it was; the direct row's kind is not resampled


def test_resampling_is_off_by_default(monkeypatch):
    from posttrain.config.pipeline import DistillationStageConfig
    from stages import distillation

    def no_call(*_, **__):
        raise AssertionError("the teacher was asked")

    monkeypatch.setattr(distillation, "generate_replies", no_call)
    texts = [None]
    assert distillation.with_resampled(None, None, None, DistillationStageConfig(), [_math("2+3?", "5", True)], texts, 0) == texts


def test_a_reply_is_trusted_in_the_mode_its_prompt_was_rendered_in_not_the_rows_column():
    """A row without a `thinking` column that the template rendered in thinking mode (Qwen3's default):
    an empty think block is not what it asked for; where the prompt asked for no mode, either shape."""
    from stages import distillation

    row = {"prompt": [{"role": "user", "content": "Capital of France?"}], "kind": "direct", "answer": "Paris"}
    empty_think = "<think>\n\n</think>\n\nParis"
    reasoned = "<think>\nThe capital of France is Paris.\n</think>\n\nParis"
    assert not distillation.trusted(empty_think, row, True)
    assert distillation.trusted(reasoned, row, True)
    assert distillation.trusted(empty_think, row, None) and distillation.trusted(reasoned, row, None)
    math = _math("2+3?", "5", None)
    assert not distillation.trusted("<think>\n\n</think>\n\n\\boxed{5}", math, True)
    assert distillation.trusted("<think>\n\n</think>\n\n\\boxed{5}", math, None)
