"""Does torch FSDP2 (`fully_shard`) train on CPU with gloo, where accelerate's fsdp profile falls
back to DDP? Two ranks, a tiny Qwen3, 3 steps, then the full state dict gathered on rank 0.

    torchrun --nproc_per_node 2 bench/fsdp_cpu.py     (results: bench/results/fsdp_cpu.md)
"""
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import Qwen3Config, Qwen3ForCausalLM
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = Qwen3ForCausalLM(Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=16))
full = sum(p.numel() for p in model.parameters())
for layer in model.model.layers:
    fully_shard(layer)
fully_shard(model)
local = sum(p.to_local().numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (4, 32))
for step in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad()
    if rank == 0: print("step", step, "loss", round(loss.item(), 4), flush=True)
from torch.distributed.checkpoint.state_dict import get_model_state_dict, StateDictOptions
sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
if rank == 0:
    print("params full", full, "local shard on rank 0", local, "gathered", sum(v.numel() for v in sd.values()))
dist.destroy_process_group()
