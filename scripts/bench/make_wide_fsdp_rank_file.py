#!/usr/bin/python3
"""Writes one verl FSDP2 rank file with as many DTensor entries as one rank of a large MoE save
holds (DeepSeek-V3: 45,395 parameters), to time the scan of such a file (docs/scaling.md,
"Routed planning"). The entries are written as torch 2.11 writes a DTensor (the fixture
generator's classes, tests/fixtures/make_fsdp_fixtures.py) on a 1-D mesh of WORLD ranks, each the
rank's one-row shard of a tiny [WORLD, 2] fp32 tensor: the scan reads the ZIP directory and
data.pkl, whose size grows with the entries, not with the tensor bytes.

    make_wide_fsdp_rank_file.py OUT_DIR [ENTRIES [WORLD]]

OUT_DIR gets model_world_size_1_rank_0.pt (named as a one-rank save so that vmerge discovers it
alone); `vmerge-mpi inspect --local_dir OUT_DIR` scans it and then stops at the mapping (the
other WORLD - 1 shards are absent), so its run time is the scan's.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
import make_fsdp_fixtures as fx  # noqa: E402


def main():
    out = sys.argv[1]
    entries = int(sys.argv[2]) if len(sys.argv) > 2 else 45395
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    os.makedirs(out, exist_ok=True)
    mf = fx.MeshFactory("2.11", world, 0, seed=1)
    mesh = mf.mesh211((world,), (1,), ("fsdp",), (0,), ["1"])
    state = {}
    layers, experts = 61, 256
    for i in range(entries):
        layer, rest = divmod(i, 3 * experts + 8)
        name = (f"model.layers.{layer}.mlp.experts.{rest // 3}.{('gate', 'up', 'down')[rest % 3]}_proj.weight"
                if rest < 3 * experts else f"model.layers.{layer % layers}.self_attn.part{rest}.weight")
        full = torch.zeros(world, 2)
        spec = fx.make_spec(fx.T211, mesh, [fx.T211.Shard(0)], full, mf._hash())
        state[name] = fx.T211.DTensor(fx.fsdp2_local(full, world, 0), spec, torch.device("cuda", 0))
    fx.torch_save(state, os.path.join(out, "model_world_size_1_rank_0.pt"), cpu_storages=mf.cpu_storages)
    print(f"{out}/model_world_size_1_rank_0.pt: {entries} DTensor entries, mesh ({world},)")


if __name__ == "__main__":
    main()
