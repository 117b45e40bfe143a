"""What the distilled student is taught: verified teacher replies, and for a `/no_think` prompt
whose reply was refused, the teacher's verified thinking answer after an empty think block."""
from posttrain.generation import Generation


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
        return [[Generation(replies[turns[0]["content"]], 12, False)] for turns, _ in requests]

    monkeypatch.setattr(distillation, "generate_replies", teacher_thinks)
    out = distillation.with_no_think_from_thinking(None, None, None, prompts, texts, 64)
    # Only the refused /no_think prompts are asked again, and in thinking mode.
    assert [(turns[0]["content"], thinking) for turns, thinking in asked] == [("2+3?", True), ("4+4?", True)]
    assert out[0] == "<think>\n\n</think>\n\n\\boxed{5}"
    assert distillation.trusted(out[0], prompts[0])
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
