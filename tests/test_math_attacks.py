"""Answers a reward-seeking policy writes to be paid without giving the answer, each scoring 0:
an unevaluated expression for a plain-number gold, words after the value that are not units, a
percent sign the gold does not have, marks that change the meaning (negations, conjugates, strike
outs, phantoms), hedges and approximations (posttrain.rewards.math; contract in its README.md).
The rule they follow: rather miss a right answer than pay a wrong one.  The forms that stay right
are checked next to them, so that closing a hole cannot quietly close an answer too."""
from __future__ import annotations

import pytest
from sympy_worker import wait_worker_ready

import posttrain.rewards.math.verify as verify_module
from posttrain.rewards import verify_row
from posttrain.rewards.math import check_gold, verify_math


def B(x: str) -> str:
    return f"<think>working</think>The answer is $\\boxed{{{x}}}$."


M, X, U, P, H = "match", "mismatch", "unevaluated", "unparsable_response", "hedged"


@pytest.fixture(autouse=True)
def generous_deadline(monkeypatch):
    """Verdicts, not speed: a loaded host must not turn a verdict into a timeout."""
    wait_worker_ready()
    monkeypatch.setattr(verify_module, "TIME_BUDGET_S", 30.0)


# (id, boxed answer, gold, reason): each pays 0
HOLES = [
    # 1. an unevaluated expression for a plain-number gold, whatever numbers it uses
    ("restate_extra_terms", "71+37+2-2", "108", U),
    ("restate_own_numbers", "100+8", "108", U),
    ("restate_no_prompt", "71 + 37", "108", U),
    ("power_for_integer", "2^{10}", "1024", U),
    ("division_to_do", "\\frac{216}{2}", "108", U),
    ("over_one", "\\frac{108}{1}", "108", U),
    ("times_one", "108 \\cdot 1", "108", U),
    ("double_negation", "--108", "108", U),
    ("root_of_square", "\\sqrt{11664}", "108", U),
    ("factorial_for_integer", "5!", "120", U),
    ("factorial_word", "5 factorial", "120", U),
    ("squared_word", "5 squared", "25", U),
    ("dozen_word", "2 dozen", "24", U),
    ("zero_times_anything", "0x", "0", U),
    ("zero_imaginary_part", "5+0i", "5", U),
    ("expression_for_fraction", "1-\\frac{1}{4}", "\\frac{3}{4}", U),
    ("expression_for_decimal", "0.5+0.25", "0.75", U),
    ("unreduced_for_fraction", "\\frac{2}{4}", "\\frac{1}{2}", U),
    ("name_eq_expression", "x = 100 + 8", "108", U),
    ("expression_in_tuple", "(0+1, 2)", "(1, 2)", U),
    ("expression_in_set", "\\{1+1, 3\\}", "\\{2, 3\\}", U),
    ("expression_in_ratio", "1+2:4", "3:4", U),
    ("percent_expression", "25+25\\%", "50\\%", U),
    # 2. words after the value that are not units
    ("word_maybe", "85 maybe", "85", P),
    ("word_wrong", "85 wrong", "85", P),
    ("word_not", "85 not", "85", P),
    ("word_approximately", "85 approximately", "85", P),
    ("word_random", "85 elephant", "85", P),
    ("word_count_noun", "85 apples", "85", P),
    ("text_maybe", "85 \\text{ maybe}", "85", P),
    ("text_ish", "85\\text{ish}", "85", P),
    ("text_two_words", "85 \\text{ or so}", "85", P),
    ("text_question", "85 \\text{ cm?}", "85", P),
    ("cjk_approximately", "85左右", "85", P),
    ("cjk_above", "85以上", "85", P),
    ("cjk_or_more", "85或更多", "85", P),
    ("cjk_random", "85鼠", "85", P),
    ("cjk_text_approximately", "85\\text{左右}", "85", P),
    ("cjk_thousand", "85千", "85", P),
    ("cjk_count_noun", "85个苹果", "85", P),
    ("percent_word", "85 percent", "85", X),
    ("percent_words", "85 \\text{ per cent}", "85", X),
    # 3. a percent sign only where the gold has one
    ("percent_for_same_number", "0.5\\%", "0.5", X),
    ("percent_for_fraction", "50\\%", "0.5", X),
    ("percent_for_number", "50\\%", "50", X),
    ("fraction_for_percent", "0.5", "50\\%", X),
    # 4. marks that change the meaning, or that the parser does not know, are never stripped
    ("not_equal_macro", "\\not= 5", "5", P),
    ("neq", "\\neq 5", "5", P),
    ("ne", "\\ne 5", "5", P),
    ("unicode_ne", "\u2260 5", "5", P),
    ("conjugate", "\\overline{3+2i}", "3+2i", P),
    ("bar_number", "\\bar{5}", "5", P),
    ("hat_number", "\\hat{5}", "5", P),
    ("vec_number", "\\vec{5}", "5", P),
    ("widehat_number", "\\widehat{5}", "5", P),
    ("overrightarrow_number", "\\overrightarrow{5}", "5", P),
    ("underline_number", "\\underline{5}", "5", P),
    ("hat_symbol", "\\hat{x}", "x", X),
    ("bar_symbol", "\\bar{z}", "z", X),
    ("segment_is_not_product", "\\overline{AB}", "AB", X),
    ("sim", "\\sim 5", "5", P),
    ("approx", "\\approx 5", "5", P),
    ("approx_name", "x \\approx 5", "5", P),
    ("unicode_approx", "\u2248 5", "5", P),
    ("pm", "\\pm 5", "5", X),
    ("mp", "\\mp 5", "5", X),
    ("negative_spacing", "-\\!5", "5", X),
    ("cancel", "\\cancel{5}", "5", P),
    ("sout", "\\sout{5}", "5", P),
    ("bcancel", "\\bcancel{5}", "5", P),
    ("xcancel", "\\xcancel{5}", "5", P),
    ("cancel_symbol", "\\cancel{x}", "x", P),
    ("neg", "\\neg 5", "5", P),
    ("lnot", "\\lnot 5", "5", P),
    ("tilde", "\\tilde{5}", "5", P),
    ("widetilde", "\\widetilde{5}", "5", P),
    ("dot", "\\dot{5}", "5", P),
    ("color", "\\color{red}{5}", "5", P),
    ("textcolor", "\\textcolor{red}{5}", "5", P),
    ("phantom", "\\phantom{5}", "5", P),
    ("phantom_digit", "5\\phantom{0}", "5", P),
    ("overset_question", "\\overset{?}{=} 5", "5", P),
    ("circ_alone", "\\circ 5", "5", P),
    ("not_in", "x \\notin \\{5\\}", "5", P),
    # 5. hedges, approximations and other ways around one exact value
    ("question_mark", "5?", "5", P),
    ("question_mark_text", "5 \\text{?}", "5", P),
    ("ellipsis", "5...", "5", P),
    ("ldots", "5\\ldots", "5", P),
    ("unicode_ellipsis", "5\u2026", "5", P),
    ("text_probably", "\\text{5, probably}", "5", X),
    ("paren_or", "5 (or 6)", "5", X),
    ("text_or", "5 \\text{ or } 6", "5", H),
    ("names_or", "x = 5 \\text{ or } x = 6", "5", H),
    ("at_least_sign", "\\geq 5", "5", P),
    ("at_least_name", "x \\geq 5", "5", X),
    ("ratio_for_number", "5:1", "5", X),
    ("about_text", "\\text{about } 5", "5", X),
    ("inverse_unit", "5 \\text{ m}^{-1}", "\\frac{1}{5}", P),
    ("mod", "5 \\pmod{7}", "5", P),
    ("equal_numbers", "5 = 5", "5", X),
    ("two_names", "x = 5, x = 6", "5", X),
    ("integer_part_brackets", "[4.5]", "4.5", P),
    ("subscript_base", "85_{10}", "85", P),
    ("boxes_differ", "5}\\boxed{6", "5", H),
]


@pytest.mark.parametrize("answer,gold,reason", [h[1:] for h in HOLES], ids=[h[0] for h in HOLES])
def test_hole_pays_nothing(answer, gold, reason):
    v = verify_math(B(answer), gold)
    assert (v.reward, v.reason) == (0.0, reason), v


def test_bare_box_keeps_its_question_mark():
    assert verify_math("so \\boxed 5?", "5").reward == 0.0
    assert verify_math("so \\boxed 5.", "5").reward == 1.0


def test_restating_pays_nothing_with_or_without_the_prompt():
    prompt = [{"role": "user", "content": "Compute 71 + 37."}]
    for boxed in ("71+37+2-2", "100 + 8", "(71+37) \\cdot 1"):
        assert verify_math(B(boxed), "108").reason == U
        assert verify_math(B(boxed), "108", "Compute 71 + 37.").reason == U
        assert verify_row(B(boxed), {"kind": "math", "answer": "108", "prompt": prompt})[0] == 0.0


# (boxed answer, gold): each still pays 1
KEEP = [
    ("108", "108"), ("108.0", "108"), ("+108", "108"), ("(108)", "108"), ("x = 108", "108"), ("108 = x", "108"),
    ("0.75", "\\frac{3}{4}"), ("\\frac{3}{4}", "0.75"), ("-\\frac{1}{2}", "-0.5"), ("\\frac{-1}{2}", "-0.5"),
    ("2\\frac{1}{2}", "2.5"), ("1.2 \\times 10^{3}", "1200"), ("10^{-2}", "0.01"), ("0.\\overline{3}", "\\frac13"),
    ("1,000", "1000"), ("1\\,000", "1000"), ("\\text{5}", "5"), ("\\mathbf{5}", "5"),
    # a gold that is not a plain number: compared by value
    ("2^{10}", "2^{10}"), ("1024", "2^{10}"), ("2^5 \\cdot 2^5", "2^{10}"), ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\sqrt{2}", "\\sqrt{2}"), ("x^2+2x+1", "(x+1)^2"), ("\\frac{2}{4}", "\\frac{2}{4}"), ("0.5", "2/4"),
    ("\\frac{1}{2}", "2/4"), ("\\frac{4}{8}", "2/4"), ("x = 1 + 2 = 3", "3"), ("f(2) = 2^2 + 1 = 5", "5"),
    # units on the allowlist
    ("85 \\text{ cm}", "85"), ("85 cm", "85"), ("85 dollars", "85"), ("85\\text{ meters}", "85"),
    ("85\\,\\mathrm{kg}", "85"), ("85 \\text{ m}^2", "85"), ("85^\\circ", "85"), ("85\u00b0", "85"),
    ("30^\\circ C", "30"), ("30\u2103", "30"), ("6 \\text{ meters per second}", "6"), ("5 cm squared", "5"),
    ("5 \\text{ square units}", "5"), ("2 \\text{ km/h}", "2"), ("3 \\text{ hours}", "3"), ("7 m", "7"),
    ("300 \\text{K}", "300"), ("\\$12.50", "12.5"), ("5 min", "5"),
    ("85个", "85"), ("85 元", "85"), ("85平方米", "85"), ("12岁", "12"), ("3\\text{小时}", "3"), ("40人", "40"),
    # value words are read with the number
    ("5 thousand", "5000"), ("5 \\text{k}", "5000"), ("2.5 million", "2500000"), ("5 hundred thousand", "500000"),
    ("3 halves", "\\frac{3}{2}"),
    # percent: a percent gold takes its number with or without the sign
    ("50\\%", "50\\%"), ("50%", "50\\%"), ("50", "50\\%"), ("50 \\%", "50%"), ("50 percent", "50\\%"),
    ("50 \\text{ per cent}", "50\\%"),
    # marks over names are their own symbols
    ("\\hat{x}", "\\hat{x}"), ("\\vec v + 1", "1 + \\vec{v}"), ("\\overline{AB}", "\\overline{AB}"),
    ("\\bar{x}+\\bar{x}", "2\\bar{x}"), ("\\alpha = 3", "3"), ("\\theta", "\\theta"),
    # a sign of relation between names and values, as the README says
    ("x > 3", "(3, \\infty)"), ("\\pm 2", "2, -2"), ("2 \\text{ or } 3", "3, 2"),
]


@pytest.mark.parametrize("answer,gold", KEEP, ids=[f"{a} | {g}" for a, g in KEEP])
def test_right_forms_still_pay(answer, gold):
    v = verify_math(B(answer), gold)
    assert (v.reward, v.reason) == (1.0, M), v


@pytest.mark.parametrize("gold", ["85 \\text{ cm}", "50\\%", "\\overline{AB}", "\\hat{x}", "2/4", "85个"])
def test_golds_with_units_and_marks_still_parse(gold):
    check_gold(gold)
