#!/usr/bin/python3
"""Write a benchmark-sized DeepSpeed ZeRO-3 checkpoint with Adam states (torch 1.13).

    /usr/bin/python3 scripts/bench/make_bench_deepspeed.py OUT_DIR [SIZE_GB] [WORLD]

OUT_DIR gets what DeepSpeedEngine.save_checkpoint leaves under HF Trainer (checkpoint-N):
`latest`, global_step100/ with WORLD bf16_zero_pp_rank_R_mp_rank_00_optim_states.pt (fp32 master
flats plus exp_avg / exp_avg_sq of the same size) and zero_pp_rank_R_mp_rank_00_model_states.pt
(placeholders, param_shapes), and config.json (bfloat16) plus the tokenizer beside `latest`.
The files come from the fixture generator tests/fixtures/make_deepspeed_fixtures.py (imported,
not copied). Model: Qwen2 names, H=1024, I=2816, V=32000, 16 heads, 4 KV heads, untied head; the
layer count is chosen so the checkpoint (12 bytes per parameter) comes to about SIZE_GB GB
(default 2, 10^9 bytes); WORLD defaults to 4. No reference is written (the benchmark compares
vmerge with the Python merge).
"""
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

import make_deepspeed_fixtures as ds  # noqa: E402
import make_fsdp_fixtures as fx  # noqa: E402


def main(argv):
    if not 1 <= len(argv) <= 3:
        print(__doc__)
        return 2
    out = argv[0]
    size_gb = float(argv[1]) if len(argv) > 1 else 2.0
    world = int(argv[2]) if len(argv) > 2 else 4
    H, I, V = 1024, 2816, 32000
    per_layer = 4 * H * H // 2 + 2 * H * H + 3 * H * I + 2 * H + H + H // 2
    layers = max(1, math.ceil((size_gb * 1e9 / 12 - 2 * V * H) / per_layer))
    c = fx.Cfg(V=V, H=H, I=I, L=layers, heads=16, kv=4, tied=False)
    spec = dict(stage=3, w=world, dtype=torch.bfloat16, sub_group_size=10 ** 8, persist=10 * H)
    torch.manual_seed(0)
    full = fx.make_full_model(c, 7, torch.float32)
    bit16 = {n: (-t).to(torch.bfloat16) for n, t in full.items()}
    shutil.rmtree(out, ignore_errors=True)
    tag_dir = os.path.join(out, "global_step100")
    os.makedirs(tag_dir)
    ds.write_zero3(tag_dir, spec, c, full, bit16, set(), torch.Generator().manual_seed(8))
    with open(os.path.join(out, "latest"), "w") as f:
        f.write("global_step100")
    fx.write_hf_dir(out, c, "bfloat16")
    params = sum(t.numel() for t in full.values())
    print("wrote %s: %d layers, %d parameters, W=%d" % (out, layers, params, world))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
