"""The NVFP4A16 / MXFP4A16 oracle of the ecosystem round trip: the producer's bf16 weights
(oracle/weights.safetensors, saved from the live model) quantized and compressed by
compressed-tensors' own CPU functions, as llm-compressor's model-free path drives them
(docs/reference/lowbit-formats.md §3.3, §6): per-group min/max observed in the weight dtype, the
NVFP4 global scale from generate_gparam over the whole group vLLM fuses, calculate_qparams, the
scale held in the weight dtype (the parameter compressed-tensors registers for it), then the
format's compressor. vmerge's weight_packed / weight_scale / weight_global_scale must equal these
byte for byte, and compressed-tensors' decompressor must read vmerge's tensors back."""
import re

import torch

import eco_checks as C

GROUP = {"nvfp4": 16, "mxfp4": 32}
# The Linears the float schemes quantize (docs/quantization.md, "What is quantized").
LINEAR = re.compile(r"model\.layers\..*(_proj|\.kv_a_proj_with_mqa|\.w[123])\.weight")
# The parts vLLM loads as one weight: one scheme for all, and NVFP4's one global scale.
FUSED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
         "q_a_proj": "qkv_a", "kv_a_proj_with_mqa": "qkv_a", "w1": "w13", "w3": "w13"}


def scheme(kind):
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import MXFP4A16, NVFP4A16
    preset = NVFP4A16 if kind == "nvfp4" else MXFP4A16
    return QuantizationScheme(targets=["Linear"], **preset)


def fused_key(module):
    parent, _, last = module.rpartition(".")
    return f"{parent}|{FUSED[last]}" if last in FUSED else module


def expected_modules(weights, kind):
    """The modules the scheme quantizes, fused groups of which the oracle holds, by fused key: every
    2-D Linear whose input size is a multiple of the group, and whose fused partners all are."""
    group = GROUP[kind]
    candidates = {k[: -len(".weight")]: w for k, w in weights.items()
                  if LINEAR.fullmatch(k) and w.dim() == 2 and not k.endswith(".eh_proj.weight")}
    groups = {}
    for module, w in candidates.items():
        groups.setdefault(fused_key(module), []).append(module)
    return {key: sorted(members) for key, members in groups.items()
            if all(candidates[m].shape[1] % group == 0 for m in members)}


def compress(weight, kind, global_scale):
    """compressed-tensors' compressed tensors of one weight (observer: min/max per group, in its dtype)."""
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization.utils.helpers import calculate_qparams
    s = scheme(kind)
    grouped = weight.unflatten(-1, (weight.shape[1] // GROUP[kind], GROUP[kind]))
    scale, zero_point = calculate_qparams(grouped.amin(-1), grouped.amax(-1), s.weights, global_scale=global_scale)
    state = {"weight": weight, "weight_scale": scale.to(weight.dtype), "weight_zero_point": zero_point}
    if global_scale is not None:
        state["weight_global_scale"] = global_scale
    compressor = NVFP4PackedCompressor if kind == "nvfp4" else MXFP4PackedCompressor
    return compressor.compress(state, s)


def expected_tensors(weights, kind):
    """Every compressed tensor compressed-tensors writes for the oracle weights, by name."""
    from compressed_tensors.quantization.utils.helpers import generate_gparam
    out = {}
    for members in expected_modules(weights, kind).values():
        global_scale = None
        if kind == "nvfp4":
            ws = [weights[m + ".weight"] for m in members]
            low = torch.stack([w.amin() for w in ws]).amin().reshape(1)
            high = torch.stack([w.amax() for w in ws]).amax().reshape(1)
            global_scale = generate_gparam(low, high)
        for m in members:
            for name, tensor in compress(weights[m + ".weight"], kind, global_scale).items():
                out[f"{m}.{name}"] = tensor
    return out


def raw_bytes(tensor):
    return tensor.contiguous().view(torch.uint8).flatten()


def check_bit_exact(files, weights, kind):
    """vmerge's compressed tensors (files: name -> tensor) equal compressed-tensors' byte for byte,
    no other Linear holds compressed tensors, and the quantized weights are gone."""
    want = expected_tensors(weights, kind)
    suffixes = ("weight_packed", "weight_scale", "weight_global_scale")
    got = {n: t for n, t in files.items() if n.rsplit(".", 1)[-1] in suffixes}
    C.compare_key_sets(got, want, f"{kind} tensors against compressed-tensors'")
    for name, ref in want.items():
        t = got[name]
        if t.dtype != ref.dtype or t.shape != ref.shape:
            C.fail(f"{name}: {t.dtype} {tuple(t.shape)}, compressed-tensors writes {ref.dtype} {tuple(ref.shape)}")
        differ = (raw_bytes(t) != raw_bytes(ref)).sum().item()
        if differ:
            C.fail(f"{name}: {differ} of {raw_bytes(ref).numel()} bytes differ from compressed-tensors'")
    for name in want:
        if name.endswith(".weight_packed") and name[: -len("_packed")] in files:
            C.fail(f"{name[: -len('_packed')]} written beside its packed form")
    modules = sum(n.endswith(".weight_packed") for n in want)
    print(f"  compressed-tensors ({kind}): {len(want)} tensors of {modules} Linears bit-equal to its own "
          f"quantizer on the producer's weights", flush=True)
    return modules


def decompressed(files, module, kind):
    """compressed-tensors' decompressor on vmerge's tensors of one module: the dense weight (bf16)."""
    from compressed_tensors.compressors.mxfp4.base import MXFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    state = {k: files[f"{module}.{k}"] for k in ("weight_packed", "weight_scale", "weight_global_scale")
             if f"{module}.{k}" in files}
    compressor = NVFP4PackedCompressor if kind == "nvfp4" else MXFP4PackedCompressor
    return compressor.decompress(state, scheme(kind))["weight"]


def effective_scale(files, module, kind, shape):
    """The dequantization multiplier of every element: the group scale (over the global scale)."""
    scale = files[module + ".weight_scale"]
    if kind == "mxfp4":
        scale = torch.exp2(scale.to(torch.float32) - 127)
    else:
        scale = scale.to(torch.float32) / files[module + ".weight_global_scale"].to(torch.float32)
    return scale.repeat_interleave(shape[1] // scale.shape[1], 1)
