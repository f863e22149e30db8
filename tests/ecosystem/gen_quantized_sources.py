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


def make_compressed_fp8(case_dir, variant):
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    cfg = E.tiny_config("llama", sizes=E.SIZES_128)
    model = E.build_model(cfg)
    block = variant == "fp8_block_ct"
    state, scheme = compressed_fp8_state_dict(model, block)
    assert any(v.dtype == torch.float8_e4m3fn for v in state.values())
    hf = os.path.join(case_dir, "actor", "huggingface")
    qc = QuantizationConfig(config_groups={"group_0": scheme}, format="float-quantized",
                            quantization_status="compressed", ignore=["lm_head"])
    cfg.quantization_config = qc.model_dump(exclude_none=False)
    E.save_hf_files(cfg, hf)
    save_file(state, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16,
                                                  quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
    weights = {k: v.detach().contiguous().clone() for k, v in loaded.state_dict().items()}
    assert all(v.dtype == torch.bfloat16 for v in weights.values()), "transformers kept FP8 weights"
    E.write_oracle(case_dir, weights, E.live_logits(loaded))
    import compressed_tensors
    preset = "FP8_BLOCK" if block else "FP8_DYNAMIC"
    E.write_case(case_dir, producer="compressed-tensors %s %s (float-quantized)" % (compressed_tensors.__version__, preset),
                 checkpoint="actor", merge_args=[], output_dtype="bfloat16", hf_load=True, logits_exact=True,
                 quantized_modes=["fp8_dynamic", "fp8_block"],
                 passthrough_modes={variant: "actor/huggingface/model.safetensors"})


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    os.makedirs(case_dir, exist_ok=True)
    if variant == "fp8_block":
        make_fp8_block(case_dir)
    else:  # fp8_dynamic, fp8_block_ct: compressed by compressed-tensors
        make_compressed_fp8(case_dir, variant)


if __name__ == "__main__":
    main()
