#!/usr/bin/python3
"""Merges whose metadata must state what the weights are, checked from the output files alone
(standard-library safetensors and JSON reading, rules written from transformers/PEFT/vLLM):

  * --dtype fp32 of a bf16 model: every tensor F32 and config.json the source's, key for key and
    in order, with torch_dtype "float32"; a plain merge copies config.json byte for byte.
  * --tie_word_embedding on a model whose head is its embedding (config says untied): no
    lm_head.weight, config.json says tie_word_embeddings true.
  * a quantized value model (Megatron, score head): every 2-D *.weight left unquantized except
    the embedding is in quantization_config.ignore, no quantized module is.
  * a PEFT adapter on layer 0 only (built here from make_lora_fixtures' PEFT state): PEFT's
    target_modules rule (module == t or module.endswith("." + t)) applied to every module of the
    merged base model selects exactly the modules the adapter has.

    metadata_outputs.py VMERGE MPIEXEC FSDP_FIXTURES MEGATRON_FIXTURES WORK
"""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fixtures"))

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_odls_base_sigkill_timeout="0")  # no 2 s teardown after a failing run
FAILURES = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILURES.append(what)


def headers(folder):
    """{name: (dtype, shape)} over the folder's *.safetensors files."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as h:
                n = struct.unpack("<Q", h.read(8))[0]
                header = json.loads(h.read(n))
            header.pop("__metadata__", None)
            out.update({k: (v["dtype"], v["shape"]) for k, v in header.items()})
    return out


def pairs(path):
    with open(path) as f:
        return json.load(f, object_pairs_hook=list)


def merge(vmerge, mpiexec, local_dir, target, *args, np=2):
    shutil.rmtree(target, ignore_errors=True)
    cmd = [mpiexec, "--oversubscribe", "-np", str(np), vmerge, "merge", "--local_dir", local_dir,
           "--target_dir", target, "--quiet", *args]
    done = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit("FAIL: " + " ".join(cmd) + "\n" + done.stdout.decode(errors="replace"))


def dtype_and_tie(vmerge, mpiexec, fsdp, work):
    src = os.path.join(fsdp, "w2_bf16")
    out = os.path.join(work, "fp32")
    merge(vmerge, mpiexec, src, out, "--dtype", "fp32")
    check(all(d == "F32" for d, _ in headers(out).values()), "--dtype fp32: every tensor is F32")
    want = [(k, "float32" if k == "torch_dtype" else v) for k, v in pairs(os.path.join(src, "huggingface", "config.json"))]
    check(pairs(os.path.join(out, "config.json")) == want,
          "--dtype fp32: config.json is the source's with torch_dtype float32, keys in order")

    plain = os.path.join(work, "plain")
    merge(vmerge, mpiexec, src, plain)
    with open(os.path.join(src, "huggingface", "config.json"), "rb") as a, open(os.path.join(plain, "config.json"), "rb") as b:
        check(a.read() == b.read(), "plain merge: config.json copied byte for byte")

    tied = os.path.join(work, "tied_src")
    shutil.rmtree(tied, ignore_errors=True)
    shutil.copytree(os.path.join(fsdp, "tied_w2"), tied)
    cfg_path = os.path.join(tied, "huggingface", "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = False
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    out = os.path.join(work, "tied")
    merge(vmerge, mpiexec, tied, out, "--tie_word_embedding")
    got = json.load(open(os.path.join(out, "config.json")))
    check(got.get("tie_word_embeddings") is True and "lm_head.weight" not in headers(out),
          "--tie_word_embedding: no lm_head.weight and config.json says tie_word_embeddings true")
    check({k: v for k, v in got.items() if k != "tie_word_embeddings"} ==
          {k: v for k, v in cfg.items() if k != "tie_word_embeddings"}, "--tie_word_embedding: other keys unchanged")


def quantized_value_model(vmerge, mpiexec, megatron, work):
    src = os.path.join(megatron, "verl_qwen2_tp2_pp2_value", "actor")
    out = os.path.join(work, "value_w4")
    merge(vmerge, mpiexec, src, out, "--quantize", "--group_size", "32")
    h = headers(out)
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    ignore = set(qc["ignore"])
    quantized = {k[:-len(".weight_packed")] for k in h if k.endswith(".weight_packed")}
    linear = {k[:-len(".weight")] for k, (_, shape) in h.items()
              if k.endswith(".weight") and len(shape) == 2 and k != "model.embed_tokens.weight"}
    check("score" in linear and linear <= ignore, "value model: every unquantized Linear (score too) is in ignore")
    check(quantized and not (quantized & ignore), "value model: no quantized module is in ignore")


def lora_layer0(vmerge, mpiexec, work):
    import torch
    import make_fsdp_fixtures as F
    import make_lora_fixtures as L

    c = F.Cfg(64, 32, 48, 2, 4, 2, False)
    spec = {"r": 4, "targets": ("q_proj", "down_proj"), "pdtype": torch.float32, "scale": lambda r: 2.0}
    full = F.make_full_model(c, 7, torch.float32)
    sd, _, _, _ = L.peft_state(full, spec, torch.Generator().manual_seed(8))
    # Keep the adapters of layer 0 only; layer 1's modules become plain base weights.
    kept = {}
    for k, t in sd.items():
        if ".layers.1." in k and (".lora_A." in k or ".lora_B." in k):
            continue
        kept[k.replace(".base_layer.", ".") if ".layers.1." in k else k] = t
    adapted = sorted({k[len(L.P):].split(".lora_A.")[0] for k in kept if ".lora_A." in k})
    root = os.path.join(work, "lora_layer0")
    shutil.rmtree(root, ignore_errors=True)
    actor = os.path.join(root, "actor")
    os.makedirs(actor)
    for rank in range(2):
        rank_sd, cpu_st, style, _ = F.build_rank_state({"world": 2, "cfg": c, "kind": "fsdp"}, kept, rank, 7)
        F.torch_save(rank_sd, os.path.join(actor, "model_world_size_2_rank_%d.pt" % rank),
                     location="cuda:%d" % rank, cpu_storages=cpu_st, style=style)
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": 2}, f)
    F.write_hf_dir(os.path.join(actor, "huggingface"), c, "float32")
    out = os.path.join(work, "lora_layer0_out")
    merge(vmerge, mpiexec, actor, out, "--lora_alpha", "8")
    targets = json.load(open(os.path.join(out, "lora_adapter", "adapter_config.json")))["target_modules"]
    modules = {k[:-len(".weight")] for k in headers(out) if k.endswith(".weight")}
    selected = sorted(m for m in modules if any(m == t or m.endswith("." + t) for t in targets))
    check(selected == adapted, "layer-0 adapter: target_modules %s select exactly %s (got %s)" % (targets, adapted, selected))


def main():
    vmerge, mpiexec, fsdp, megatron, work = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    dtype_and_tie(vmerge, mpiexec, fsdp, work)
    quantized_value_model(vmerge, mpiexec, megatron, work)
    lora_layer0(vmerge, mpiexec, work)
    if FAILURES:
        sys.exit("%d check(s) failed" % len(FAILURES))
    shutil.rmtree(work, ignore_errors=True)
    print("metadata_outputs: all checks passed")


if __name__ == "__main__":
    main()
