#!/usr/bin/python3
"""A verl FSDP LoRA checkpoint for benchmarks: a Qwen2-shaped fp32 base of about SIZE_GB, a
PEFT adapter of rank R on every Linear (lora_train_meta.json gives alpha 16), W rank files.

    /usr/bin/python3 scripts/bench/make_bench_lora.py OUT_DIR [--size-gb 1] [--world 4] [--rank 64]

Writes OUT_DIR/global_step_1/actor (rank files, fsdp_config.json, huggingface/) and
OUT_DIR/global_step_1/lora_train_meta.json. Built with the fixture generator's PEFT naming and
DTensor emulation (tests/fixtures/make_lora_fixtures.py, make_fsdp_fixtures.py).
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))
import make_fsdp_fixtures as F  # noqa: E402
import make_lora_fixtures as LF  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--rank", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    H, inter, V, heads, kv = 2048, 5632, 32000, 16, 4
    per_layer = 4 * H * (H * (heads + 2 * kv) // heads) // 2 + 3 * H * inter
    layers = max(1, round((a.size_gb * 1e9 / 4 - 2 * V * H) / per_layer))
    c = F.Cfg(V, H, inter, layers, heads, kv, False)
    if os.path.isdir(a.out_dir):
        shutil.rmtree(a.out_dir)
    actor = os.path.join(a.out_dir, "global_step_1", "actor")
    os.makedirs(actor)
    full = F.make_full_model(c, 7, torch.float32)
    spec = {"r": a.rank, "targets": LF.ALL_LINEAR, "pdtype": torch.float32, "scale": lambda r: 16 / r}
    sd, _adapter, _deltas, _trained = LF.peft_state(full, spec, torch.Generator().manual_seed(8))
    for rank in range(a.world):
        rank_sd, cpu_st, style, _ = F.build_rank_state({"world": a.world, "cfg": c, "kind": "fsdp"}, sd, rank, 7)
        F.torch_save(rank_sd, os.path.join(actor, "model_world_size_%d_rank_%d.pt" % (a.world, rank)),
                     location="cuda:%d" % rank, cpu_storages=cpu_st, style=style)
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": a.world}, f)
    F.write_hf_dir(os.path.join(actor, "huggingface"), c, "bfloat16")
    with open(os.path.join(a.out_dir, "global_step_1", "lora_train_meta.json"), "w") as f:
        json.dump({"r": a.rank, "lora_alpha": 16, "task_type": "CAUSAL_LM"}, f)
    params = sum(t.numel() for t in sd.values())
    print("wrote %s: %d layers, %.2f G parameters (base + adapter r=%d), W=%d"
          % (actor, layers, params / 1e9, a.rank, a.world))


if __name__ == "__main__":
    main()
