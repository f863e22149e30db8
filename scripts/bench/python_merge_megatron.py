#!/usr/bin/python3
"""Merge a verl Megatron legacy checkpoint (dense GPT, tp x pp) "the Python way", for benchmarks.

    /usr/bin/python3 scripts/bench/python_merge_megatron.py ACTOR_DIR OUT_DIR

What a simple Python merger does, everything in RAM at once (like verl's model merger):
  1. torch.load every ACTOR_DIR/model/mp_rank_TT[_PPP]/model.pt (weights_only=False,
     map_location='cpu') in a ThreadPoolExecutor of min(32, cpu_count) threads;
  2. per pipeline stage, local layer j of stage p is global layer p * L/pp + j; per mcore key,
     the tp pieces are concatenated by Megatron's TP rules and renamed to Hugging Face names:
       embedding.word_embeddings / output_layer      cat dim 0  -> embed_tokens / lm_head
       self_attention.linear_qkv.weight / .bias       cat dim 0, then split per query group into
                                                      [q (nq/ng heads); k; v] -> q/k/v_proj
       self_attention.linear_proj.weight              cat dim 1  -> o_proj
       mlp.linear_fc1.weight                          per rank [gate_r; up_r]: halves, cat
                                                      gates and ups on dim 0 -> gate/up_proj
       mlp.linear_fc2.weight                          cat dim 1  -> down_proj
       *.layer_norm_weight, final_layernorm           replicated (tp rank 0)
       *._extra_state                                 dropped
     cast to config.json's torch_dtype;
  3. one OUT_DIR/model.safetensors (every tensor's bytes built in memory first, as
     safetensors.torch.save_file does) and the huggingface/ files next to it.
Only dense Llama/Qwen2-style models (no MoE, no vpp, no value head) -- enough for the benchmark.
"""
import json
import os
import re
import shutil
import sys
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

sys.path.insert(0, HERE)
import python_merge  # noqa: E402  (write_hf_folder)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def split_qkv(t, nq, ng, d):
    """mcore grouped rows [ng * (nq/ng + 2) * d, ...] -> HF q, k, v."""
    per = nq // ng
    g = t.reshape(ng, (per + 2) * d, *t.shape[1:])
    q = g[:, :per * d].reshape(nq * d, *t.shape[1:])
    k = g[:, per * d:(per + 1) * d].reshape(ng * d, *t.shape[1:])
    v = g[:, (per + 1) * d:].reshape(ng * d, *t.shape[1:])
    return q.contiguous(), k.contiguous(), v.contiguous()


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: python_merge_megatron.py ACTOR_DIR OUT_DIR")
    actor, out = argv
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()
    hf = os.path.join(actor, "huggingface")
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    dtype = DTYPES[cfg.get("torch_dtype") or "float32"]
    L, nq = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    ng = cfg.get("num_key_value_heads", nq)
    d = cfg.get("head_dim") or cfg["hidden_size"] // nq

    ranks = {}
    for name in os.listdir(os.path.join(actor, "model")):
        m = re.fullmatch(r"mp_rank_(\d+)(?:_(\d+))?", name)
        if m:
            ranks[(int(m.group(1)), int(m.group(2) or 0))] = os.path.join(actor, "model", name, "model.pt")
    tp = 1 + max(t for t, _ in ranks)
    pp = 1 + max(p for _, p in ranks)
    assert len(ranks) == tp * pp, "expected tp x pp rank folders"
    per_stage = L // pp

    # 1. load every rank file
    def load(key):
        obj = torch.load(ranks[key], map_location="cpu", weights_only=False)
        if isinstance(obj, list):
            assert len(obj) == 1, "vpp > 1 is not supported here"
            obj = obj[0]
        return key, obj

    with ThreadPoolExecutor(max_workers=min(32, os.cpu_count() or 1)) as pool:
        sds = dict(pool.map(load, sorted(ranks)))
    t_load = time.time()

    # 2. merge stage by stage, key by key (pop frees each rank's piece)
    merged = OrderedDict()

    def pieces(p, key):
        return [sds[(t, p)].pop(key) for t in range(tp)]

    def put(name, t):
        merged[name] = (t.to(dtype) if t.is_floating_point() else t).contiguous()

    for p in range(pp):
        keys = [k for k in sds[(0, p)].keys() if not k.endswith("_extra_state")]
        for key in keys:
            parts = pieces(p, key)
            m = re.fullmatch(r"decoder\.layers\.(\d+)\.(.+)", key)
            if key == "embedding.word_embeddings.weight":
                put("model.embed_tokens.weight", torch.cat(parts, 0))
            elif key == "decoder.final_layernorm.weight":
                put("model.norm.weight", parts[0])
            elif key == "output_layer.weight":
                put("lm_head.weight", torch.cat(parts, 0))
            elif m:
                pre = "model.layers.%d." % (p * per_stage + int(m.group(1)))
                rest = m.group(2)
                if rest == "self_attention.linear_qkv.layer_norm_weight":
                    put(pre + "input_layernorm.weight", parts[0])
                elif rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
                    kind = rest.rsplit(".", 1)[1]
                    q, k, v = split_qkv(torch.cat(parts, 0), nq, ng, d)
                    put(pre + "self_attn.q_proj." + kind, q)
                    put(pre + "self_attn.k_proj." + kind, k)
                    put(pre + "self_attn.v_proj." + kind, v)
                elif rest == "self_attention.linear_proj.weight":
                    put(pre + "self_attn.o_proj.weight", torch.cat(parts, 1))
                elif rest == "mlp.linear_fc1.layer_norm_weight":
                    put(pre + "post_attention_layernorm.weight", parts[0])
                elif rest == "mlp.linear_fc1.weight":
                    halves = [x.chunk(2, 0) for x in parts]
                    put(pre + "mlp.gate_proj.weight", torch.cat([h[0] for h in halves], 0))
                    put(pre + "mlp.up_proj.weight", torch.cat([h[1] for h in halves], 0))
                elif rest == "mlp.linear_fc2.weight":
                    put(pre + "mlp.down_proj.weight", torch.cat(parts, 1))
                else:
                    raise SystemExit("python_merge_megatron: unmapped key %s" % key)
            else:
                raise SystemExit("python_merge_megatron: unmapped key %s" % key)
    del sds
    if cfg.get("tie_word_embeddings"):
        merged.pop("lm_head.weight", None)
    t_merge = time.time()

    # 3. one safetensors file + the huggingface files
    python_merge.write_hf_folder(out, merged, hf)
    t_end = time.time()
    print("python_merge_megatron: %d tensors, tp=%d pp=%d, %s -> %s; load %.1f s, merge %.1f s, write %.1f s"
          % (len(merged), tp, pp, actor, out, t_load - t0, t_merge - t_load, t_end - t_merge))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
