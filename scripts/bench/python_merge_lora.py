#!/usr/bin/python3
"""Fold a verl FSDP LoRA checkpoint into its base "the Python way", for benchmarks.

    /usr/bin/python3 scripts/bench/python_merge_lora.py CKPT_DIR OUT_DIR ALPHA

What people do today with verl's merger output plus PEFT's merge_and_unload, in one process:
torch.load every rank file (thread pool), torch.cat each tensor in its stored dtype, then for
every adapted module W + (alpha / r) * (B @ A) in fp32 (Embedding: (B @ A)^T), cast to the
config dtype, and write one safetensors file (python_merge.write_hf_folder).
"""
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import python_merge as PM  # noqa: E402
import torch  # noqa: E402

P = "base_model.model."


def main(argv):
    if len(argv) != 3:
        raise SystemExit("usage: python_merge_lora.py CKPT_DIR OUT_DIR ALPHA")
    ckpt, out, alpha = argv[0], argv[1], float(argv[2])
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    PM._install_rebuild_standins()
    t0 = time.time()
    hf = os.path.join(ckpt, "huggingface")
    with open(os.path.join(hf, "config.json")) as f:
        config = json.load(f)
    dtype = PM.DTYPES[config.get("torch_dtype") or config.get("dtype") or "float32"]
    files = sorted((int(m.group(2)), fn) for fn in os.listdir(ckpt)
                   for m in [re.fullmatch(r"model_world_size_(\d+)_rank_(\d+)\.pt", fn)] if m)
    with ThreadPoolExecutor(max_workers=min(32, os.cpu_count() or 1)) as pool:
        shards = list(pool.map(lambda f: torch.load(os.path.join(ckpt, f[1]), map_location="cpu"), files))
    t_load = time.time()
    full = {}
    for key in list(shards[0].keys()):
        pieces, dim = [], 0
        for sd in shards:
            local, dim = PM._shard_dim(sd.pop(key))
            pieces.append(local)
        full[key[len(P):] if key.startswith(P) else key] = torch.cat(pieces, dim=dim)
    del shards
    merged = {}
    for key, t in full.items():
        if ".lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        module = key[:-len(".weight")].replace(".base_layer", "")
        a, b = full.get(module + ".lora_A.default.weight"), full.get(module + ".lora_B.default.weight")
        if a is not None and key.endswith(".weight"):
            t = t.float() + (b.float() @ a.float()) * (alpha / a.shape[0])
        merged[name] = t.to(dtype).contiguous() if t.is_floating_point() else t
    t_merge = time.time()
    PM.write_hf_folder(out, merged, hf)
    t_end = time.time()
    print("python_merge_lora: %d tensors; load %.1f s, merge %.1f s, write %.1f s"
          % (len(merged), t_load - t0, t_merge - t_load, t_end - t_merge))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
