#!/usr/bin/python3
"""Write a torchtitan checkpoint whose grouped experts have GPT-OSS-120B's per-expert shape, and
its Hugging Face base, to measure what `vmerge-mpi map` holds while it compares them.

    /usr/bin/python3 scripts/bench/make_bench_grouped_experts.py OUT_DIR [--experts 8] [--layers 2] [--dim 2880]

OUT_DIR/outputs/checkpoint/step-10/ is a DCP save (FSDP2 Shard(0) over 2 ranks, written by
tests/fixtures/dcp_writer.py as the torchtitan fixtures are) of, per layer, torchtitan GPT-OSS's
grouped expert weights mlp1_weight_EGD [E, 2F, D] and mlp2_weight_EDF [E, D, F] (D = F = --dim,
2880 as in GPT-OSS-120B; bf16: one expert's gate_up matrix is 16.6M elements) and the layer's
attention norm;
OUT_DIR/base/ holds the same tensors as transformers stores GPT-OSS ([E, D, 2F] gate_up_proj,
[E, F, D] down_proj: the last two axes swapped) with a GptOss config.json. map compares each
grouped tensor whole, transposed, with the base tensor: one row is one expert's whole matrix.
"""
import argparse
import collections
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "fixtures"))

import torch  # noqa: E402

import dcp_writer as dw  # noqa: E402
import make_fsdp_fixtures as FS  # noqa: E402
import make_torchtitan_fixtures as TT  # noqa: E402

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=2880, help="hidden and expert intermediate size (GPT-OSS-120B's)")
    args = parser.parse_args()
    D = F = args.dim
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    g = torch.Generator().manual_seed(7)
    checkpoint, base = collections.OrderedDict(), collections.OrderedDict()
    for layer in range(args.layers):
        tt, hf = "layers.%d." % layer, "model.layers.%d." % layer
        mlp1 = (0.02 * torch.randn(args.experts, 2 * F, D, generator=g)).to(torch.bfloat16)
        mlp2 = (0.02 * torch.randn(args.experts, D, F, generator=g)).to(torch.bfloat16)
        norm = 1 + 0.1 * torch.randn(D, generator=g)
        checkpoint[tt + "moe.routed_experts.inner_experts.mlp1_weight_EGD"] = mlp1
        checkpoint[tt + "moe.routed_experts.inner_experts.mlp2_weight_EDF"] = mlp2
        checkpoint[tt + "attention_norm.weight"] = norm
        base[hf + "mlp.experts.gate_up_proj"] = mlp1.transpose(1, 2).contiguous()
        base[hf + "mlp.experts.down_proj"] = mlp2.transpose(1, 2).contiguous()
        base[hf + "input_layernorm.weight"] = norm.clone()
    tensors = [(k, tuple(v.shape), TT.shard0_chunks(v)) for k, v in checkpoint.items()]
    dw.write_dcp(os.path.join(args.out, "outputs", "checkpoint", "step-10"), tensors, [], files_per_rank=1, world_size=TT.W)
    os.makedirs(os.path.join(args.out, "base"))
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": D,
              "intermediate_size": F, "num_hidden_layers": args.layers, "num_attention_heads": 64,
              "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": args.experts, "vocab_size": 201088,
              "dtype": "bfloat16"}
    with open(os.path.join(args.out, "base", "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    FS.write_safetensors(os.path.join(args.out, "base", "model.safetensors"), base)
    size = sum(v.numel() * v.element_size() for v in checkpoint.values())
    print("grouped experts: %d layers x %d experts, %.2f GB per side in %s" % (args.layers, args.experts, size / 1e9, args.out))


if __name__ == "__main__":
    main()
