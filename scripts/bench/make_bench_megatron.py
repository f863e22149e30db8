#!/usr/bin/python3
"""Write a benchmark-sized verl Megatron legacy checkpoint (per-rank model.pt, tp x pp).

    /usr/bin/python3 scripts/bench/make_bench_megatron.py OUT_DIR [--size-gb 1] [--tp 2] [--pp 2]

OUT_DIR/actor/ gets what verl's Megatron checkpoint manager (legacy format) leaves:
model/mp_rank_TT_PPP/model.pt (a list with one mcore state dict), optim/ and huggingface/;
OUT_DIR/reference/ is the Hugging Face folder written directly from the full HF state dict the
checkpoint was split from (model.safetensors, bf16) -- the ground truth for `vmerge-mpi test`.

The files come from the fixture generator tests/fixtures/make_megatron_fixtures.py (imported, not
copied): the case is defined like its own cases, `case(kind="verl", model=L2(...), par=Par(...))`,
only with real dimensions: Qwen2 names (QKV bias), H=2048, 16 heads of 128, 4 query groups,
F=5632 (SwiGLU), V=32000, untied lm_head, bf16; the layer count L (a multiple of pp) is chosen
so the parameters come to about --size-gb GB (10^9 bytes) of bf16. Megatron's split rules are
the generator's: QKV interleaved per query group and split on dim 0, linear_proj / linear_fc2 on
dim 1, linear_fc1 per rank [gate_r; up_r], embedding / output_layer on dim 0, norms replicated.
"""
import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

import make_megatron_fixtures as mf  # noqa: E402

DIMS = dict(H=2048, nq=16, ng=4, d=128, F=5632, V=32000)


def param_bytes(m):
    n = 0
    for _, shape, _ in mf.hf_param_shapes(m):
        k = 1
        for s in shape:
            k *= s
        n += k
    return n * 2  # bf16


def pick_model(size_gb, pp):
    fixed = param_bytes(mf.L2("qwen2", 0, **DIMS))
    per_layer = param_bytes(mf.L2("qwen2", 1, **DIMS)) - fixed
    layers = max(pp, int(round((size_gb * 1e9 - fixed) / per_layer / pp)) * pp)
    return mf.L2("qwen2", layers, **DIMS)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--size-gb", type=float, default=1.0, help="bf16 parameter bytes, 10^9 (default 1)")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--seed", type=int, default=4321)
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()
    m = pick_model(a.size_gb, a.pp)
    name = "megatron_tp%d_pp%d" % (a.tp, a.pp)
    mf.case(name, kind="verl", model=m, par=mf.Par(tp=a.tp, pp=a.pp),
            notes="benchmark: Qwen2 L=%d tp=%d pp=%d" % (m.L, a.tp, a.pp))
    out = os.path.abspath(a.out_dir)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    # write_verl_legacy(out, name, ...) writes OUT/<name>/{actor,reference}; move them up one level
    mf.write_verl_legacy(out, name, mf.CASES[name], a.seed)
    for sub in ("actor", "reference"):
        os.rename(os.path.join(out, name, sub), os.path.join(out, sub))
    os.rmdir(os.path.join(out, name))
    files = []
    for root, _, names in os.walk(os.path.join(out, "actor", "model")):
        files += [os.path.join(root, n) for n in names if n == "model.pt"]
    total = sum(os.path.getsize(f) for f in files)
    print("wrote %s: Qwen2 H=%d nq=%d ng=%d d=%d F=%d V=%d L=%d, %d params (%.3f GB bf16), tp=%d pp=%d, "
          "%d rank files %.3f GB, %.1f s"
          % (out, m.H, m.nq, m.ng, m.d, m.F, m.V, m.L, param_bytes(m) // 2, param_bytes(m) / 1e9, a.tp, a.pp,
             len(files), total / 1e9, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
