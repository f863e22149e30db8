#!/usr/bin/python3
"""Merge a verl FSDP checkpoint "the Python way" (what verl's model merger does), for benchmarks.

    /usr/bin/python3 scripts/bench/python_merge.py CKPT_DIR OUT_DIR

As verl.model_merger (fsdp backend) does it, everything in RAM at once:
  1. torch.load every model_world_size_W_rank_R.pt (weights_only=False, map_location='cpu'), in a
     ThreadPoolExecutor of min(32, cpu_count) threads, as verl's merger does;
  2. per key, in each rank's order, take the DTensor's _local_tensor, cast it to the config dtype
     (config.json torch_dtype; verl's merger casts each local shard before concatenating) and
     torch.cat the pieces on the Shard dim (plain tensors: dim 0);
  3. write the merged tensors to OUT_DIR/model.safetensors (by hand: there is no safetensors
     package here; the writer builds every tensor's bytes in memory first, as
     safetensors.torch.save_file does) and copy the huggingface/ files next to it.

Runs on Debian's torch 1.13, which has no DTensor: the stub classes of the fixture generator
(tests/fixtures/make_fsdp_fixtures.py, imported so its sys.modules registrations make the torch
2.x class paths importable) stand in for DTensor & co, and two rebuild functions get minimal
stand-ins (see _install_rebuild_standins).
"""
import json
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402
import torch._tensor  # noqa: E402
import torch._utils  # noqa: E402

import make_fsdp_fixtures as fx  # noqa: E402  (registers the DTensor stub modules)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _install_rebuild_standins():
    """torch 1.13's rebuild functions assume a real tensor subclass; ours are plain classes.

    A torch 2.x DTensor pickles as _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor,
    args, (None or {}, {'_local_tensor': ..., '_spec': ...})). The stand-ins build a bare stub
    object and set its state (torch 2.x's _set_obj_state accepts a None dict state; 1.13 does
    not); real tensor subclasses still go through torch's own functions.
    """
    orig_wrapper = torch._utils._rebuild_wrapper_subclass
    orig_from_type = torch._tensor._rebuild_from_type_v2

    def rebuild_wrapper_subclass(cls, *args):
        if isinstance(cls, type) and issubclass(cls, torch.Tensor):
            return orig_wrapper(cls, *args)
        return object.__new__(cls)

    def rebuild_from_type_v2(func, new_type, args, state):
        if isinstance(new_type, type) and issubclass(new_type, torch.Tensor):
            return orig_from_type(func, new_type, args, state)
        ret = func(*args)
        dict_state, slots_state = state if isinstance(state, tuple) else (state, None)
        for k, v in (dict_state or {}).items():
            setattr(ret, k, v)
        for k, v in (slots_state or {}).items():
            setattr(ret, k, v)
        return ret

    torch._utils._rebuild_wrapper_subclass = rebuild_wrapper_subclass
    torch._tensor._rebuild_from_type_v2 = rebuild_from_type_v2


def _shard_dim(t):
    """(local tensor, concat dim) of a loaded value: DTensor stub -> its Shard dim."""
    if isinstance(t, torch.Tensor):
        return t, 0
    spec = t._spec
    dims = [p.dim for p in spec.placements if type(p).__name__ == "Shard"]
    if len(dims) != 1 or len(spec.placements) != 1:
        raise SystemExit("python_merge: only 1-D FSDP meshes with Shard(d) are supported")
    return t._local_tensor, dims[0]


def write_hf_folder(out, merged, hf):
    """One model.safetensors holding `merged` (built in memory, as save_file does) and the
    files of the huggingface folder `hf`, in a fresh `out`."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    fx.write_safetensors(os.path.join(out, "model.safetensors"), merged)
    for fn in sorted(os.listdir(hf)):
        if os.path.isfile(os.path.join(hf, fn)):
            shutil.copyfile(os.path.join(hf, fn), os.path.join(out, fn))


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python_merge.py CKPT_DIR OUT_DIR")
    ckpt, out = argv
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    _install_rebuild_standins()
    t0 = time.time()
    hf = os.path.join(ckpt, "huggingface")
    with open(os.path.join(hf, "config.json")) as f:
        config = json.load(f)
    dtype = DTYPES[config.get("torch_dtype") or config.get("dtype") or "float32"]

    files = {}
    for fn in os.listdir(ckpt):
        m = re.fullmatch(r"model_world_size_(\d+)_rank_(\d+)\.pt", fn)
        if m:
            files[int(m.group(2))] = (int(m.group(1)), fn)
    world = files[0][0]
    if sorted(files) != list(range(world)):
        raise SystemExit("python_merge: missing rank files in %s" % ckpt)

    # 1. load every rank before merging, in a thread pool as verl does
    #    (ThreadPoolExecutor(max_workers=min(32, os.cpu_count())), one torch.load per rank file)
    def load(r):
        return torch.load(os.path.join(ckpt, files[r][1]), map_location="cpu", weights_only=False)

    with ThreadPoolExecutor(max_workers=min(32, os.cpu_count() or 1)) as pool:
        shards = list(pool.map(load, range(world)))
    t_load = time.time()

    # 2. merge key by key (pop frees each rank's copy as verl's merger does)
    merged = {}
    for key in list(shards[0].keys()):
        pieces, dim = [], 0
        for sd in shards:
            local, dim = _shard_dim(sd.pop(key))
            pieces.append(local.to(dtype) if local.is_floating_point() else local)
        merged[key] = torch.cat(pieces, dim=dim).contiguous()
    del shards
    if config.get("tie_word_embeddings"):
        merged.pop("lm_head.weight", None)
    t_merge = time.time()

    # 3. one safetensors file + the huggingface files
    write_hf_folder(out, merged, hf)
    t_end = time.time()
    print("python_merge: %d tensors, W=%d, %s -> %s; load %.1f s, merge %.1f s, write %.1f s"
          % (len(merged), world, ckpt, out, t_load - t0, t_merge - t_load, t_end - t_merge))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
