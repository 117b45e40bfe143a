"""All 25 of IFEval's instruction ids, verified: each one passes a satisfying reply and fails a
violating one through the whole reward (checkers and guard layer) and through IFEval's own checks
(posttrain.rewards.ifeval_reference); the hardening the checkers add on top of the reference's
meaning (each attack below passes the reference and earns nothing here); RLVR-IFeval's
`ground_truth` and IFEval's published rows read through the config alone; and an IFEval suite's
four accuracies beside the training verdict."""
import json

import pytest

import published_shapes as shapes
from posttrain.chat import assemble_response
from posttrain.config.pipeline import EvalSuiteConfig
from posttrain.evaluation.suites import score_suite
from posttrain.generation.engines import Generation
from posttrain.rewards import verify_row
from posttrain.rewards.ifeval_forms import RLVR_FUNCTIONS, constraints_from_ground_truth
from posttrain.rewards.ifeval_reference import REFERENCE, follows, loose_variants
from posttrain.rewards.instruction import IFEVAL_IDS, check_constraint, constraints_from_ifeval
from posttrain.rewards.instruction_guard import instruction_verdict

# (id, kwargs, prompt, a reply that follows the instruction, one that does not)
CASES = [
    ("keywords:existence", {"keywords": ["harbor", "lighthouse"]},
     "Write two sentences about a fishing town. Include the keywords harbor and lighthouse.",
     "The fishing boats rest in the harbor at dusk. A tall lighthouse guides them home through the fog.",
     "The fishing boats rest by the pier at dusk. A tall tower guides them home through the fog."),
    ("keywords:frequency", {"keyword": "river", "frequency": 3, "relation": "at least"},
     "Describe a valley. The word river should appear at least 3 times.",
     "A river runs through the valley. The river feeds the farms, and the river shines at sunset.",
     "A river runs through the valley. It feeds the farms and shines at sunset."),
    ("keywords:forbidden_words", {"forbidden_words": ["hot", "sun"]},
     "Describe a summer afternoon without using the words hot or sun.",
     "The summer afternoon was bright and lazy, with children swimming in the lake.",
     "The summer afternoon was hot and lazy, with children swimming in the lake."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
     "Write a sentence about zoo animals in which the letter z appears at least 3 times.",
     "At the zoo, the zebras grazed near a lazy lion.",
     "At the park, the horses grazed near a sleepy lion."),
    ("language:response_language", {"language": "de"},
     "Describe your favourite season. Your ENTIRE response should be in German, no other language is allowed.",
     "Mein Lieblingsjahreszeit ist der Herbst, weil die Blätter bunt werden und die Luft frisch und klar ist.",
     "My favourite season is autumn, because the leaves turn colourful and the air is fresh and clear."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"},
     "Explain what a volcano is in less than 3 sentences.",
     "A volcano is an opening in the crust of the Earth. Molten rock called magma erupts from it as lava.",
     "A volcano is an opening in the crust of the Earth. Molten rock called magma erupts from it. "
     "The lava cools into new rock. Ash can fill the sky."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "Write about coffee in 2 paragraphs separated by the markdown divider ***.",
     "Coffee beans grow on shrubs in warm highland regions.\n***\nRoasted coffee is brewed with hot water every morning.",
     "Coffee beans grow on shrubs in warm highland regions. Roasted coffee is brewed with hot water every morning."),
    ("length_constraints:number_words", {"num_words": 8, "relation": "less than"},
     "What do bees make? Answer in less than 8 words.",
     "Bees make honey and beeswax.",
     "Bees make honey, beeswax, propolis and royal jelly inside their busy hives."),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "winter"},
     "Write 2 paragraphs about mountains separated by two new lines. The 2nd paragraph must start with the word winter.",
     "Mountains rise high above the plains and the valleys.\n\nWinter covers the mountain peaks with deep snow.",
     "Mountains rise high above the plains and the valleys.\n\nSnow covers the mountain peaks each winter."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2},
     "Write a short invitation to a birthday party with at least 2 placeholders in square brackets, such as [date].",
     "You are invited to the birthday party on [date] at [address]. Bring your smile!",
     "You are invited to the birthday party on Saturday at our house. Bring your smile!"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."},
     "Write a note to a neighbour about borrowing a ladder. Add a postscript starting with P.S.",
     "Dear neighbour, may I borrow your ladder on Sunday to clean the gutters?\n\nP.S. I will return it by evening.",
     "Dear neighbour, may I borrow your ladder on Sunday to clean the gutters? I will return it by evening."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3},
     "List exactly 3 benefits of walking. Use markdown bullet points such as: * This is a point.",
     "* Walking strengthens the heart.\n* Walking lifts the mood.\n* Walking builds strong bones.",
     "* Walking strengthens the heart.\n* Walking lifts the mood."),
    ("detectable_format:constrained_response", {},
     "Is the Pacific the largest ocean? Answer with one of the following options: My answer is yes., My answer is no., "
     "My answer is maybe.",
     "My answer is yes. The Pacific Ocean is the largest ocean on Earth.",
     "The Pacific Ocean is the largest ocean on Earth."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "Describe how to plant a tree. Highlight at least 2 sections with markdown, i.e. *highlighted section*.",
     "First, *dig a wide hole* for the roots. Then *water the young tree* every day.",
     "First, dig a wide hole for the roots. Then water the young tree every day."),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Write a guide to baking bread with 2 sections. Mark the beginning of each section with Section X.",
     "Section 1\nMix flour, water, salt and yeast into a dough.\nSection 2\nBake the bread dough in a hot oven.",
     "Mix flour, water, salt and yeast into a dough, then bake the bread dough in a hot oven."),
    ("detectable_format:json_format", {},
     "Give the capital and population of France. Entire output should be wrapped in JSON format.",
     '{"country": "France", "capital": "Paris", "population": "68 million people"}',
     "The capital of France is Paris, with about 68 million people."),
    ("detectable_format:title", {},
     "Write a poem about rain. Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
     "<<Song of the Rain>>\nRain taps the window glass,\nand puddles gather on the grass.",
     "Song of the Rain\nRain taps the window glass,\nand puddles gather on the grass."),
    ("combination:two_responses", {},
     "Suggest a name for a bakery. Give two different responses separated by 6 asterisk symbols: ******.",
     "The Golden Crust bakery\n******\nThe Rising Loaf bakery",
     "The Golden Crust bakery"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "What is the boiling point of water?"},
     "What is the boiling point of water? First repeat the request word for word without change, then give your answer.",
     "What is the boiling point of water? Water boils at 100 degrees Celsius at sea level.",
     "Water boils at 100 degrees Celsius at sea level."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "Explain what a comet is. Finish your response with this exact phrase Any other questions?",
     "A comet is an icy body that grows a glowing tail near the Sun. Any other questions?",
     "A comet is an icy body that grows a glowing tail near the Sun."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "Explain how satellites help navigation. Use words with all capital letters at least 2 times.",
     "Satellites send timing signals, and GPS receivers use them to find your POSITION on any map.",
     "Satellites send timing signals, and receivers use them to find your position on any map."),
    ("change_case:english_capital", {},
     "Describe a thunderstorm. Your entire response should be in English, and in all capital letters.",
     "THE THUNDERSTORM ROLLS IN AND THUNDER SHAKES THE WINDOWS AS RAIN POURS DOWN.",
     "The thunderstorm rolls in and thunder shakes the windows as rain pours down."),
    ("change_case:english_lowercase", {},
     "Describe a thunderstorm. Your entire response should be in English, and in all lowercase letters.",
     "the thunderstorm rolls in and thunder shakes the windows as rain pours down.",
     "The thunderstorm rolls in and thunder shakes the windows as rain pours down."),
    ("punctuation:no_comma", {},
     "Describe a thunderstorm without using any commas.",
     "The thunderstorm rolls in and thunder shakes the windows as rain pours down.",
     "The thunderstorm rolls in, thunder shakes the windows, and rain pours down."),
    ("startend:quotation", {},
     "Describe a thunderstorm. Wrap your entire response with double quotation marks.",
     '"The thunderstorm rolls in and thunder shakes the windows as rain pours down."',
     "The thunderstorm rolls in and thunder shakes the windows as rain pours down."),
]


def reply(text: str) -> str:
    return assemble_response("", text)


def test_every_one_of_ifevals_25_ids_has_a_checker_a_reference_and_a_case():
    assert len(REFERENCE) == 25 and set(IFEVAL_IDS) == set(REFERENCE) == {case[0] for case in CASES}


@pytest.mark.parametrize("iid,kwargs,prompt,good,bad", CASES, ids=[case[0] for case in CASES])
def test_each_id_pays_a_reply_that_follows_it_and_not_one_that_does_not(iid, kwargs, prompt, good, bad):
    constraints = constraints_from_ifeval([iid], [kwargs])
    assert instruction_verdict(reply(good), constraints, prompt=prompt) == (1.0, "constraints_met")
    assert instruction_verdict(reply(bad), constraints, prompt=prompt) == (0.0, "constraints_failed")
    assert follows(good, iid, kwargs) and not follows(bad, iid, kwargs)   # the benchmark agrees


# Replies the reference's checks accept and ours refuse: each is what a reward-seeking policy would
# write if the reward were the reference's check (its test fails with the reference's semantics).
ATTACKS = [
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "Plant the tree *...* and water it *!!!* daily."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "Benefits of walking:\n* .\n* ?"),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "You are invited on [] at [ ]."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "May I borrow your ladder on Sunday?\nP.S."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "May I borrow your ladder? See the P.S. below."),
    ("detectable_format:title", {}, "<<!!!>>\nRain taps the window glass."),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Bread guide: Section 1 Section 2"),
    ("combination:two_responses", {}, "The Golden Crust bakery\n******\nthe golden crust   BAKERY"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "What is the boiling point of water?"},
     "What is the boiling point of water?"),
    ("detectable_format:constrained_response", {}, "My answer is yes. My answer is no. The Pacific is large."),
    ("startend:quotation", {}, '"..."'),
    ("keywords:existence", {"keywords": ["harbor", "lighthouse"]}, "The boats rest by the pier. <!-- harbor lighthouse -->"),
    ("keywords:frequency", {"keyword": "river", "frequency": 3, "relation": "at least"}, "A river runs here: riverriverriver."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
     "The horses grazed in the field. zzz"),
    ("keywords:letter_frequency", {"letter": "a", "let_frequency": 2, "let_relation": "less than"},
     "Th\u0435 c\u0430t s\u0430t on th\u0435 m\u0430t."),   # Cyrillic look-alikes of "a" and "e"
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"},
     "Satellites X Y Z help us find the way."),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"},
     "A volcano is a mountain\nMagma erupts from it\nLava cools into rock\nAsh fills the sky"),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "Coffee grows on shrubs.\n***\n...\n***\nTea grows on bushes."),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "winter"},
     "...\n\nWinter snow falls on the peaks."),
    ("language:response_language", {"language": "de"}, "12345 67890 !!!"),   # undetectable: the reference lets it pass
    ("keywords:forbidden_words", {"forbidden_words": ["sun"]}, "The s u n was bright over the lake."),
    ("punctuation:no_comma", {}, "Dark clouds roll in\uff0c thunder shakes the windows."),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "Beesmakehoneyandbeeswaxinsidehives."),
]


@pytest.mark.parametrize("iid,kwargs,text", ATTACKS, ids=[f"{a[0]}-{i}" for i, a in enumerate(ATTACKS)])
def test_what_passes_the_benchmarks_check_without_following_the_instruction_earns_nothing(iid, kwargs, text):
    assert follows(text, iid, kwargs)
    assert not all(check_constraint(reply(text), c) for c in constraints_from_ifeval([iid], [kwargs]))


def test_a_translation_is_not_off_topic_but_must_still_say_something():
    prompt = "Describe your favourite season. Your ENTIRE response should be in German, no other language is allowed."
    german = constraints_from_ifeval(["language:response_language"], [{"language": "de"}])
    assert instruction_verdict(reply("Der Herbst ist schön, weil die Blätter bunt werden."), german, prompt=prompt)[0] == 1.0
    assert instruction_verdict(reply("Ja ja ja ja"), german, prompt=prompt)[0] == 0.0


def test_a_repeated_prompt_is_format_not_content():
    prompt = "Tell me about the moon. First repeat the request word for word without change, then give your answer."
    repeat = constraints_from_ifeval(["combination:repeat_prompt"], [{"prompt_to_repeat": "Tell me about the moon."}])
    assert instruction_verdict(reply("Tell me about the moon. The moon orbits the Earth every month."), repeat,
                               prompt=prompt) == (1.0, "constraints_met")
    assert instruction_verdict(reply("Tell me about the moon. Sure, happy to help!"), repeat, prompt=prompt)[1] == "guard:generic"


@pytest.mark.parametrize("ids,kwargs,named", [
    (["language:response_language"], [{"language": "xx"}], "unknown language code"),
    (["keywords:frequency"], [{"keyword": "ai", "frequency": 2, "relation": "around about"}], "relation"),
    (["keywords:letter_frequency"], [{"letter": "ab", "let_frequency": 2, "let_relation": "at least"}], "one letter"),
    (["length_constraints:nth_paragraph_first_word"], [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}],
     "past the 2 paragraphs"),
    (["detectable_format:multiple_sections"], [{"num_sections": 2}], "needs `splitter`"),
    (["combination:repeat_prompt"], [{}], "needs `prompt`"),
    (["keywords:existence"], [{"keywords": []}], "non-empty list"),
])
def test_ifeval_kwargs_that_cannot_be_checked_are_refused_by_name(ids, kwargs, named):
    with pytest.raises(ValueError, match=named):
        constraints_from_ifeval(ids, kwargs)


def test_the_loose_reading_is_the_references():
    assert loose_variants("Sure:\n**hello**\nBye") == ["Sure:\n**hello**\nBye", "Sure:\nhello\nBye", "**hello**\nBye",
                                                       "Sure:\n**hello**", "**hello**", "hello\nBye", "Sure:\nhello",
                                                       "hello"]
    lowercase = ("change_case:english_lowercase", {})
    assert not follows("Sure! Here it is:\nthe cat sat on the warm mat all day long.", *lowercase)
    assert follows("Sure! Here it is:\nthe cat sat on the warm mat all day long.", *lowercase, loose=True)


# ---------------------------------------------------------------- RLVR-IFeval's ground_truth

RLVR_CASES = {
    "verify_keywords": {"keyword_list": ["moon"]}, "verify_keyword_frequency": {"word": "moon", "N": 2},
    "validate_forbidden_words": {"forbidden_words": ["sun"]}, "verify_letter_frequency": {"letter": "o", "N": 4},
    "validate_response_language": {"language": "en"}, "verify_paragraph_count": {"N": 2},
    "validate_word_constraint": {"N": 10, "quantifier": "around"},
    "verify_sentence_constraint": {"N": 2, "quantifier": "at most"},
    "validate_paragraphs": {"N": 2, "i": 1, "first_word": "moon"}, "verify_postscript": {"postscript_marker": "P.S."},
    "validate_placeholders": {"N": 1}, "verify_bullet_points": {"N": 2}, "validate_title": {},
    "validate_choice": {"options": "('My answer is yes.', 'My answer is no.', 'My answer is maybe.')"},
    "validate_highlighted_sections": {"N": 1}, "validate_sections": {"N": 2, "section_splitter": "Part"},
    "validate_json_format": {}, "validate_repeat_prompt": {"original_prompt": "Describe the moon."},
    "validate_two_responses": {}, "validate_uppercase": {}, "validate_lowercase": {},
    "validate_frequency_capital_words": {"N": 2, "quantifier": "at least"}, "validate_end": {"end_phrase": "The end."},
    "validate_quotation": {}, "validate_no_commas": {},
}


def test_every_ifevalg_function_maps_onto_checked_constraints():
    assert set(RLVR_CASES) == set(RLVR_FUNCTIONS) and len(RLVR_FUNCTIONS) == 25
    for name, args in RLVR_CASES.items():
        assert constraints_from_ground_truth(shapes._ground_truth(name, **args)), name


@pytest.mark.parametrize("func,args,good,bad", [
    ("verify_keyword_frequency", {"word": "moon", "N": 2}, "The moon is bright. The moon is full.",
     "The moon is bright. The moon is full. The moon is high."),   # Open-Instruct's meaning: exactly N times
    ("verify_letter_frequency", {"letter": "o", "N": 4}, "Look at the moon.", "Look at the cool moon tonight."),
    ("validate_word_constraint", {"N": 10, "quantifier": "around"},
     "The moon rises slowly over the calm dark sea tonight.", "The moon rises."),
    ("verify_sentence_constraint", {"N": 2, "quantifier": "around"}, "The moon rises. It glows.", "The moon rises."
     " It glows. It sets. It fades. Stars stay."),
    ("validate_choice", {"options": ["a) yes", "b) no"]}, "The answer is a) yes, the moon orbits Earth.",
     "The moon orbits Earth."),
    ("validate_sections", {"N": 2, "section_splitter": "Part"}, "Part 1\nThe moon rises.\nPart 2\nThe moon sets.",
     "The moon rises and sets."),
])
def test_rlvr_functions_keep_open_instructs_meaning(func, args, good, bad):
    constraints = constraints_from_ground_truth(shapes._ground_truth(func, **args))
    assert all(check_constraint(reply(good), c) for c in constraints)
    assert not all(check_constraint(reply(bad), c) for c in constraints)


def _load(tmp_path, yaml_text: str) -> dict:
    from posttrain.config.loading import load_config
    from posttrain.data.prepared import load_all

    (tmp_path / "config.yaml").write_text(yaml_text)
    return load_all(load_config(tmp_path / "config.yaml", project_root=tmp_path), require=False)


RLVR_YAML = """
data:
  general_prompts:
    - {path: data/RLVR-IFeval/data/train-00000-of-00001.parquet, kind: instruction}
"""


def test_rlvr_ifeval_is_read_through_the_config_alone(tmp_path):
    shapes.write_rlvr_ifeval(tmp_path / "data")
    rows = _load(tmp_path, RLVR_YAML)["general_prompts"].rows
    assert [r["constraints"] for r in rows] == [
        [{"type": "lowercase"}, {"type": "language", "language": "en", "detect": True}],
        [{"type": "keyword_frequency", "value": "light", "relation": "exactly", "count": 3}],
        [{"type": "min_words", "value": 12}]]
    bad = [shapes.RLVR_GOOD[0].capitalize(), shapes.RLVR_GOOD[1] + " Light travels fast.", "A sunny beach morning."]
    for row, good, wrong in zip(rows, shapes.RLVR_GOOD, bad, strict=True):
        assert verify_row(reply(good), row) == (1.0, "constraints_met"), row["prompt"]
        assert verify_row(reply(wrong), row) == (0.0, "constraints_failed"), row["prompt"]


def test_an_unknown_ifevalg_function_is_refused_naming_file_row_and_column(tmp_path):
    from posttrain.data.files import DatasetError

    rows = [*shapes.RLVR_IFEVAL, shapes._rlvr("Write a haiku.", shapes._ground_truth("validate_haiku"), "Haiku", "")]
    shapes.write_rlvr_ifeval(tmp_path / "data", rows)
    with pytest.raises(DatasetError, match=r"train-00000-of-00001\.parquet row 3: column 'ground_truth'.*validate_haiku"):
        _load(tmp_path, RLVR_YAML)


# ---------------------------------------------------------------- IFEval as published, and its four accuracies

def test_ifeval_rows_keep_their_ids_with_the_merged_schemas_nulls_dropped(tmp_path):
    shapes.write_ifeval(tmp_path / "data")
    loaded = _load(tmp_path, """
data:
  eval:
    - {name: ifeval, kind: instruction, mode: row, sources: {path: data/IFEval/data/train-00000-of-00001.parquet}}
""")
    rows = loaded["eval:ifeval"].rows
    assert rows[0]["ifeval"] == {"instruction_id_list": shapes.IFEVAL[0]["instruction_id_list"],
                                 "kwargs": [{"num_highlights": 2}, {"relation": "less than", "num_words": 300}]}
    assert rows[2]["constraints"] == [{"type": "placeholders", "count": 3}, {"type": "postscript", "marker": "P.S."}]
    for row, good in zip(rows, shapes.IFEVAL_GOOD):
        assert verify_row(reply(good), row) == (1.0, "constraints_met"), row["prompt"]


def test_an_ifeval_suite_reports_the_four_accuracies_beside_what_training_pays():
    rows = [{"prompt": [{"role": "user", "content": r["prompt"]}], "kind": "instruction", "language": "en",
             "constraints": constraints_from_ifeval(r["instruction_id_list"], r["kwargs"]),
             "ifeval": {"instruction_id_list": r["instruction_id_list"],
                        "kwargs": [{k: v for k, v in kw.items() if v is not None} for kw in r["kwargs"]]}}
            for r in shapes.IFEVAL[:2]]
    sure = "Sure! Here is my limerick:\n" + shapes.IFEVAL_GOOD[1]   # a capital in its first line: loose only
    suite = EvalSuiteConfig(name="ifeval", kind="instruction", mode="row", sources={"path": "unused.jsonl"})
    metrics, per_item = score_suite(suite, rows, [[Generation(reply(shapes.IFEVAL_GOOD[0]), 90, False)],
                                                  [Generation(reply(sure), 60, False)]])
    assert metrics["ifeval/accuracy"] == 0.5 and metrics["ifeval/guard_overrides"] == 0.0
    assert metrics["ifeval/ifeval_prompt_strict"] == 0.5 and metrics["ifeval/ifeval_prompt_loose"] == 1.0
    assert metrics["ifeval/ifeval_instruction_strict"] == pytest.approx(2 / 3)
    assert metrics["ifeval/ifeval_instruction_loose"] == 1.0
    assert per_item["ifeval/ifeval_prompt_strict"] == [1.0, 0.0] and "ifeval/ifeval_instruction_strict" not in per_item
    cut, _ = score_suite(suite, rows[:1], [[Generation(reply(shapes.IFEVAL_GOOD[0]), 90, True)]])
    assert cut["ifeval/ifeval_prompt_loose"] == 0.0   # cut off at the budget: nothing followed
    plain = [{k: v for k, v in row.items() if k != "ifeval"} for row in rows]
    assert "ifeval/ifeval_prompt_strict" not in score_suite(suite, plain, [[Generation("x", 1, False)]] * 2)[0]


def test_the_reference_module_reads_kwargs_the_way_ifeval_stores_them():
    assert json.loads(json.dumps(shapes.IFEVAL[0]["kwargs"]))[1]["num_words"] == 300
    assert follows("Japan *is* lovely and *so* calm.", "detectable_format:number_highlighted_sections", {"num_highlights": 2})


def test_a_quoted_reply_ends_with_its_last_words():
    both = constraints_from_ifeval(["startend:quotation", "startend:end_checker"], [{}, {"end_phrase": "Any other questions?"}])
    assert all(check_constraint(reply('"A comet is an icy body with a tail. Any other questions?"'), c) for c in both)


def test_the_rewrite_agrees_with_the_reference_itself_on_the_benchs_replies(tmp_path):
    """posttrain.rewards.ifeval_reference against if-verifiable (the `bench` extra; skipped without it)."""
    pytest.importorskip("if_verifiable")
    import importlib.util
    import logging

    import nltk

    spec = importlib.util.spec_from_file_location("ifeval_agreement", shapes.Path(__file__).parents[1] / "bench" /
                                                  "ifeval_agreement.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.write_punkt_data(tmp_path)
    nltk.data.path.insert(0, str(tmp_path))
    logging.disable(logging.ERROR)
    try:
        for iid, (kwargs, good, bad) in bench.SPECS.items():
            ref = bench.reference_checker(iid, kwargs)
            for text in (p for base in good + bad for p in bench.perturbations(base).values()):
                assert follows(text, iid, kwargs) == bool(ref.check_following(text)), (iid, text)
    finally:
        nltk.data.path.remove(str(tmp_path))
        logging.disable(logging.NOTSET)


def test_a_choice_is_an_option_said_as_words_and_only_one_of_them():
    choice = constraints_from_ground_truth(shapes._ground_truth("validate_choice", options=["A", "B", "C", "D"]))
    # read as substrings, "a", "b" and "c" are all in this reply ("apples", "because"): no single choice
    assert all(check_constraint(reply("The answer is B: apples fall because of gravity."), c) for c in choice)
    assert not all(check_constraint(reply("Apples fall because of gravity."), c) for c in choice)
    assert not all(check_constraint(reply("It is A or B."), c) for c in choice)
