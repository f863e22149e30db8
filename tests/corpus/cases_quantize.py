"""Corpus cases of the non-finite policy (docs/quantization.md, "NaN, infinity and tiny scales"):
a NaN or an infinity in a weight that is quantized (int4, int8, block FP8, FP8_DYNAMIC, NVFP4, MXFP4) or folded
(the base weight, lora_A, lora_B) stops the merge with one error naming the tensor, row, column
and value; exit code 1; no target and no staging folder left. A plain merge of the same
checkpoint copies the NaN as it is.

The checkpoints are small verl FSDP2 bf16 models written here by the fixture generators'
torch.save emulation (Debian's torch), with the one bad value set in the full tensor before it
is sharded over 2 ranks; the expected row and column are those set, not vmerge's output."""
import os
import sys

from corpus_lib import FIXTURES_SRC, case

sys.path.insert(0, FIXTURES_SRC)
import torch  # noqa: E402

import make_fsdp_fixtures as F  # noqa: E402
import make_lora_fixtures as L  # noqa: E402

# All Linear input sizes are multiples of 128 (the default --group_size): every Linear is
# quantized by every scheme. q/o [128, 128], k/v [64, 128], gate/up [256, 128], down [128, 256].
CFG = F.Cfg(64, 128, 256, 2, 4, 2, False)
WORLD = 2
PEFT = "base_model.model."

QUANTIZE_WHY = ("a weight must be finite to be quantized (no scale represents it); merge without --quantize to keep "
                "the weights as they are, or leave the module out with --quantize_ignore ")
FACTOR_WHY = ("a LoRA factor must be finite to be folded (B·A would carry it into whole rows of the merged weight); "
              "merge with --extract_lora to write the adapter apart, as it is")
BASE_WHY = ("a weight must be finite to have a LoRA update folded into it; merge with --extract_lora to write the "
            "base model and the adapter apart, as they are")


def write_checkpoint(actor, state, seed):
    """`state` (full tensors) as verl FSDP2 rank files of WORLD ranks, with fsdp_config.json and
    huggingface/ (config dtype bfloat16)."""
    os.makedirs(actor)
    spec = {"world": WORLD, "cfg": CFG, "kind": "fsdp"}
    for rank in range(WORLD):
        sd, cpu_st, style, _keep = F.build_rank_state(spec, state, rank, seed)
        F.torch_save(sd, os.path.join(actor, "model_world_size_%d_rank_%d.pt" % (WORLD, rank)),
                     location="cuda:%d" % rank, cpu_storages=cpu_st, style=style)
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        f.write('{"FSDP_version": 2, "world_size": %d}\n' % WORLD)
    F.write_hf_dir(os.path.join(actor, "huggingface"), CFG, "bfloat16")
    return actor


def model_with(out, name, tensor, row, col, value, seed=5100):
    """out/name/actor: the bf16 model with full[tensor][row, col] = value."""
    full = F.make_full_model(CFG, seed, torch.bfloat16)
    full[tensor][row, col] = value
    return write_checkpoint(os.path.join(out, name, "actor"), full, seed)


def lora_model_with(out, name, tensor, row, col, value, seed=5200):
    """out/name/actor: the bf16 model as a PeftModel with r=4 adapters on q_proj and v_proj, the
    PEFT state dict's `tensor` (base_layer, lora_A or lora_B) holding `value` at [row, col]."""
    full = F.make_full_model(CFG, seed, torch.bfloat16)
    spec = {"r": 4, "targets": ("q_proj", "v_proj"), "pdtype": torch.bfloat16, "scale": lambda r: 16 / r}
    sd, _adapter, _deltas, _trained = L.peft_state(full, spec, torch.Generator().manual_seed(seed + 1))
    sd[PEFT + tensor][row, col] = value
    return write_checkpoint(os.path.join(out, name, "actor"), sd, seed)


def message(tensor, row, col, value, why):
    return "%s: row %d, column %d is %s; %s" % (tensor, row, col, value, why)


def add_cases(good_fsdp, good_megatron, out):
    quantizer_cases(out)
    fold_cases(out)


def quantizer_cases(out):
    nan, inf = float("nan"), float("inf")
    for name, tensor, row, col, value, text, args, notes in (
            ("quantize_int4_nan", "model.layers.0.mlp.down_proj.weight", 100, 200, nan, "nan", ["--quantize"],
             "int4: a NaN in rank 1's rows of down_proj"),
            ("quantize_int8_inf", "model.layers.1.self_attn.o_proj.weight", 5, 17, inf, "inf",
             ["--quantize", "--bits", "8", "--asymmetric"], "int8 asymmetric: +inf in rank 0's rows of o_proj"),
            ("quantize_fp8_block_minus_inf", "model.layers.1.mlp.gate_proj.weight", 200, 3, -inf, "-inf",
             ["--quantize=fp8"], "block FP8: -inf in the second 128-row stripe of gate_proj"),
            ("quantize_fp8_dynamic_nan", "model.layers.0.self_attn.v_proj.weight", 63, 127, nan, "nan",
             ["--quantize=fp8-dynamic"], "FP8_DYNAMIC: a NaN in the last row and column of v_proj"),
            ("quantize_fp8_ct_block_nan", "model.layers.0.mlp.up_proj.weight", 200, 100, nan, "nan",
             ["--quantize=fp8-block"], "FP8_BLOCK: a NaN in the second 128-row stripe of up_proj"),
            ("quantize_nvfp4_nan", "model.layers.0.self_attn.k_proj.weight", 40, 9, nan, "nan",
             ["--quantize=nvfp4"], "NVFP4: a NaN in k_proj, met by the global-scale pass of q/k/v"),
            ("quantize_mxfp4_inf", "model.layers.1.mlp.up_proj.weight", 130, 64, inf, "inf",
             ["--quantize=mxfp4"], "MXFP4: +inf in rank 1's rows of up_proj")):
        actor = model_with(out, name, tensor, row, col, value)
        module = tensor[:-len(".weight")]
        case(name, actor, message(tensor, row, col, text, QUANTIZE_WHY + module), notes + ": refused", args=args)
    # The same NaN without --quantize: copied bit for bit, as the checkpoint holds it.
    actor = model_with(out, "plain_merge_keeps_nan", "model.layers.0.mlp.down_proj.weight", 100, 200, nan)
    case("plain_merge_keeps_nan", actor, [], "a NaN weight in a plain merge is copied, not refused", exit=0,
         output=["vmerge: merged"], target_has=["model.safetensors"])


def fold_cases(out):
    nan, inf = float("nan"), float("inf")
    b = "model.layers.0.self_attn.q_proj.lora_B.default.weight"  # [128, 4]
    actor = lora_model_with(out, "fold_nan_in_lora_b", b, 70, 3, nan)
    case("fold_nan_in_lora_b", actor, message(PEFT + b, 70, 3, "nan", FACTOR_WHY),
         "--merge_lora with a NaN in lora_B: refused, naming B", args=["--merge_lora", "--lora_alpha", "16"])

    a = "model.layers.1.self_attn.v_proj.lora_A.default.weight"  # [4, 128]
    actor = lora_model_with(out, "fold_inf_in_lora_a_quantized", a, 2, 50, inf)
    case("fold_inf_in_lora_a_quantized", actor, message(PEFT + a, 2, 50, "inf", FACTOR_WHY),
         "--merge_lora --quantize with +inf in lora_A: refused before quantizing",
         args=["--merge_lora", "--lora_alpha", "16", "--quantize"])

    base = "model.layers.0.self_attn.q_proj.base_layer.weight"  # [128, 128]
    actor = lora_model_with(out, "fold_minus_inf_in_base", base, 10, 11, -inf)
    case("fold_minus_inf_in_base", actor, message("model.layers.0.self_attn.q_proj.weight", 10, 11, "-inf", BASE_WHY),
         "--merge_lora with -inf in the adapted base weight: refused, naming the merged weight",
         args=["--merge_lora", "--lora_alpha", "16"])
