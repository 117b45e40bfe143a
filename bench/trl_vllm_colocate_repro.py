"""TRL 1.16 GRPO with `use_vllm: true, vllm_mode: colocate` on vLLM's CPU build (0.32): no posttrain code.

    python scripts/install.py --engines cpu
    python bench/trl_vllm_colocate_repro.py <a small causal LM checkpoint>

What happens (2026-12-03, bench/results/vllm_cpu.md): the colocated engine starts on the CPU (external
launcher), generates the first batch, then TRL's weight sync (`VLLMGeneration.sync_weights`, colocate:
`model_runner.model.load_weights([(name, param)])`) fails with
"AttributeError: 'Parameter' object has no attribute 'weight_loader'" in vLLM's linear layers: the
CPU build has processed the loaded weights for its oneDNN kernels. TRL names vLLM 0.22-0.31 as tested;
0.32 is the first vllm-cpu that installs beside transformers 5.19.
"""
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402


def reward_len(completions, **kwargs):
    return [-abs(20 - len(c)) / 20 for c in completions]


if __name__ == "__main__":
    ds = Dataset.from_list([{"prompt": f"What is {i} plus {i+1}?"} for i in range(32)])
    args = GRPOConfig(output_dir="/tmp/trl_vllm_colocate_repro", max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=16, use_vllm=True, vllm_mode="colocate",
                      vllm_enable_sleep_mode=False, report_to=[], logging_steps=1, use_cpu=True, bf16=False,
                      save_strategy="no", vllm_gpu_memory_utilization=0.3, vllm_max_model_length=256)
    trainer = GRPOTrainer(model=sys.argv[1], reward_funcs=reward_len, args=args, train_dataset=ds)
    trainer.train()
    print("TRAINED", trainer.state.log_history[-2:])
