"""torch.distributed.checkpoint folders of models whose weights torchao made float8, saved by torch
2.13's real dcp.save on gloo ranks (issue 31: FP8 weights in DCP saves).

    torchrun --standalone --nproc_per_node=N gen_torchao_fp8.py CASE_DIR VARIANT

VARIANT (2 ranks):
  quantized_mixed   a Qwen2 (bf16, intermediate 96) through torchao's quantize_: the attention
                    projections and lm_head with Float8WeightOnlyConfig (per-row scales), the MLP
                    projections with Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor())
                    (one scale);
                    each weight a torchao Float8Tensor (qdata float8_e4m3fn + float32 scale), saved
                    with dcp.save({"model": model.state_dict()}). The oracle is torchao's own
                    dequantize() of each Float8Tensor on the CPU.
  quantized_block   the same Qwen2 at width 128 with Float8DynamicActivationFloat8WeightConfig(
                    granularity=(PerBlock([1, 128]), PerBlock([128, 128]))) on every Linear of the
                    layers: 128x128 blocks with float32 scales, DeepSeek-V3's block FP8, so
                    --quantize=fp8 writes torchao's codes and scales as they are (pass-through)
  training_fsdp     float8 training: torchao's convert_to_float8_training with
                    enable_fsdp_float8_all_gather=True (what torchtitan's float8 converter does) on
                    a float32 Qwen2, fully_shard over the ranks, dcp.save of get_model_state_dict:
                    every Linear weight a DTensor whose local tensor is torchao's
                    WeightWithDynamicFloat8CastTensor, which stores the float32 master weight
                    (no float8 bytes in the save). The oracle is the live model's full tensors.

Float8DynamicActivationFloat8WeightConfig refuses to run without a CUDA device of compute capability
8.9 (its activations are quantized in the matmul); its weight quantization is CPU code
(Float8Tensor.from_hp). The generator skips that device check only, so the weights are those the
config writes on such a device.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402


def quantize_torchao(model, variant):
    import torchao.quantization.quant_api as quant_api
    from torchao.quantization import (Float8DynamicActivationFloat8WeightConfig, Float8WeightOnlyConfig, PerTensor,
                                      quantize_)
    from torchao.quantization.granularity import PerBlock
    quant_api._check_hardware_support = lambda *args, **kwargs: None  # see the module docstring
    if variant == "quantized_block":
        block = Float8DynamicActivationFloat8WeightConfig(granularity=(PerBlock([1, 128]), PerBlock([128, 128])))
        quantize_(model, block, filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and ".layers." in fqn)
        return
    per_row = lambda m, fqn: isinstance(m, torch.nn.Linear) and (".self_attn." in fqn or fqn == "lm_head")  # noqa: E731
    quantize_(model, Float8WeightOnlyConfig(), filter_fn=per_row)
    mlp = lambda m, fqn: isinstance(m, torch.nn.Linear) and ".mlp." in fqn  # noqa: E731
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerTensor()), filter_fn=mlp)


def dequantized(state_dict, variant):
    """torchao's own dequantization of every Float8Tensor (float32 code x scale, to its dtype).
    Every Linear weight must be one: the dynamic config silently leaves a weight whose sizes are
    not multiples of 16 as it is (its _fp8_mm_compat), which would leave the case testing less."""
    from torchao.quantization import Float8Tensor
    out, count = {}, 0
    for name, value in state_dict.items():
        if isinstance(value, Float8Tensor):
            value, count = value.dequantize(), count + 1
        elif name.endswith("_proj.weight") or (name == "lm_head.weight" and variant == "quantized_mixed"):
            raise SystemExit(f"torchao left {name} {tuple(value.shape)} unquantized")
        out[name] = value.detach().contiguous().clone()
    return out, count


def block_source(state_dict):
    """What --quantize=fp8 must write for the quantized_block save: torchao's codes and scales
    bit for bit (scale as <m>.weight_scale_inv), every other tensor as it is."""
    from torchao.quantization import Float8Tensor
    out = {}
    for name, value in state_dict.items():
        if isinstance(value, Float8Tensor):
            assert value.block_size == [128, 128], value.block_size
            out[name] = value.qdata.contiguous().clone()
            out[name + "_scale_inv"] = value.scale.contiguous().clone()
        else:
            out[name] = value.detach().contiguous().clone()
    return out


def run_quantized(case_dir, variant, rank, world):
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file
    # The dynamic config quantizes only weights whose sizes are multiples of 16: intermediate 96.
    sizes = E.SIZES_128 if variant == "quantized_block" else dict(intermediate_size=96)
    cfg = E.tiny_config("qwen2", dtype="bfloat16", sizes=sizes)
    model = E.build_model(E.tiny_config("qwen2", dtype="bfloat16", sizes=sizes))
    quantize_torchao(model, variant)
    state_dict = model.state_dict()
    dcp.save({"model": state_dict}, checkpoint_id=os.path.join(case_dir, "ckpt"))
    if rank != 0:
        return
    oracle, count = dequantized(state_dict, variant)
    # The logits of the model as its dequantized weights make it (what any loader of the merged
    # folder computes); the weights themselves are the oracle.
    reference = E.build_model(E.tiny_config("qwen2", dtype="bfloat16", sizes=sizes))
    reference.load_state_dict(oracle)
    E.save_hf_files(cfg, os.path.join(case_dir, "hf_config"))
    E.write_oracle(case_dir, oracle, E.live_logits(reference))
    extra = {}
    if variant == "quantized_block":
        save_file(block_source(state_dict), os.path.join(case_dir, "oracle", "fp8_block_source.safetensors"))
        extra = {"passthrough_modes": {"fp8_block": "oracle/fp8_block_source.safetensors"}}
    else:
        extra = {"quantized_modes": ["fp8_dynamic"]}
    E.write_case(case_dir, producer=f"torch {torch.__version__} torchao quantize_ ({variant}: {count} Float8Tensor "
                 f"weights) + dcp.save on {world} ranks", checkpoint="ckpt", output_dtype="bfloat16", hf_load=True,
                 logits_exact=True, merge_args=["--backend", "dcp"], hf_config="hf_config", **extra)


def run_training(case_dir, variant, rank, world):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor
    cfg = E.tiny_config("qwen2", dtype="float32")
    model = E.build_model(E.tiny_config("qwen2", dtype="float32"))
    logits = E.live_logits(model)  # float8 training changes the matmuls, not the stored weights
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # torchtitan's float8 converter leaves the output head in high precision.
    convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=True),
                               module_filter_fn=lambda m, fqn: fqn != "lm_head")
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    state_dict = get_model_state_dict(model)
    wrapped = [k for k, v in state_dict.items() if isinstance(v._local_tensor, WeightWithDynamicFloat8CastTensor)]
    assert wrapped, "no weight is a WeightWithDynamicFloat8CastTensor"
    dcp.save({"model": state_dict}, checkpoint_id=os.path.join(case_dir, "ckpt"))
    full = E.full_tensors(state_dict)
    full = {k: (v.to_original_precision() if isinstance(v, WeightWithDynamicFloat8CastTensor) else v)
            for k, v in full.items()}
    full = {k: torch.Tensor(v) if type(v) is not torch.Tensor else v for k, v in full.items()}
    for name, value in full.items():
        assert torch.equal(value, before[name]), f"gathering {name} changed it"
    if rank == 0:
        E.save_hf_files(cfg, os.path.join(case_dir, "hf_config"))
        E.write_oracle(case_dir, full, logits)
        E.write_case(case_dir, producer=f"torch {torch.__version__} torchao float8 training ({len(wrapped)} "
                     f"WeightWithDynamicFloat8CastTensor weights), fully_shard + dcp.save over {world} ranks",
                     checkpoint="ckpt", output_dtype="float32", hf_load=True, logits_exact=True,
                     merge_args=["--backend", "dcp"], hf_config="hf_config")


VARIANTS = {"quantized_mixed": run_quantized, "quantized_block": run_quantized, "training_fsdp": run_training}


if __name__ == "__main__":
    E.run_variant(VARIANTS, sys.argv)
