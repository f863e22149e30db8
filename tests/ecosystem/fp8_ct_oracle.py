"""The FP8_BLOCK and FP8_DYNAMIC oracle of the ecosystem round trip: the producer's bf16 weights
(oracle/weights.safetensors, saved from the live model) quantized and compressed by
compressed-tensors' own CPU functions for its presets (docs/reference/lowbit-formats.md §4,
fp8-formats.md §3): FP8_BLOCK pads each weight with zeros to whole 128x128 blocks
(maybe_pad_tensor_for_block_quant) and observes min/max per block, FP8_DYNAMIC per row, both in
the weight dtype; then calculate_qparams, the scale held in the weight dtype (the parameter
compressed-tensors registers for it) with the zero point it registers too, and the
float-quantized compressor (which pads, quantizes and truncates again). vmerge's weight /
weight_scale must equal these byte for byte, and compressed-tensors' decompressor must read
vmerge's tensors back."""
import torch

import eco_checks as C
import fp4_oracle

BLOCK = 128
PRESETS = {"fp8_block_ct": "FP8_BLOCK", "fp8_dynamic": "FP8_DYNAMIC"}


def scheme(kind="fp8_block_ct"):
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization import quant_scheme
    return QuantizationScheme(targets=["Linear"], **getattr(quant_scheme, PRESETS[kind]))


def expected_modules(weights, kind):
    """The modules the preset quantizes: every 2-D Linear (FP8_BLOCK: whose input size is a multiple
    of 128, as vLLM's block kernels take whole column blocks, and whose fused partners' all are)."""
    candidates = {k[: -len(".weight")]: w for k, w in weights.items()
                  if fp4_oracle.LINEAR.fullmatch(k) and w.dim() == 2 and not k.endswith(".eh_proj.weight")}
    if kind == "fp8_dynamic":
        return sorted(candidates)
    groups = {}
    for module, w in candidates.items():
        groups.setdefault(fp4_oracle.fused_key(module), []).append(module)
    return sorted(m for members in groups.values() if all(candidates[m].shape[1] % BLOCK == 0 for m in members)
                  for m in members)


def compress(weight, kind="fp8_block_ct"):
    """compressed-tensors' compressed tensors of one weight (observer: min/max per block or row, in its dtype)."""
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant
    from compressed_tensors.quantization.utils.helpers import calculate_qparams
    s = scheme(kind)
    if kind == "fp8_dynamic":
        low, high = weight.amin(dim=1, keepdim=True), weight.amax(dim=1, keepdim=True)
    else:
        padded = maybe_pad_tensor_for_block_quant(weight, (BLOCK, BLOCK))
        blocks = padded.reshape(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK)
        low, high = blocks.amin(dim=(1, 3)), blocks.amax(dim=(1, 3))
    scale, zero_point = calculate_qparams(low, high, s.weights)
    state = {"weight": weight, "weight_scale": scale.to(weight.dtype), "weight_zero_point": zero_point}
    return FloatQuantizationCompressor.compress(state, s)


def check_bit_exact(files, weights, kind):
    """vmerge's FP8 tensors (files: name -> tensor) equal compressed-tensors' byte for byte, and no
    other Linear holds FP8 codes or a scale."""
    want = {}
    for m in expected_modules(weights, kind):
        for name, tensor in compress(weights[m + ".weight"], kind).items():
            want[f"{m}.{name}"] = tensor
    got = {n: t for n, t in files.items()
           if n.endswith(".weight_scale") or (n.endswith(".weight") and t.dtype == torch.float8_e4m3fn)}
    C.compare_key_sets(got, want, f"{PRESETS[kind]} tensors against compressed-tensors'")
    for name, ref in want.items():
        t = got[name]
        if t.dtype != ref.dtype or t.shape != ref.shape:
            C.fail(f"{name}: {t.dtype} {tuple(t.shape)}, compressed-tensors writes {ref.dtype} {tuple(ref.shape)}")
        differ = (fp4_oracle.raw_bytes(t) != fp4_oracle.raw_bytes(ref)).sum().item()
        if differ:
            C.fail(f"{name}: {differ} of {fp4_oracle.raw_bytes(ref).numel()} bytes differ from compressed-tensors'")
    modules = sum(n.endswith(".weight_scale") for n in want)
    print(f"  compressed-tensors ({PRESETS[kind]}): {len(want)} tensors of {modules} Linears bit-equal to its own "
          f"quantizer on the producer's weights", flush=True)
    return modules


def decompressed(files, module, kind):
    """compressed-tensors' decompressor on vmerge's tensors of one module: the dense weight."""
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    state = {k: files[f"{module}.{k}"] for k in ("weight", "weight_scale")}
    return FloatQuantizationCompressor.decompress(state, scheme(kind))["weight"]
