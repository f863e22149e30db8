#!/usr/bin/python3
"""The Python way of merging a DeepSpeed ZeRO-3 checkpoint, for the benchmark: zero_to_fp32's
algorithm written out on torch 1.13 (no DeepSpeed needed; its classes are the fixture stubs).

    /usr/bin/python3 scripts/bench/python_merge_deepspeed.py SAVE_DIR OUT_DIR

Loads every model-states and every optimizer file whole (torch.load, rank order by number),
drops each optimizer's inner state dict right after loading, merges the param_shapes dicts,
then for every parameter concatenates its ceil(N/W) piece from every rank, keeps the first N
elements, and writes the fp32 state dict as OUT_DIR/model.safetensors (what zero_to_fp32 writes
with safe serialization). torch 1.13's torch.load has no mmap, so every byte is read.
"""
import glob
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

import make_deepspeed_fixtures  # noqa: E402,F401  (registers the DeepSpeed class stubs for unpickling)
import make_fsdp_fixtures as fx  # noqa: E402


def by_rank(paths):
    return sorted(paths, key=lambda p: int(re.search(r"zero_pp_rank_(\d+)_", os.path.basename(p)).group(1)))


def main(argv):
    save_dir, out_dir = argv
    with open(os.path.join(save_dir, "latest")) as f:
        tag_dir = os.path.join(save_dir, f.read().strip())
    models = [torch.load(p, map_location="cpu") for p in by_rank(glob.glob(tag_dir + "/*_model_states.pt"))]
    flats = []
    for path in by_rank(glob.glob(tag_dir + "/*_optim_states.pt")):
        osd = torch.load(path, map_location="cpu")["optimizer_state_dict"]
        osd.pop("optimizer_state_dict", None)
        flats.append(osd["fp32_flat_groups"])
    world = len(flats)
    shapes = {k: v for d in models[0]["param_shapes"] for k, v in d.items()}
    rank_flats = [torch.cat(list(f)) if len(f) > 1 else f[0] for f in flats]
    state = {}
    offset = 0
    for name, shape in shapes.items():
        n = shape.numel()
        ps = math.ceil(n / world)
        state[name] = torch.cat([rank_flats[r].narrow(0, offset, ps) for r in range(world)]).narrow(0, 0, n).view(shape)
        offset += ps
    for alias, source in models[0]["shared_params"].items():
        state[alias] = state[source]
    os.makedirs(out_dir, exist_ok=True)
    fx.write_safetensors(os.path.join(out_dir, "model.safetensors"), state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
