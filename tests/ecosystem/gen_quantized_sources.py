"""Quantized Hugging Face sources, written by the producer's own quantizer, for vmerge to read.

    gen_quantized_sources.py CASE_DIR VARIANT       (under torchrun, one process)

fp8_block   a Llama (every Linear a multiple of 128) whose layer Linears transformers' own
            FineGrainedFP8 reverse op (Fp8Quantize, what save_pretrained of an FP8 model runs)
            made block FP8: <m>.weight F8_E4M3 + <m>.weight_scale_inv F32 per 128x128 block,
            config.json with quantization_config {quant_method: fp8, weight_block_size}, in
            actor/huggingface/ as verl >= 0.7 saves HF weights. Oracle: the model transformers'
            from_pretrained builds from that folder on the CPU (it dequantizes block FP8 there),
            its state dict and its logits.
fp8_dynamic the same Llama quantized by compressed-tensors' own CPU functions as llm-compressor's
            model-free path drives them for the FP8_DYNAMIC preset (calculate_qparams per row in
            the weight dtype, then the float-quantized compressor): <m>.weight F8_E4M3 +
            <m>.weight_scale [N, 1] BF16, config.json with compressed-tensors' own
            QuantizationConfig. Oracle: transformers' from_pretrained with
            CompressedTensorsConfig(dequantize=True), its state dict and logits.
fp8_block_ct the same with compressed-tensors' FP8_BLOCK preset (per 128x128 block, the functions
            fp8_ct_oracle.py drives): <m>.weight F8_E4M3 + <m>.weight_scale [N/128, K/128] BF16.
nvfp4_ct    the same Llama quantized by compressed-tensors 0.20's own CPU quantizer for the NVFP4A16
            preset (fp4_oracle.expected_tensors: per-group min/max, one global scale per fused
            group from generate_gparam, calculate_qparams, NVFP4PackedCompressor):
            <m>.weight_packed U8 + <m>.weight_scale F8_E4M3 per 16 + <m>.weight_global_scale F32.
            Oracle: transformers' from_pretrained with CompressedTensorsConfig(dequantize=True).
mxfp4_ct    the same with the MXFP4A16 preset: <m>.weight_packed + <m>.weight_scale U8 (UE8M0) per 32.
gpt_oss_mxfp4  a tiny GptOssForCausalLM whose routed experts are GPT-OSS MXFP4
            (quant_method "mxfp4"): <p>_blocks U8 [E, N, K/32, 16] + <p>_scales U8 [E, N, K/32].
            transformers offers no CPU path that quantizes to this layout (its Mxfp4 quantizer needs
            triton kernels), so the bytes are written from the format's definition: every code byte
            uniform in 0..255 (all 16 E2M1 codes in both nibbles) and scales 2^-8..2^1 (bytes
            119..128), from a seeded generator. Oracle: transformers' own reading of the folder,
            from_pretrained with Mxfp4Config(dequantize=True) on the CPU (bf16 experts
            [E, K, N], the layout its save_pretrained writes), its state dict and logits.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402

BLOCK = [128, 128]


class _QuantizerConfig:
    """What Fp8Quantize reads from the quantizer it is given: its quantization_config."""

    def __init__(self, config):
        self.quantization_config = config


def fp8_state_dict(model, quant_config):
    """The model's state dict with every layer Linear made block FP8 by transformers' Fp8Quantize."""
    from transformers.integrations.finegrained_fp8 import Fp8Quantize
    quantize = Fp8Quantize(_QuantizerConfig(quant_config))
    out = {}
    for name, value in model.state_dict().items():
        value = value.detach().contiguous()
        if name.startswith("model.layers.") and name.endswith("_proj.weight"):
            out.update({k: v.contiguous() for k, v in quantize.convert({name: value}).items()})
        else:
            out[name] = value
    return out


def make_fp8_block(case_dir):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
    cfg = E.tiny_config("llama", sizes=E.SIZES_128)
    model = E.build_model(cfg)
    quant_config = FineGrainedFP8Config(weight_block_size=BLOCK)
    state = fp8_state_dict(model, quant_config)
    assert any(v.dtype == torch.float8_e4m3fn for v in state.values())
    hf = os.path.join(case_dir, "actor", "huggingface")
    cfg.quantization_config = quant_config.to_dict()
    E.save_hf_files(cfg, hf)
    save_file(state, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    # The producer's own reading of the folder: on a CPU, from_pretrained dequantizes block FP8.
    loaded = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16).eval()
    weights = {k: v.detach().contiguous().clone() for k, v in loaded.state_dict().items()}
    assert all(v.dtype == torch.bfloat16 for v in weights.values()), "transformers kept FP8 weights"
    E.write_oracle(case_dir, weights, E.live_logits(loaded))
    E.write_case(case_dir, producer="transformers %s Fp8Quantize (FineGrainedFP8, block 128x128)" % __import__(
                     "transformers").__version__,
                 checkpoint="actor", merge_args=[], output_dtype="bfloat16", hf_load=True, logits_exact=True,
                 quantized_modes=["fp8_block", "fp8_block_ct", "nvfp4"],
                 passthrough_modes={"fp8_block": "actor/huggingface/model.safetensors"})


def compressed_fp8_state_dict(model, block=False):
    """The model's state dict with every layer Linear compressed by compressed-tensors (FP8_DYNAMIC,
    or FP8_BLOCK with `block`)."""
    import fp8_ct_oracle
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import FP8_DYNAMIC
    from compressed_tensors.quantization.utils.helpers import calculate_qparams
    scheme = fp8_ct_oracle.scheme() if block else QuantizationScheme(targets=["Linear"], **FP8_DYNAMIC)
    out = {}
    for name, value in model.state_dict().items():
        value = value.detach().contiguous()
        if not (name.startswith("model.layers.") and name.endswith("_proj.weight")):
            out[name] = value
            continue
        module = name[: -len(".weight")]
        if block:
            compressed = fp8_ct_oracle.compress(value)
        else:
            scale, zero_point = calculate_qparams(value.amin(dim=1, keepdim=True), value.amax(dim=1, keepdim=True),
                                                  scheme.weights)
            state = {"weight": value, "weight_scale": scale.to(value.dtype), "weight_zero_point": zero_point}
            compressed = FloatQuantizationCompressor.compress(state, scheme)
        for key, tensor in compressed.items():
            out[f"{module}.{key}"] = tensor.contiguous()
    return out, scheme


def save_and_load_dequantized(cfg, quantization_config, state, hf):
    """Writes a compressed-tensors folder (config.json with its quantization_config, the tensors)
    and loads it back through transformers' own decompressor: the live model and its bf16
    weights, the oracle of a dequantizing merge."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    cfg.quantization_config = quantization_config.model_dump(exclude_none=False)
    E.save_hf_files(cfg, hf)
    save_file(state, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16,
                                                  quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
    weights = {k: v.detach().contiguous().clone() for k, v in loaded.state_dict().items()}
    assert all(v.dtype == torch.bfloat16 for v in weights.values()), "transformers kept quantized weights"
    return loaded, weights


def make_compressed_fp8(case_dir, variant):
    from compressed_tensors.quantization import QuantizationConfig
    cfg = E.tiny_config("llama", sizes=E.SIZES_128)
    model = E.build_model(cfg)
    block = variant == "fp8_block_ct"
    state, scheme = compressed_fp8_state_dict(model, block)
    assert any(v.dtype == torch.float8_e4m3fn for v in state.values())
    hf = os.path.join(case_dir, "actor", "huggingface")
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format="float-quantized",
                            quantization_status="compressed", ignore=["lm_head"])
    loaded, weights = save_and_load_dequantized(cfg, qc, state, hf)
    E.write_oracle(case_dir, weights, E.live_logits(loaded))
    import compressed_tensors
    preset = "FP8_BLOCK" if block else "FP8_DYNAMIC"
    E.write_case(case_dir, producer="compressed-tensors %s %s (float-quantized)" % (compressed_tensors.__version__, preset),
                 checkpoint="actor", merge_args=[], output_dtype="bfloat16", hf_load=True, logits_exact=True,
                 quantized_modes=["fp8_dynamic", "fp8_block"],
                 passthrough_modes={variant: "actor/huggingface/model.safetensors"})


def make_compressed_fp4(case_dir, variant):
    """A Llama whose layer Linears compressed-tensors' own quantizer made NVFP4A16 / MXFP4A16."""
    import compressed_tensors
    import fp4_oracle
    from compressed_tensors.quantization import QuantizationConfig
    kind = variant[: -len("_ct")]
    cfg = E.tiny_config("llama", sizes=E.SIZES_128)
    model = E.build_model(cfg)
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    compressed = fp4_oracle.expected_tensors(weights, kind)
    quantized = {k[: -len("_packed")] for k in compressed if k.endswith(".weight_packed")}
    assert quantized, "nothing quantized"
    state = {k: v for k, v in weights.items() if k not in quantized}
    state.update({k: v.contiguous().clone() for k, v in compressed.items()})  # a fused group shares one global scale tensor
    hf = os.path.join(case_dir, "actor", "huggingface")
    qc = QuantizationConfig(config_groups={"group_0": fp4_oracle.scheme(kind)},
                            format=f"{kind}-pack-quantized", quantization_status="compressed", ignore=["lm_head"])
    loaded, oracle = save_and_load_dequantized(cfg, qc, state, hf)
    # The oracle must be compressed-tensors' decompressor itself, module by module.
    for weight in quantized:
        module = weight[: -len(".weight")]
        assert torch.equal(oracle[weight], fp4_oracle.decompressed(state, module, kind)), weight
    E.write_oracle(case_dir, oracle, E.live_logits(loaded))
    other = "mxfp4" if kind == "nvfp4" else "nvfp4"
    E.write_case(case_dir, producer="compressed-tensors %s %sA16 (%s-pack-quantized)" % (
                     compressed_tensors.__version__, kind.upper(), kind),
                 checkpoint="actor", merge_args=[], output_dtype="bfloat16", hf_load=True, logits_exact=True,
                 quantized_modes=[other, "fp8_block_ct"],
                 passthrough_modes={kind: "actor/huggingface/model.safetensors"})


def make_gpt_oss_mxfp4(case_dir):
    """GPT-OSS with MXFP4 experts, written from the format's definition; oracle: transformers' dequantization."""
    import gen_families as F
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, Mxfp4Config
    cfg = F.gpt_oss_config()
    cfg.intermediate_size = 64  # the experts' inputs (hidden 64, intermediate) in whole 32-blocks
    cfg.dtype = "bfloat16"
    model = E.build_model(cfg)
    g = torch.Generator().manual_seed(31)
    state = {}
    for name, value in model.state_dict().items():
        value = value.detach().contiguous()
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            state[name] = value
            continue
        experts, k, n = value.shape  # transformers' [E, in, out]; the blocks are [E, out, in/32, 16]
        state[name + "_blocks"] = torch.randint(0, 256, (experts, n, k // 32, 16), generator=g, dtype=torch.uint8)
        state[name + "_scales"] = torch.randint(119, 129, (experts, n, k // 32), generator=g, dtype=torch.uint8)
    hf = os.path.join(case_dir, "actor", "huggingface")
    cfg.quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    E.save_hf_files(cfg, hf)
    save_file(state, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16,
                                                  quantization_config=Mxfp4Config(dequantize=True)).eval()
    weights = {k: v.detach().contiguous().clone() for k, v in loaded.state_dict().items()}
    assert weights["model.layers.0.mlp.experts.gate_up_proj"].dtype == torch.bfloat16
    E.write_oracle(case_dir, weights, E.live_logits(loaded))
    E.write_case(case_dir, producer="GPT-OSS MXFP4 layout written from the format (transformers %s Mxfp4Config"
                 "(dequantize=True) reads it)" % __import__("transformers").__version__,
                 checkpoint="actor", merge_args=[], output_dtype="bfloat16", hf_load=True, logits_exact=True,
                 oracle_dtypes=True)


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    os.makedirs(case_dir, exist_ok=True)
    if variant == "fp8_block":
        make_fp8_block(case_dir)
    elif variant == "gpt_oss_mxfp4":
        make_gpt_oss_mxfp4(case_dir)
    elif variant in ("nvfp4_ct", "mxfp4_ct"):
        make_compressed_fp4(case_dir, variant)
    else:  # fp8_dynamic, fp8_block_ct: compressed by compressed-tensors
        make_compressed_fp8(case_dir, variant)


if __name__ == "__main__":
    main()
