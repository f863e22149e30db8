#!/usr/bin/python3
"""A renamed fork of a verl legacy Megatron checkpoint: the same tensors under invented names.

    fork_legacy_megatron.py ACTOR_DIR OUT_ACTOR_DIR

Copies ACTOR_DIR (model/mp_rank_*/model.pt, huggingface/) to OUT_ACTOR_DIR with every key of
every rank's state dict renamed by FORK_NAMES (the vision tower's modules, the text layers'
attention and MLP): a fork of the producer's own save, whose values are the producer's. The
decoder's `decoder.layers.N` prefixes stay, so the pipeline stages still number their layers.
"""
import os
import shutil
import sys

import torch

# (Megatron's name part, the fork's), applied in order to every key.
FORK_NAMES = [
    ("vision_model.decoder.layers.", "vit.blocks."),
    ("vision_model.decoder.final_layernorm.", "vit.final_norm."),
    ("vision_model.projection.encoder.linear_fc1.", "vit.merger.up."),
    ("vision_model.projection.encoder.linear_fc2.", "vit.merger.down."),
    ("vision_model.patch_embed.proj.", "vit.patchify."),
    ("self_attention.linear_qkv.layer_norm_weight", "attn_norm.weight"),
    ("self_attention.linear_qkv.", "attn.fused_in."),
    ("self_attention.linear_proj.", "attn.out."),
    ("mlp.linear_fc1.layer_norm_weight", "ffn_norm.weight"),
    ("mlp.linear_fc1.", "ffn.fused_in."),
    ("mlp.linear_fc2.", "ffn.out."),
    ("input_layernorm.", "norm_in."),
    ("pre_mlp_layernorm.", "norm_ffn."),
]


def fork_key(key):
    for old, new in FORK_NAMES:
        key = key.replace(old, new)
    return key


def main(src, out):
    if os.path.isdir(out):
        shutil.rmtree(out)
    shutil.copytree(os.path.join(src, "huggingface"), os.path.join(out, "huggingface"))
    model = os.path.join(src, "model")
    for rank in sorted(os.listdir(model)):
        state = torch.load(os.path.join(model, rank, "model.pt"), map_location="cpu")
        dicts = state if isinstance(state, list) else [state]
        renamed = [type(d)((fork_key(k), v) for k, v in d.items()) for d in dicts]
        os.makedirs(os.path.join(out, "model", rank))
        torch.save(renamed if isinstance(state, list) else renamed[0], os.path.join(out, "model", rank, "model.pt"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
