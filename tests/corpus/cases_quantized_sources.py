"""Corpus cases of quantized sources (docs/quantization.md, "Quantized sources"): a Hugging Face
folder (verl >= 0.7's actor/huggingface/) whose one-byte tensors the config does not account for
is refused naming the tensor and the scheme; a block-FP8 weight without its scale, or with a NaN
scale, is refused naming it; the same folder with sound scales merges. Exit code 1 and nothing
left behind for each refusal.

The safetensors files are written here byte by byte from the format (header length, JSON header,
data), so the float8 tensors need no torch that knows the type."""
import json
import os
import struct

from corpus_lib import case

# A one-layer Llama whose every Linear is one 128x128 block.
HIDDEN, VOCAB = 128, 128
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
          "intermediate_size": HIDDEN, "num_hidden_layers": 1, "num_attention_heads": 2,
          "num_key_value_heads": 2, "head_dim": 64, "vocab_size": VOCAB, "max_position_embeddings": 64,
          "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
BLOCK_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, shape, bytes)} as one safetensors file, in name order."""
    header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        assert len(raw) == SIZE[dtype] * eval("*".join(map(str, shape)) or "1"), name
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def fp8_model(scale=1.0):
    """Every Linear an F8_E4M3 weight (code 0x38 = 1.0) with a one-block F32 weight_scale_inv."""
    tensors = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN], b"\0" * (2 * VOCAB * HIDDEN)),
               "model.norm.weight": ("BF16", [HIDDEN], b"\0" * (2 * HIDDEN)),
               "model.layers.0.input_layernorm.weight": ("BF16", [HIDDEN], b"\0" * (2 * HIDDEN)),
               "model.layers.0.post_attention_layernorm.weight": ("BF16", [HIDDEN], b"\0" * (2 * HIDDEN)),
               "lm_head.weight": ("BF16", [VOCAB, HIDDEN], b"\0" * (2 * VOCAB * HIDDEN))}
    for m in LINEARS:
        tensors[f"model.layers.0.{m}.weight"] = ("F8_E4M3", [HIDDEN, HIDDEN], b"\x38" * (HIDDEN * HIDDEN))
        tensors[f"model.layers.0.{m}.weight_scale_inv"] = ("F32", [1, 1], struct.pack("<f", scale))
    return tensors


def hf_folder(out, name, tensors, quantization):
    """out/name/actor with the model in actor/huggingface/."""
    hf = os.path.join(out, name, "actor", "huggingface")
    os.makedirs(hf)
    config = dict(CONFIG, **({"quantization_config": quantization} if quantization else {}))
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(hf, "model.safetensors"), tensors)
    return os.path.dirname(hf)


def add_cases(good_fsdp, good_megatron, out):
    down = "model.layers.0.mlp.down_proj.weight"
    actor = hf_folder(out, "fp8_without_quantization_config", fp8_model(), None)
    case("fp8_without_quantization_config", actor,
         [": a float8_e4m3fn tensor, and ", "/config.json has no quantization_config"],
         "float8 weights in a folder whose config.json says nothing of their scales: refused by name")

    tensors = fp8_model()
    del tensors[down + "_scale_inv"]
    actor = hf_folder(out, "fp8_scale_missing", tensors, BLOCK_FP8)
    case("fp8_scale_missing", actor, down + ": a float8_e4m3fn weight without its " + down + "_scale_inv",
         "a block-FP8 weight whose weight_scale_inv is missing: refused by name")

    actor = hf_folder(out, "fp8_nan_scale", fp8_model(scale=float("nan")), BLOCK_FP8)
    case("fp8_nan_scale", actor,
         "_scale_inv: row 0, column 0 is nan; a block-FP8 scale must be finite and not negative (the file is damaged)",
         "a NaN weight_scale_inv: refused when its weight is read")

    gpt_oss = {"model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", [2, 256, 4, 16], b"\0" * (2 * 256 * 64))}
    actor = hf_folder(out, "mxfp4_scales_missing", gpt_oss, {"quant_method": "mxfp4"})
    case("mxfp4_scales_missing", actor,
         "model.layers.0.mlp.experts.gate_up_proj_blocks: GPT-OSS MXFP4 blocks without their "
         "model.layers.0.mlp.experts.gate_up_proj_scales",
         "GPT-OSS MXFP4 experts whose scales are missing: refused naming the tensor")
    unread = {"model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", [2, 256, 4, 16], b"\0" * (2 * 256 * 64))}
    actor = hf_folder(out, "unread_scheme_refused", unread, {"quant_method": "awq"})
    case("unread_scheme_refused", actor,
         ["model.layers.0.mlp.experts.gate_up_proj_blocks: a uint8 tensor", "has quant_method 'awq'"],
         "a quantization method vmerge does not read: refused naming the tensor and the scheme")

    actor = hf_folder(out, "fp8_block_merges", fp8_model(scale=0.5), BLOCK_FP8)
    case("fp8_block_merges", actor, [], "the same block-FP8 folder with sound scales: dequantized and written",
         exit=0, output=["7 block-FP8 weights", "quantization_config ('fp8') removed"], target_has=["model.safetensors"])
