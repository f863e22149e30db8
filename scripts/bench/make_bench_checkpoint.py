#!/usr/bin/python3
"""Write a benchmark-sized verl FSDP2 actor checkpoint (torch 2.x byte layout).

    /usr/bin/python3 scripts/bench/make_bench_checkpoint.py OUT_DIR [--size-gb 2] [--world 8] [--dtype bf16]

OUT_DIR gets exactly what verl's FSDP checkpoint manager leaves for the model:
model_world_size_W_rank_R.pt for every rank, fsdp_config.json and huggingface/ (config.json with
Qwen2 names, torch_dtype bfloat16, tokenizer files). Parameters are fp32, as in a real verl actor
(mixed precision keeps fp32 master weights), so a default merge casts them to bf16; with
--dtype bf16 they are bf16 (a bf16 run), so the merge copies the bytes as they are: the case to
hold against `cp`.

The files are produced by the fixture generator tests/fixtures/make_fsdp_fixtures.py (imported,
not copied): DTensor stubs under the torch 2.11 module names, 1-D ('fsdp',) mesh, Shard(0),
FSDP2 padded storages of ceil(N/W) rows. Model: H=2048, I=5632, V=32000, 16 heads, 4 KV heads,
untied lm_head; the layer count L is chosen so the fp32 parameters come to about --size-gb GB
(10^9 bytes). Run with Debian's interpreter (the only one that sees torch 1.13).
"""
import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

import make_fsdp_fixtures as fx  # noqa: E402

H, I, V, HEADS, KV = 2048, 5632, 32000, 16, 4


def param_count(c):
    n = 0
    for _, shape in fx.param_shapes(c):
        k = 1
        for s in shape:
            k *= s
        n += k
    return n


def pick_config(size_gb, h=H, i=I, v=V, element_size=4):
    """Qwen2-style config whose parameters come closest to size_gb * 10^9 bytes."""
    target = size_gb * 1e9
    fixed = param_count(fx.Cfg(v, h, i, 0, HEADS, KV, False)) * element_size
    per_layer = param_count(fx.Cfg(v, h, i, 1, HEADS, KV, False)) * element_size - fixed
    layers = max(1, int(round((target - fixed) / per_layer)))
    return fx.Cfg(v, h, i, layers, HEADS, KV, False)


def fast_full_model(c, seed, dtype=torch.float32):
    """name -> tensor, module order (like fx.make_full_model, but in place to save RAM/time)."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in fx.param_shapes(c):
        t = torch.empty(shape, dtype=torch.float32)
        t.normal_(0.0, 0.5, generator=g)
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            t.mul_(0.2).add_(1.0)
        sd[name] = t.to(dtype)
    return sd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--size-gb", type=float, default=2.0, help="total fp32 bytes, 10^9 (default 2)")
    ap.add_argument("--world", type=int, default=8, help="FSDP world size W (default 8)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="parameter dtype (fp32: master weights, cast by the merge; bf16: copied as is)")
    ap.add_argument("--small", action="store_true",
                    help="H=512, I=1408, V=8000: checkpoints of tens of MB (memory tests)")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    size = 2 if a.dtype == "bf16" else 4
    c = pick_config(a.size_gb, 512, 1408, 8000, size) if a.small else pick_config(a.size_gb, element_size=size)
    w = a.world
    t0 = time.time()
    if os.path.isdir(a.out_dir):
        shutil.rmtree(a.out_dir)
    os.makedirs(a.out_dir)
    full = fast_full_model(c, a.seed, dtype)
    spec = {"world": w, "cfg": c, "pdtype": dtype, "cdtype": "bfloat16", "kind": "fsdp",
            "notes": "benchmark"}
    for r in range(w):
        sd, cpu_st, style, _keep = fx.build_rank_state(spec, full, r, a.seed)
        fx.torch_save(sd, os.path.join(a.out_dir, "model_world_size_%d_rank_%d.pt" % (w, r)),
                      location="cuda:%d" % r, cpu_storages=cpu_st, style=style)
        del sd, _keep
    with open(os.path.join(a.out_dir, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": w}, f)
    fx.write_hf_dir(os.path.join(a.out_dir, "huggingface"), c, "bfloat16")
    nparam = param_count(c)
    rank_bytes = sum(os.path.getsize(os.path.join(a.out_dir, f)) for f in os.listdir(a.out_dir)
                     if f.startswith("model_world_size_"))
    print("wrote %s: Qwen2 H=%d I=%d V=%d L=%d heads=%d kv=%d, %d params (%.3f GB %s), "
          "W=%d, rank files %.3f GB, %.1f s"
          % (a.out_dir, c.H, c.I, c.V, c.L, c.heads, c.kv, nparam, nparam * size / 1e9, a.dtype, w,
             rank_bytes / 1e9, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
