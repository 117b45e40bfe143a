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
  ({"language", "test_cases": [{"fn_name", "input", "output", "type"}]})
- nvidia/Llama-Nemotron-Post-Training-Dataset: input [{role, content}], output, reasoning ("on" /
  "off"), system_prompt, category, license, generator, used_in_training, version
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
