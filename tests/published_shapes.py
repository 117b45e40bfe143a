"""Local files in the shapes the datasets everybody post-trains on are published in: the same column
names, types and nesting (lists of structs, JSON inside string columns, all-null columns and the
nulls of merged schemas), a few rows each, with the hard rows those datasets really have (GSM8K's
thousands separators and negatives, MATH's nested braces and its rows without a box or a level,
OpenR1's proof problems, a truncated OpenThoughts trace). The text is written here; the schemas
follow the dataset cards (`dataset_info.features`) of:

- openai/gsm8k (main): question, answer ("... <<48/2=24>>24 ...\\n#### 72"), parquet
- HuggingFaceH4/MATH-500: problem, solution, answer, subject, level (int), unique_id, JSONL
- hendrycks/competition_math, EleutherAI/hendrycks_math: problem, level ("Level 2"), type, solution
- AI-MO/NuminaMath-CoT: source, problem, solution, messages [{content, role}]
- open-r1/OpenR1-Math-220k (default): problem, solution, answer, problem_type, question_type, source,
  uuid, is_reasoning_complete [bool], generations [str], correctness_math_verify [bool],
  correctness_llama [bool] | null, finish_reasons [str] | null, correctness_count, messages
- open-thoughts/OpenThoughts-114k: default (system, conversations [{from, value}]) and metadata
  (problem, deepseek_reasoning, deepseek_solution, ground_truth_solution, domain, source,
  test_cases, starter_code: strings, null on math rows)
- simplescaling/s1K: solution, question, cot_type, source_type, metadata (a Python dict's repr),
  cot (null), thinking_trajectories [str], attempt
- ShareGPT (anon8231489123/ShareGPT_Vicuna_unfiltered): a JSON list of {id, conversations [{from,
  value}]}, from human / gpt / system
- PrimeIntellect/verifiable-coding-problems: verification_info is JSON text
  ({"language", "test_cases": [{"fn_name", "input", "output", "type"}]}; a function_call case's
  input is the argument list, its output the return value in a one-element list)
- google-research-datasets/mbpp (full): task_id (int), text, code, test_list [str], test_setup_code,
  challenge_test_list [str]
- openai/openai_humaneval and evalplus/humanevalplus: task_id ("HumanEval/0"), prompt,
  canonical_solution, test (`def check(candidate)`), entry_point
- BAAI/TACO (APPS's columns and more): question, solutions (JSON text), starter_code, input_output
  (JSON text: inputs, outputs, fn_name on call-based rows), difficulty ("EASY"), source, url, ...
- google/IFEval: key (int), prompt, instruction_id_list [str], kwargs [struct of every id's arguments,
  null where an id does not take one (the merged schema of the parquet conversion)]
- allenai/RLVR-IFeval: messages [{content, role}], ground_truth (JSON text: func_name and every
  IFEvalG argument, null where unused), dataset, constraint_type, constraint
- nvidia/Llama-Nemotron-Post-Training-Dataset: input [{role, content}], output, reasoning ("on" /
  "off"), system_prompt, category, license, generator, used_in_training, version
- HuggingFaceH4/ultrafeedback_binarized (train_prefs): prompt, prompt_id, chosen / rejected / messages
  [{content, role}], score_chosen, score_rejected (float)
"""
from __future__ import annotations

import json
from pathlib import Path

OPEN_THOUGHTS_SYSTEM = (
    "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking "
    "process before providing the final precise and accurate solutions. Please structure your response into "
    "two main sections: Thought and Solution. In the Thought section, detail your reasoning process using "
    "the specified format: <|begin_of_thought|> {thought with steps separated with '\\n\\n'} "
    "<|end_of_thought|> Each step should include detailed considerations. In the Solution section, present "
    "the final solution: <|begin_of_solution|> {final formatted, precise, and clear solution} "
    "<|end_of_solution|> Now, try to solve the following question through the above guidelines:")


def _parquet(path: Path, rows: list[dict]) -> Path:
    from datasets import Dataset

    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(path))
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------- math prompts with gold answers

GSM8K = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
               "altogether in April and May.\n#### 72"},
    {"question": "A library has 617 books on each of its 2 floors. How many books does it have in all?",
     "answer": "The library has 617 * 2 = <<617*2=1234>>1,234 books.\n#### 1,234"},
    {"question": "The temperature was 7 degrees at noon and fell 12 degrees by midnight. What was the "
                 "temperature at midnight?",
     "answer": "At midnight it was 7 - 12 = <<7-12=-5>>-5 degrees.\n#### -5"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                 "How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
               "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
]
GSM8K_GOLD = ["72", "1234", "-5", "10"]


def write_gsm8k(root: Path) -> Path:
    return _parquet(root / "gsm8k" / "main" / "train-00000-of-00001.parquet", GSM8K)


MATH500 = [
    {"problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  Enter your answer in "
                "the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 \\pi.$",
     "solution": "We have that $r = \\sqrt{0^2 + 3^2} = 3.$  Also, the point is on the positive $y$-axis, so "
                 "$\\theta = \\frac{\\pi}{2}.$\n\nTherefore, the polar coordinates are "
                 "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
     "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
     "unique_id": "test/precalculus/807.json"},
    {"problem": "If $2x = 1$, what is $x$?",
     "solution": "Dividing both sides by 2 gives $x = \\boxed{\\frac{1}{2}}$.",
     "answer": "\\frac{1}{2}", "subject": "Prealgebra", "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "Evelyn ran 4.5 miles in 1.25 hours and Briana ran 2 miles in 1 hour. Who had the greater "
                "average speed?",
     "solution": "Evelyn's speed is $4.5/1.25 = 3.6$ miles an hour, Briana's 2. So $\\boxed{\\text{Evelyn}}$ "
                 "was faster.",
     "answer": "\\text{Evelyn}", "subject": "Algebra", "level": 2, "unique_id": "test/algebra/1349.json"},
]
MATH500_GOLD = ["\\left( 3, \\frac{\\pi}{2} \\right)", "\\frac{1}{2}", "\\text{Evelyn}"]


def write_math500(root: Path) -> Path:
    return _jsonl(root / "MATH-500" / "test.jsonl", MATH500)


COMPETITION_MATH = [
    {"problem": "Simplify $\\frac{3}{6}$.", "level": "Level 1", "type": "Prealgebra",
     "solution": "Both terms share a factor of 3, so $\\frac{3}{6} = \\boxed{\\frac{1}{2}}$."},
    {"problem": "What is the sum of the roots of $x^2 - 5x + 6 = 0$?", "level": "Level 2", "type": "Algebra",
     "solution": "The roots are $2$ and $3$ (we check: $\\boxed{2}$ works), so their sum is $\\boxed{5}$."},
    {"problem": "Compute $\\dbinom{9}{2}$.", "level": "Level 3", "type": "Counting & Probability",
     "solution": "$\\dbinom{9}{2} = \\dfrac{9 \\times 8}{2} = \\boxed{36}$."},
    # published without a box (a handful of MATH solutions state the answer in words)
    {"problem": "Is 91 prime?", "level": "Level 1", "type": "Number Theory",
     "solution": "No: $91 = 7 \\times 13$."},
    # and with a level of "Level ?"
    {"problem": "Find $x$ if $x + 1 = 3$.", "level": "Level ?", "type": "Algebra",
     "solution": "$x = \\boxed{2}$."},
]
COMPETITION_MATH_GOLD = ["\\frac{1}{2}", "5", "36"]


def write_competition_math(root: Path) -> Path:
    return _parquet(root / "competition_math" / "train.parquet", COMPETITION_MATH)


NUMINA_COT = [
    {"source": "synthetic_math", "problem": "What is the sum of 17 and 22?",
     "solution": "We add the two numbers: $17 + 22 = 39$. Therefore, the sum is $\\boxed{39}$."},
    {"source": "olympiads", "problem": "Find $a$ such that $\\frac{a}{4} = \\frac{1}{8}$.",
     "solution": "Multiplying both sides by 4 gives $a = \\frac{4}{8}$. Simplifying, "
                 "$a = \\boxed{\\frac{1}{2}}$."},
    {"source": "cn_k12", "problem": "Prove that the sum of two even numbers is even.",
     "solution": "Let the numbers be $2m$ and $2n$. Their sum is $2(m + n)$, which is even. The proof is complete."},
]
for _row in NUMINA_COT:
    _row["messages"] = [{"content": _row["problem"], "role": "user"}, {"content": _row["solution"], "role": "assistant"}]
NUMINA_GOLD = ["39", "\\frac{1}{2}"]


def write_numina_cot(root: Path) -> Path:
    return _parquet(root / "NuminaMath-CoT" / "data" / "train-00000-of-00005.parquet", NUMINA_COT)


def _r1(reasoning: str, answer: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n\n{answer}"


OPENR1 = []
for _problem, _answer, _qtype, _reasoning, _final in [
    ("Find the value of $3 \\cdot 4 + 2$.", "14", "math-word-problem", "3 times 4 is 12, plus 2 is 14.",
     "The value is $\\boxed{14}$."),
    ("Let $a, b > 0$. Prove that $a^2 + b^2 \\ge 2ab$.", "proof", "proof", "(a - b)^2 >= 0 expands to it.",
     "Since $(a-b)^2 \\ge 0$, we get $a^2 + b^2 \\ge 2ab$."),
    ("Show that $\\sqrt{2}$ is irrational.", "Proof", "proof", "Assume p/q in lowest terms...",
     "Both p and q would be even, a contradiction."),
    ("Prove there are infinitely many primes.", "proof omitted", "proof", "Euclid's argument.",
     "Multiply all primes and add one."),
    ("Describe all functions $f$ with $f(x + y) = f(x) + f(y)$ that are continuous.", "See solution",
     "math-word-problem", "Cauchy's equation.", "They are $f(x) = cx$."),
    ("What is $\\frac{1}{2} + \\frac{1}{4}$?", "\\frac{3}{4}", "math-word-problem", "2/4 + 1/4 = 3/4.",
     "$\\boxed{\\frac{3}{4}}$"),
]:
    OPENR1.append({
        "problem": _problem, "solution": _reasoning + " " + _final, "answer": _answer, "problem_type": "Algebra",
        "question_type": _qtype, "source": "olympiads", "uuid": f"0000-{len(OPENR1)}",
        "is_reasoning_complete": [True, True], "generations": [_r1(_reasoning, _final), _r1(_reasoning, _final)],
        "correctness_math_verify": [True, False],
        # judged by Llama for some 12% of rows only: null elsewhere (the merged schema)
        "correctness_llama": None if len(OPENR1) % 2 else [True, True],
        "finish_reasons": None if len(OPENR1) % 3 else ["stop", "stop"], "correctness_count": 1,
        "messages": [{"content": _problem, "role": "user"}, {"content": _r1(_reasoning, _final), "role": "assistant"}]})
OPENR1_GOLD = {0: "14", 5: "\\frac{3}{4}"}   # rows 1-4 are proofs and a non-answer


def write_openr1(root: Path) -> Path:
    return _parquet(root / "OpenR1-Math-220k" / "data" / "train-00000-of-00010.parquet", OPENR1)


# ---------------------------------------------------------------- long-CoT SFT traces


def _open_thoughts_reply(reasoning: str, solution: str, *, cut: bool = False) -> str:
    text = f"<|begin_of_thought|>\n\n{reasoning}\n\n"
    if cut:   # a trace cut at the generation budget: no end of thought, no solution
        return text
    return text + f"<|end_of_thought|>\n\n<|begin_of_solution|>\n\n{solution}\n\n<|end_of_solution|>"


OPEN_THOUGHTS = [
    {"system": OPEN_THOUGHTS_SYSTEM, "conversations": [
        {"from": "user", "value": "Return your final response within \\boxed{}. What is 6 times 7?"},
        {"from": "assistant", "value": _open_thoughts_reply("Okay, so 6 times 7. 6 times 7 is 42.",
                                                            "The product is $\\boxed{42}$.")}]},
    {"system": OPEN_THOUGHTS_SYSTEM, "conversations": [
        {"from": "user", "value": "Return your final response within \\boxed{}. What is 100 divided by 4?"},
        {"from": "assistant", "value": _open_thoughts_reply("Hmm, 4 times 25 is 100, so 25.",
                                                            "$100 / 4 = \\boxed{25}$")}]},
    {"system": OPEN_THOUGHTS_SYSTEM, "conversations": [
        {"from": "user", "value": "Return your final response within \\boxed{}. What is 2 to the 10th power?"},
        {"from": "assistant", "value": _open_thoughts_reply("Let me double 2 ten times: 2, 4, 8,", "", cut=True)}]},
]


def write_open_thoughts(root: Path) -> Path:
    return _parquet(root / "OpenThoughts-114k" / "data" / "train-00000-of-00006.parquet", OPEN_THOUGHTS)


OPEN_THOUGHTS_METADATA = [
    {"problem": "What is 9 squared?", "deepseek_reasoning": "Okay, 9 squared is 9 times 9, which is 81.",
     "deepseek_solution": "$9^2 = \\boxed{81}$", "ground_truth_solution": "$9^2 = 81$, so the answer is $\\boxed{81}$.",
     "domain": "math", "source": "synthetic_math", "test_cases": None, "starter_code": None},
    {"problem": "Write a function that returns the sum of a list.", "deepseek_reasoning": "I can use sum().",
     "deepseek_solution": "```python\ndef total(xs):\n    return sum(xs)\n```", "ground_truth_solution": None,
     "domain": "code", "source": "taco",
     "test_cases": json.dumps({"inputs": [[[1, 2]]], "outputs": [3], "fn_name": "total"}), "starter_code": ""},
]


def write_open_thoughts_metadata(root: Path) -> Path:
    return _parquet(root / "OpenThoughts-114k" / "metadata" / "train-00000-of-00012.parquet", OPEN_THOUGHTS_METADATA)


S1K = [
    {"solution": "128", "question": "Given a rational number, write it as a fraction in lowest terms and calculate "
                                    "the product of the resulting numerator and denominator. For how many rational "
                                    "numbers between 0 and 1 will $20!$ be the resulting product?",
     "cot_type": "math", "source_type": "qq8933/AIME_1983_2024",
     "metadata": "{'ID': '1991-5', 'Year': 1991, 'Problem Number': 5, 'Part': None}", "cot": None,
     "thinking_trajectories": ["Alright, so I need to figure out how many rational numbers between 0 and 1 have "
                               "20! as the product of numerator and denominator. 20! has 8 distinct primes, each "
                               "goes wholly to one side: 2^8 = 256 splits, half of them below 1: 128."],
     "attempt": "Each of the 8 primes of $20!$ goes to the numerator or the denominator, and half of the "
                "$2^8$ splits are below 1. The answer is $\\boxed{128}$."},
    {"solution": "The answer is 6", "question": "How many edges does a tetrahedron have?", "cot_type": "math",
     "source_type": "AI-MO/NuminaMath-CoT/aops_forum", "metadata": "{'source': 'aops_forum'}", "cot": None,
     "thinking_trajectories": ["Four vertices, each pair joined: 4 choose 2 = 6."],
     "attempt": "A tetrahedron has $\\binom{4}{2} = \\boxed{6}$ edges."},
]


def write_s1k(root: Path) -> Path:
    return _parquet(root / "s1K" / "data" / "train-00000-of-00001.parquet", S1K)


SHAREGPT = [
    {"id": "QWJhYvA_0", "conversations": [
        {"from": "human", "value": "Summarise: The cat sat on the mat all afternoon."},
        {"from": "gpt", "value": "A cat spent the afternoon on a mat."}]},
    {"id": "i6IyJda_0", "conversations": [
        {"from": "system", "value": "You are a terse assistant."},
        {"from": "human", "value": "Name a primary colour."},
        {"from": "gpt", "value": "Red."},
        {"from": "human", "value": "Another?"},
        {"from": "gpt", "value": "Blue."}]},
]


def write_sharegpt(root: Path) -> Path:
    path = root / "ShareGPT" / "ShareGPT_V3_unfiltered_cleaned_split.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SHAREGPT, ensure_ascii=False), encoding="utf-8")
    return path


VERIFIABLE_CODING = [
    {"source": "codeforces", "task_type": "verifiable_code", "in_source_id": "1A",
     "prompt": "Read n and then n integers; print their sum.",
     "gold_standard_solution": "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```",
     "verification_info": json.dumps({"language": "python", "test_cases": [
         {"fn_name": None, "input": "3\n1 2 3\n", "output": "6\n", "type": "stdin_stdout"},
         {"fn_name": None, "input": "1\n-4\n", "output": "-4\n", "type": "stdin_stdout"}]}),
     "metadata": json.dumps({"difficulty": "800", "time_limit": "1 second"}), "problem_id": "vfc_1"},
    {"source": "apps", "task_type": "verifiable_code", "in_source_id": "4262",
     "prompt": "Solve the following coding problem using the programming language python:\n\nWrite a function "
               "`digits_sum(n)` that returns the sum of the decimal digits of the non-negative integer n.",
     "gold_standard_solution": "```python\ndef digits_sum(n):\n    return sum(map(int, str(n)))\n```",
     "verification_info": json.dumps({"language": "python", "test_cases": [
         {"fn_name": "digits_sum", "input": [123], "output": [6], "type": "function_call"},
         {"fn_name": "digits_sum", "input": [0], "output": [0], "type": "function_call"},
         {"fn_name": "digits_sum", "input": [9875], "output": [29], "type": "function_call"}]}),
     "metadata": json.dumps({"difficulty": "introductory"}), "problem_id": "vfc_2"},
]


def write_verifiable_coding(root: Path) -> Path:
    return _parquet(root / "verifiable-coding-problems" / "data" / "train-00000-of-00010.parquet", VERIFIABLE_CODING)


NEMOTRON = [
    {"input": [{"role": "user", "content": "What is 5 plus 8?"}],
     "output": "<think>\n5 plus 8 is 13.\n</think>\n\nThe answer is $\\boxed{13}$.", "category": "math",
     "license": "cc-by-4.0", "reasoning": "on", "generator": "DeepSeek-R1", "used_in_training": "Ultra, Nano",
     "version": "v1", "system_prompt": "detailed thinking on"},
    {"input": [{"role": "user", "content": "Say hello in French."}], "output": "Bonjour.", "category": "chat",
     "license": "cc-by-4.0", "reasoning": "off", "generator": "Llama-3.3-70B-Instruct",
     "used_in_training": "Ultra, Nano", "version": "v1", "system_prompt": "detailed thinking off"},
]


def write_nemotron(root: Path) -> Path:
    return _jsonl(root / "Llama-Nemotron" / "SFT" / "chat.jsonl", NEMOTRON)


# ---------------------------------------------------------------- code tests as published (posttrain.data.code_tests)

# google-research-datasets/mbpp (full): task_id int32, text, code, test_list [str], test_setup_code,
# challenge_test_list [str]; the last row's `in` comparison is no call and literal (a forgeable test)
MBPP = [
    {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character from "
                            "the string.",
     "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
             "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
             "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
     "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"',
                   'assert remove_Occ("PHP","P") == "H"'],
     "test_setup_code": "", "challenge_test_list": ['assert remove_Occ("hellolloll","l") == "helollol"',
                                                    'assert remove_Occ("","l") == ""']},
    {"task_id": 2, "text": "Write a function to find the shared elements from the given two lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n"
             "  return (res) ",
     "test_list": ["assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                   "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
                   "assert set(similar_elements((11, 12, 14, 13),(17, 15, 14, 13))) == set((13, 14))"],
     "test_setup_code": "", "challenge_test_list": []},
    {"task_id": 82, "text": "Write a function to find the volume of a sphere.",
     "code": "import math\r\ndef volume_sphere(r):\r\n  volume=(4/3)*math.pi*r*r*r\r\n  return volume",
     "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)",
                   "assert math.isclose(volume_sphere(25), 65449.84694978735, rel_tol=0.001)",
                   "assert math.isclose(volume_sphere(20), 33510.32163829113, rel_tol=0.001)"],
     "test_setup_code": "import math", "challenge_test_list": []},
    {"task_id": 900, "text": "Write a function to pick a number between a and b inclusive.",
     "code": "def pick_between(a, b):\r\n  return (a + b) // 2",
     "test_list": ["assert pick_between(1, 5) in range(1, 6)", "assert pick_between(3, 3) == 3",
                   "assert pick_between(-4, 0) in range(-4, 1)"],
     "test_setup_code": "", "challenge_test_list": []},
]


def write_mbpp(root: Path) -> Path:
    return _parquet(root / "mbpp" / "full" / "train-00000-of-00001.parquet", MBPP)


_HUMANEVAL_METADATA = "\n\nMETADATA = {\n    'author': 'jt',\n    'dataset': 'test'\n}\n\n\n"
# openai/openai_humaneval: task_id "HumanEval/0", prompt, canonical_solution, test, entry_point
HUMANEVAL = [
    {"task_id": "HumanEval/0",
     "prompt": "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
               "    \"\"\" Check if in given list of numbers, are any two numbers closer to each other than\n"
               "    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
               "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n    \"\"\"\n",
     "canonical_solution": "    for idx, elem in enumerate(numbers):\n        for idx2, elem2 in enumerate(numbers):\n"
                           "            if idx != idx2:\n                distance = abs(elem - elem2)\n"
                           "                if distance < threshold:\n                    return True\n\n"
                           "    return False\n",
     "test": _HUMANEVAL_METADATA + "def check(candidate):\n"
             "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True\n"
             "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False\n"
             "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True\n"
             "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False\n"
             "    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True\n"
             "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True\n"
             "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) == False\n\n",
     "entry_point": "has_close_elements"},
    {"task_id": "HumanEval/2",
     "prompt": "\n\ndef truncate_number(number: float) -> float:\n    \"\"\" Given a positive floating point number, it "
               "can be decomposed into\n    and integer part (largest integer smaller than given number) and decimals\n"
               "    (leftover part always smaller than 1).\n\n    Return the decimal part of the number.\n"
               "    >>> truncate_number(3.5)\n    0.5\n    \"\"\"\n",
     "canonical_solution": "    return number % 1.0\n",
     "test": _HUMANEVAL_METADATA + "def check(candidate):\n    assert candidate(3.5) == 0.5\n"
             "    assert abs(candidate(1.33) - 0.33) < 1e-6\n    assert abs(candidate(123.456) - 0.456) < 1e-6\n",
     "entry_point": "truncate_number"},
    # a helper in the prompt, and a check that loops over random inputs (a forgeable test)
    {"task_id": "HumanEval/50",
     "prompt": "\n\ndef encode_shift(s: str):\n    \"\"\"\n    returns encoded string by shifting every character by 5 in "
               "the alphabet.\n    \"\"\"\n    return \"\".join([chr(((ord(ch) + 5 - ord(\"a\")) % 26) + ord(\"a\")) "
               "for ch in s])\n\n\ndef decode_shift(s: str):\n    \"\"\"\n    takes as input string encoded with "
               "encode_shift function. Returns decoded string.\n    \"\"\"\n",
     "canonical_solution": "    return \"\".join([chr(((ord(ch) - 5 - ord(\"a\")) % 26) + ord(\"a\")) for ch in s])\n",
     "test": "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    from random import randint, choice\n    import copy\n"
             "    import string\n\n    letters = string.ascii_lowercase\n    for _ in range(100):\n"
             "        str = ''.join(choice(letters) for i in range(randint(10, 20)))\n"
             "        encoded_str = encode_shift(str)\n        assert candidate(copy.deepcopy(encoded_str)) == str\n\n",
     "entry_point": "decode_shift"},
]

# evalplus/humanevalplus: the same columns; `test` checks every input of a list in one loop
HUMANEVAL_PLUS = [
    {"task_id": "HumanEval/2", "prompt": HUMANEVAL[1]["prompt"], "canonical_solution": "\n    return number - int(number)\n\n",
     "entry_point": "truncate_number",
     "test": "\n\nimport numpy as np\n\ndef is_floats(x) -> bool:\n    # check if it is float; List[float]; Tuple[float]\n"
             "    if isinstance(x, float):\n        return True\n    if isinstance(x, (list, tuple)):\n"
             "        return all(isinstance(i, float) for i in x)\n    if isinstance(x, np.ndarray):\n"
             "        return x.dtype == np.float64 or x.dtype == np.float32\n    return False\n\n"
             "def assertion(out, exp, atol):\n    exact_match = out == exp\n\n    if atol == 0 and is_floats(exp):\n"
             "        atol = 1e-6\n    if not exact_match and atol != 0:\n"
             "        assert np.allclose(out, exp, rtol=1e-07, atol=atol)\n    else:\n        assert exact_match\n\n\n"
             "def check(candidate):\n    inputs = [[3.5], [1.33], [123.456], [999.99999]]\n"
             "    results = [0.5, 0.33000000000000007, 0.45600000000000307, 0.9999900000000252]\n"
             "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n\n"},
]


def write_humaneval(root: Path) -> tuple[Path, Path]:
    return (_parquet(root / "openai_humaneval" / "openai_humaneval" / "test-00000-of-00001.parquet", HUMANEVAL),
            _parquet(root / "humanevalplus" / "data" / "test-00000-of-00001.parquet", HUMANEVAL_PLUS))


def _taco(question: str, solutions: list[str], io: dict, difficulty: str, starter: str = "", **extra) -> dict:
    return {"question": question, "solutions": json.dumps(solutions), "starter_code": starter,
            "input_output": json.dumps(io), "difficulty": difficulty, "raw_tags": "[]", "name": None,
            "source": extra.get("source", "codeforces"), "tags": "[]", "skill_types": "[]", "url": extra.get("url"),
            "Expected Auxiliary Space": None, "time_limit": None, "date": None, "picture_num": None,
            "memory_limit": None, "Expected Time Complexity": None}


# BAAI/TACO (APPS's columns and more): solutions and input_output are JSON text; `fn_name` on
# call-based rows, whose outputs wrap the return value in a list (codewars) or not (leetcode)
TACO = [
    _taco("Read two integers a and b and print their sum.\n\n-----Input-----\n\nOne line with a and b.\n\n"
          "-----Examples-----\nInput\n1 2\n\nOutput\n3\n",
          ["a, b = map(int, input().split())\nprint(a + b)\n", "print(sum(map(int, input().split())))\n"],
          {"inputs": ["1 2\n", "10 -3\n", "100 250\n"], "outputs": ["3\n", "7\n", "350\n"]}, "EASY",
          url="https://codeforces.com/problemset/problem/1/Z"),
    _taco("Complete the function that returns the sum of the squares of the numbers in a list.",
          ["def square_sum(numbers):\n    return sum(x ** 2 for x in numbers)\n"],
          {"fn_name": "square_sum", "inputs": [[[1, 2]], [[0, 3, 4, 5]], [[]], [[-1, -2]]],
           "outputs": [[5], [50], [0], [5]]}, "EASY", "def square_sum(numbers):\n\t", source="codewars",
          url="https://www.codewars.com/kata/515e271a311df0350d00000f"),
    _taco("Given an integer array nums, find the subarray with the largest sum, and return its sum.",
          ["class Solution:\n\tdef maxSubArray(self, nums: List[int]) -> int:\n\t\tbest = cur = nums[0]\n"
           "\t\tfor x in nums[1:]:\n\t\t\tcur = max(x, cur + x)\n\t\t\tbest = max(best, cur)\n\t\treturn best\n"],
          {"fn_name": "maxSubArray", "inputs": [[[-2, 1, -3, 4, -1, 2, 1, -5, 4]], [[1]], [[5, 4, -1, 7, 8]]],
           "outputs": [6, 1, 23]}, "MEDIUM", "class Solution:\n    def maxSubArray(self, nums: List[int]) -> int:\n        ",
          source="leetcode", url="https://leetcode.com/problems/maximum-subarray/"),
]


def write_taco(root: Path) -> Path:
    return _parquet(root / "TACO" / "train" / "data-00000-of-00009.parquet", TACO)


# ---------------------------------------------------------------- instruction following

# google/IFEval: one struct type for every row's kwargs, so each dict has every argument, null where unused
IFEVAL_ARGUMENTS = ("num_highlights", "relation", "num_words", "num_placeholders", "prompt_to_repeat", "num_paragraphs",
                    "nth_paragraph", "first_word", "postscript_marker", "language", "keywords", "forbidden_words",
                    "num_bullets", "section_spliter", "num_sections", "capital_frequency", "capital_relation",
                    "end_phrase", "keyword", "frequency", "num_sentences", "letter", "let_frequency", "let_relation")


def _ifeval(key: int, prompt: str, ids: list[str], kwargs: list[dict]) -> dict:
    return {"key": key, "prompt": prompt, "instruction_id_list": ids,
            "kwargs": [{name: kw.get(name) for name in IFEVAL_ARGUMENTS} for kw in kwargs]}


IFEVAL = [
    _ifeval(1000, "Write a short blog post about a trip to Japan using less than 300 words. Highlight at least 2 "
                  "sections with markdown, i.e. *highlighted section*.",
            ["detectable_format:number_highlighted_sections", "length_constraints:number_words"],
            [{"num_highlights": 2}, {"relation": "less than", "num_words": 300}]),
    _ifeval(1001, "Write a limerick about a cat who loves fish. Your entire response should be in English, and in "
                  "all lowercase letters. No capital letters are allowed.",
            ["change_case:english_lowercase"], [{}]),
    _ifeval(1002, "Describe the water cycle to a child. Your response should contain at least 3 placeholders "
                  "represented by square brackets, such as [address]. At the end of your response, please explicitly "
                  "add a postscript starting with P.S.",
            ["detectable_content:number_placeholders", "detectable_content:postscript"],
            [{"num_placeholders": 3}, {"postscript_marker": "P.S."}]),
]
IFEVAL_GOOD = [
    "My trip to Japan began in Tokyo.\n\n*Arriving in Tokyo* The trains were fast and the streets were busy.\n\n"
    "*Visiting Kyoto* The temples were quiet and the gardens were green.",
    "a cat named tom would sit by the sea\nhe dreamed of fresh fish for his tea\nhe waited all day\n"
    "for a fish on a tray\nthen he napped by the dock happily",
    "Hello [name]! Water from the [ocean] warms up and rises into the sky. It cools into clouds and falls as rain "
    "on [city].\n\nP.S. Look for puddles after the rain.",
]


def write_ifeval(root: Path) -> Path:
    return _parquet(root / "IFEval" / "data" / "train-00000-of-00001.parquet", IFEVAL)


def _ground_truth(func_name: str, **args) -> str:
    names = ("N", "quantifier", "end_phrase", "keyword_list", "word", "forbidden_words", "letter", "i", "first_word",
             "postscript_marker", "options", "section_splitter", "original_prompt")
    return json.dumps({"func_name": func_name, **{name: args.get(name) for name in names}, **args})


def _rlvr(prompt: str, ground_truth: str, constraint_type: str, constraint: str) -> dict:
    return {"messages": [{"content": prompt, "role": "user"}], "ground_truth": ground_truth, "dataset": "ifeval",
            "constraint_type": constraint_type, "constraint": constraint}


RLVR_IFEVAL = [
    _rlvr("Write a short poem about the autumn forest. Your entire response should be in English, and in all "
          "lowercase letters. No capital letters are allowed.", _ground_truth("validate_lowercase"),
          "Change Cases", "Your entire response should be in English, and in all lowercase letters."),
    _rlvr("Explain why the sky is blue. In your response, the word light should appear 3 times.",
          _ground_truth("verify_keyword_frequency", word="light", N=3), "Keyword Frequency",
          "In your response, the word {word} should appear {N} times."),
    _rlvr("Describe a morning at the beach. Answer with at least 12 words.",
          _ground_truth("validate_word_constraint", N=12, quantifier="at least"), "Number Words",
          "Answer with at least / around / at most {N} words"),
]
RLVR_GOOD = [
    "golden leaves drift over the quiet forest floor\nthe oaks stand tall in the cool autumn air",
    "Sunlight reaches the air and the blue light scatters the most. That scattered light fills the sky, so blue "
    "light is what we see.",
    "The morning at the beach starts with cool sand, gentle waves and seagulls calling over the quiet shore.",
]


def write_rlvr_ifeval(root: Path, rows: list[dict] | None = None) -> Path:
    return _parquet(root / "RLVR-IFeval" / "data" / "train-00000-of-00001.parquet", rows or RLVR_IFEVAL)


# ---------------------------------------------------------------- preference pairs

# HuggingFaceH4/ultrafeedback_binarized (train_prefs, parquet): prompt, prompt_id (sha256 hex),
# chosen / rejected / messages [{content, role}] (the prompt repeated as the first user turn),
# score_chosen, score_rejected (float64, GPT-4 ratings 1-10; ties are published too).
def _ultrafeedback(prompt: str, chosen: str, rejected: str, score_chosen: float, score_rejected: float) -> dict:
    import hashlib

    def turns(reply: str) -> list[dict]:
        return [{"content": prompt, "role": "user"}, {"content": reply, "role": "assistant"}]

    return {"prompt": prompt, "prompt_id": hashlib.sha256(prompt.encode()).hexdigest(), "chosen": turns(chosen),
            "rejected": turns(rejected), "messages": turns(chosen), "score_chosen": score_chosen,
            "score_rejected": score_rejected}


ULTRAFEEDBACK = [
    _ultrafeedback("How many legs does a spider have? Answer in one sentence.",
                   "A spider has eight legs.", "Spiders have six legs, like all insects.", 9.0, 3.5),
    _ultrafeedback("Write a haiku about the first snow of winter.",
                   "Soft flakes drift and fall\nthe quiet street turns to white\nwinter breathes at last",
                   "Snow is cold and white. It falls in winter. The end.", 8.5, 4.0),
    _ultrafeedback("请用一句话解释什么是光合作用。",
                   "光合作用是植物利用光能把二氧化碳和水转化为有机物并释放氧气的过程。", "光合作用就是植物晒太阳。", 7.0, 7.0),  # a tie
]
ULTRAFEEDBACK_PATH = "ultrafeedback_binarized/data/train_prefs-00000-of-00001.parquet"


def write_ultrafeedback(root: Path, rows: list[dict] | None = None) -> Path:
    return _parquet(root / ULTRAFEEDBACK_PATH, rows or ULTRAFEEDBACK)
