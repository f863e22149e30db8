"""The consumer checks of the ecosystem round trip: each loads a vmerge output with the real
library a user serves with and compares it with the generator's oracle."""
import json
import os
import re

import torch

import eco_common as E
import fp4_oracle
import fp8_ct_oracle


class CheckFailed(AssertionError):
    pass


def fail(message):
    raise CheckFailed(message)


def output_tensors(folder):
    """Every tensor of a merged folder, read with safetensors.safe_open from the files the index
    names (or model.safetensors); a tensor in two files, or a file the index does not name, fails."""
    from safetensors import safe_open
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    on_disk = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if on_disk != files:
        fail(f"{folder}: safetensors files {on_disk}, index names {files}")
    tensors = {}
    for name in files:
        with safe_open(os.path.join(folder, name), framework="pt", device="cpu") as f:
            for key in f.keys():
                if key in tensors:
                    fail(f"{key} in two files")
                if weight_map is not None and weight_map.get(key) != name:
                    fail(f"{key} is in {name}, the index says {weight_map.get(key)}")
                tensors[key] = f.get_tensor(key)
    if weight_map is not None and set(weight_map) != set(tensors):
        fail(f"index names tensors not in the files: {sorted(set(weight_map) - set(tensors))[:5]}")
    return tensors


def load_file(path):
    from safetensors.torch import load_file as load
    return load(path)


def compare_key_sets(got, want, what):
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        fail(f"{what}: missing {missing[:8]} ({len(missing)}), unexpected {extra[:8]} ({len(extra)})")


def check_tensors_exact(folder, oracle_file, dtype, what="the oracle", partial=False):
    """Every output tensor bit-equal to the oracle's (cast with torch's .to(dtype) where the
    output dtype differs from the stored one; dtype None: in the oracle's own dtype). partial:
    the oracle may lack some output tensors (a producer's own tool that omits some, e.g.
    zero_to_fp32 with ZeRO-1 frozen parameters); every tensor it has must still be in the output
    and equal."""
    got, want = output_tensors(folder), load_file(oracle_file)
    compare_key_sets({k: v for k, v in got.items() if k in want} if partial else got, want, folder)
    for key, ref in want.items():
        ref = ref.to(dtype) if dtype is not None and ref.is_floating_point() else ref
        out = got[key]
        if out.dtype != ref.dtype or out.shape != ref.shape:
            fail(f"{key}: {out.dtype} {tuple(out.shape)}, {what} {ref.dtype} {tuple(ref.shape)}")
        if not torch.equal(out.view(torch.uint8), ref.contiguous().view(torch.uint8)):
            diff = (out.float() - ref.float()).abs().max().item()
            fail(f"{key}: values differ from {what} (max |diff| {diff:g})")
    count = f"{len(want)} of {len(got)}" if partial else f"{len(got)}"
    print(f"  safetensors: {count} tensors bit-equal to {what}", flush=True)


def saved_names(oracle):
    """oracle/saved_names.json: each run-time name of the model -> the name its save_pretrained
    writes (a VL model's model.language_model.* -> model.*; the generator pairs them by value);
    {} for a case without one (the names are the same)."""
    path = os.path.join(oracle, "saved_names.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def adapted_weights(adapter_file, renames=None):
    """The names of the weights an adapter changes (PEFT's export names its lora_A per module,
    under the model's run-time names), as `renames` (saved_names) maps them where it does."""
    renames = renames or {}
    out = set()
    for key in load_file(adapter_file):
        for marker in (".lora_A.weight", ".lora_embedding_A"):
            if key.endswith(marker):
                name = key.removeprefix("base_model.model.").removesuffix(marker) + ".weight"
                out.add(renames.get(name, name))
    return out


def check_tensors_close(folder, oracle_file, dtype, adapted, rel=1e-2, what="PEFT's merge_and_unload"):
    """Folded weights: each adapted weight within the fold's tolerance of PEFT's own
    merge_and_unload (PEFT adds a bf16-rounded delta to the bf16 weight, rounding twice; the fold
    rounds once), every other tensor (modules_to_save heads included) bit-equal to it. `what`
    names the oracle in the messages."""
    got, want = output_tensors(folder), load_file(oracle_file)
    compare_key_sets(got, want, folder)
    worst, exact = 0.0, 0
    for key, ref in want.items():
        out = got[key]
        if out.dtype != dtype or out.shape != ref.shape:
            fail(f"{key}: {out.dtype} {tuple(out.shape)}, PEFT's fold {ref.dtype} {tuple(ref.shape)}")
        if key not in adapted:
            if not torch.equal(out, ref.to(dtype)):
                fail(f"{key}: not adapted, yet differs from {what} "
                     f"(max |diff| {(out.float() - ref.float()).abs().max().item():g})")
            exact += 1
            continue
        err = (out.float() - ref.float()).abs().max().item() / max(ref.float().abs().max().item(), 1e-6)
        worst = max(worst, err)
        if err > rel:
            fail(f"{key}: relative difference {err:g} from {what} (> {rel})")
    print(f"  fold: {len(got) - exact} adapted tensors within {worst:.2g} (relative) of {what}, "
          f"{exact} others bit-equal to it", flush=True)


def load_hf_model(folder, dtype, auto_class="causal_lm", unexpected_ok=None):
    """transformers' own loader (the case's Auto class: VL models load as image-text-to-text);
    any missing, unexpected or mismatched key fails, but for unexpected keys that wholly match
    the regex `unexpected_ok` (layers transformers does not build, e.g. DeepSeek-V3's MTP layer;
    the tensor check holds them to the oracle) and that must then be there."""
    loader = E.auto_model_class(auto_class)
    model, info = loader.from_pretrained(folder, dtype=dtype, output_loading_info=True)
    if unexpected_ok:
        skipped = {k for k in info.get("unexpected_keys", []) if re.fullmatch(unexpected_ok, k)}
        if not skipped:
            fail(f"from_pretrained({folder}): no key matches {unexpected_ok!r}, which the case expects unloaded")
        info["unexpected_keys"] = [k for k in info["unexpected_keys"] if k not in skipped]
        print(f"  transformers: {len(skipped)} keys left unloaded as expected ({unexpected_ok})", flush=True)
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            fail(f"from_pretrained({folder}): {kind} {list(info[kind])[:8]}")
    return model.eval()


@torch.no_grad()
def compare_logits(model, logits_file, exact, what):
    ref = load_file(logits_file)
    got = model(input_ids=ref["input_ids"]).logits.float()
    diff = (got - ref["logits"]).abs().max().item()
    scale = ref["logits"].abs().max().item()
    if exact and diff != 0:
        fail(f"{what}: logits differ from the live model's (max |diff| {diff:g})")
    if not exact and diff > 0.02 * scale:
        fail(f"{what}: logits differ from the live model's by {diff:g} (scale {scale:g})")
    print(f"  {what}: logits {'equal' if diff == 0 else f'within {diff:.3g} of'} the live model's",
          flush=True)


def check_hf_load(folder, dtype, logits_file, exact, auto_class="causal_lm", unexpected_ok=None):
    model = load_hf_model(folder, dtype, auto_class, unexpected_ok)
    if logits_file:
        compare_logits(model, logits_file, exact, "transformers")
    else:
        print("  transformers: loads with no missing or unexpected keys", flush=True)


# adapter_config.json fields that decide what PEFT builds and loads: the exported adapter must state
# them as PeftModel.save_pretrained states them for the live model.
ADAPTER_CONFIG_FIELDS = ("peft_type", "r", "lora_alpha", "use_rslora", "task_type", "bias", "fan_in_fan_out")


def check_adapter_config(adapter_dir, saved_dir):
    """vmerge's adapter_config.json against PEFT's own save_pretrained one: the fields PEFT builds
    the modules from, the modules_to_save set, and target_modules matching the same modules."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        got = json.load(f)
    with open(os.path.join(saved_dir, "adapter_config.json")) as f:
        want = json.load(f)
    for key in ADAPTER_CONFIG_FIELDS:
        if got.get(key) != want.get(key):
            fail(f"{adapter_dir}/adapter_config.json: {key} {got.get(key)!r}, PEFT saves {want.get(key)!r}")
    # PEFT's token-classification model appends its classifier names ("classifier", "score") to
    # the list it was given, so it saves duplicates and names absent from the model: as sets,
    # vmerge's list must be the ones that exist among them.
    got_saved, want_saved = set(got.get("modules_to_save") or []), set(want.get("modules_to_save") or [])
    if not got_saved <= want_saved or (want_saved and not got_saved):
        fail(f"{adapter_dir}/adapter_config.json: modules_to_save {sorted(got_saved)}, PEFT saves {sorted(want_saved)}")
    print(f"  adapter_config.json: {', '.join(ADAPTER_CONFIG_FIELDS)} and modules_to_save "
          f"{sorted(got_saved)} as PEFT's save_pretrained states them", flush=True)


def check_adapter(folder, oracle, dtype, auto_class="causal_lm", what=None):
    """The extracted adapter: its tensors equal PEFT's own export (save_pretrained's
    adapter_model.safetensors where the case has it: names and bits), its config states what
    PEFT's does, and PeftModel on the merged base gives the live PEFT model's logits. `what`
    names the adapter oracle in the messages (default: PEFT's export)."""
    from peft import PeftModel
    adapter_dir = os.path.join(folder, "lora_adapter")
    got = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    saved_dir = os.path.join(oracle, "peft_saved")
    has_saved = os.path.isdir(saved_dir)
    want = load_file(os.path.join(saved_dir, "adapter_model.safetensors") if has_saved
                     else os.path.join(oracle, "adapter.safetensors"))
    what = what or ("PEFT's save_pretrained" if has_saved else "PEFT's get_peft_model_state_dict")
    compare_key_sets(got, want, adapter_dir)
    for key, ref in want.items():
        if got[key].dtype != ref.dtype or not torch.equal(got[key], ref):
            fail(f"{adapter_dir}: {key} differs from {what}")
    print(f"  adapter_model.safetensors: {len(want)} tensors bit-equal to {what}", flush=True)
    if has_saved:
        check_adapter_config(adapter_dir, saved_dir)
    model = PeftModel.from_pretrained(load_hf_model(folder, dtype, auto_class), adapter_dir).eval()
    if has_saved:
        check_adapter_loaded(model, want, adapter_dir)
    compare_logits(model, os.path.join(oracle, "logits.safetensors"), True, "PeftModel")


def check_adapter_loaded(model, want, adapter_dir):
    """Every tensor of the adapter is in a module PEFT built from adapter_config.json: the loaded
    model's own adapter state dict has exactly PEFT's saved tensors (an adapter whose
    target_modules miss a module loads with a warning only, and text-only logits would not show
    a missed vision module)."""
    from peft import get_peft_model_state_dict
    loaded = get_peft_model_state_dict(model)
    compare_key_sets(loaded, want, f"PeftModel.from_pretrained(base, {adapter_dir})")
    for key, ref in want.items():
        if not torch.equal(loaded[key].float(), ref.float()):
            fail(f"PeftModel.from_pretrained(base, {adapter_dir}): {key} differs from the file")
    print(f"  PeftModel: all {len(want)} adapter tensors loaded into the modules PEFT built", flush=True)


# ---- quantized outputs (docs/quantization.md) and HDF5 archives (docs/hdf5.md) ----

BF16_U = 2.0 ** -8   # bf16 unit roundoff (7 stored mantissa bits, round to nearest)
E4M3_REL = 2.0 ** -4   # float8_e4m3fn normals: 3 mantissa bits, half a step is 2^-4 of the value
E4M3_SUB = 2.0 ** -10  # float8_e4m3fn subnormals: steps of 2^-9, half a step 2^-10 (times the scale)


def quantized_bound(kind, ref, scale):
    """The most |dequantized - oracle| may be per element, from the scheme alone (ref: the oracle
    weight in fp32; scale: the file's scale, expanded to the weight's shape, in fp32).
      int (symmetric, L = amax/scale = 7.5 for 4 bits, 127.5 for 8): round to nearest is half a
        step (scale/2); the scale stored in bf16 is off by up to BF16_U, so the row maximum may
        land up to L*BF16_U steps past the clamp; the dequantized product is rounded to bf16.
      fp8 (both): E4M3 rounding 2^-4 relative (normals) or 2^-10 * scale (subnormals), plus the
        bf16 roundings of the quotient (FP8_DYNAMIC), of the stored scale at the clamp and of the
        dequantized value: 3 * BF16_U relative."""
    if kind in ("int4", "int8"):
        levels = 7.5 if kind == "int4" else 127.5
        return scale * (0.5 + levels * BF16_U + BF16_U) + BF16_U * ref.abs()
    if kind in ("nvfp4", "mxfp4"):
        # E2M1's widest step is 4 -> 6: half of it is 1 (scale: the group's effective multiplier);
        # a value beyond 6 steps is clamped there (the group's largest lands up to 6.375 steps
        # with a normal E4M3 scale rounded down, 7 with MXFP4's power of two, further with a
        # subnormal E4M3 scale): |w| - 6·scale; plus the bf16 rounding of the dequantized product.
        return scale * 1.0 + (ref.abs() - 6.0 * scale).clamp_min(0.0) + BF16_U * ref.abs()
    return ref.abs() * (E4M3_REL + 3 * BF16_U) + scale * E4M3_SUB


def expand_scale(kind, scale, shape, files=None, module=None):
    """A file's scale tensor as one value per weight element."""
    rows, cols = shape
    if kind in ("nvfp4", "mxfp4"):
        return fp4_oracle.effective_scale(files, module, kind, shape)
    scale = scale.float()
    if kind in ("fp8_block", "fp8_block_ct"):   # [ceil(N/128), ceil(K/128)]
        return scale.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return scale.repeat_interleave(cols // scale.shape[1], 1)   # [N, groups] or [N, 1]


def check_bit_exact_to_compressed_tensors(files, oracle, kind):
    """The compressed-tensors schemes vmerge writes bit for bit as its own quantizer does."""
    if kind in fp8_ct_oracle.PRESETS:
        return fp8_ct_oracle.check_bit_exact(files, oracle, kind)
    return fp4_oracle.check_bit_exact(files, oracle, kind)


def check_quantized_load(folder, kind, oracle_dir, logits_tol, requantized=True):
    """A quantized folder loaded by transformers itself: compressed-tensors (int, FP8_DYNAMIC, FP8_BLOCK, NVFP4, MXFP4)
    decompressed with run_compressed=False, block FP8 by plain from_pretrained (dequantized on
    load without an FP8 GPU). Every quantized Linear within quantized_bound of the oracle, every
    other tensor equal to it, logits within logits_tol (relative to their scale) of the live model's
    (not checked when logits_tol is None). The compressed-tensors schemes' codes and scales must also
    equal its own quantizer's on the oracle weights, where vmerge quantized them (`requantized`:
    not a source passed through in its own scheme, whose codes are the producer's)."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    with open(os.path.join(folder, "config.json")) as f:
        qcfg = json.load(f)["quantization_config"]
    kwargs = {}
    if kind != "fp8_block":
        # dequantize=True: what run_compressed=False was called before transformers 5.x deprecated it
        kwargs["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            fail(f"from_pretrained({folder}): {key} {list(info[key])[:8]}")
    model.eval()
    files = output_tensors(folder)
    scale_suffix = {"fp8_block": ".weight_scale_inv"}.get(kind, ".weight_scale")
    quantized = sorted(n[: -len(scale_suffix)] for n in files if n.endswith(scale_suffix))
    ignored = set(qcfg.get("ignore") or qcfg.get("modules_to_not_convert") or [])
    if ignored & set(quantized):
        fail(f"{folder}: modules both quantized and listed as unquantized: {sorted(ignored & set(quantized))}")
    state = {k: v for k, v in model.state_dict().items()}
    oracle = load_file(os.path.join(oracle_dir, "weights.safetensors"))
    if kind in ("nvfp4", "mxfp4", "fp8_block_ct", "fp8_dynamic"):
        # Codes and scales bit-equal to compressed-tensors' own quantizer on the producer's weights,
        # and what transformers loaded equal to its decompressor on vmerge's tensors.
        if requantized:
            check_bit_exact_to_compressed_tensors(files, oracle, kind)
        for module in quantized:
            got = state[module + ".weight"]
            want = (fp8_ct_oracle.decompressed(files, module, kind) if kind in fp8_ct_oracle.PRESETS
                    else fp4_oracle.decompressed(files, module, kind))
            if got.dtype != want.dtype or not torch.equal(got, want):
                fail(f"{module}.weight: transformers' load differs from compressed-tensors' decompression")
    compare_key_sets({k: v for k, v in state.items() if k in oracle or not k.endswith(
        ("_scale", "_scale_inv", "_packed", "_shape", "_zero_point"))}, oracle, f"{folder} (loaded)")
    worst, exact = 0.0, 0
    for key, ref in oracle.items():
        got = state[key]
        module = key[: -len(".weight")] if key.endswith(".weight") else None
        if module in quantized:
            if not got.is_floating_point() or got.element_size() < 2 or got.shape != ref.shape:
                fail(f"{key}: loaded as {got.dtype} {tuple(got.shape)}, not dequantized to the oracle's shape")
            r = ref.float()
            bound = quantized_bound(kind, r, expand_scale(kind, files[module + scale_suffix], ref.shape, files, module))
            err = (got.float() - r).abs()
            over = (err > bound).sum().item()
            if over:
                i = int((err - bound).argmax())
                fail(f"{key}: {over} elements outside the {kind} bound, worst |diff| {err.flatten()[i]:g} "
                     f"> bound {bound.flatten()[i]:g} (oracle {r.flatten()[i]:g})")
            worst = max(worst, (err / bound.clamp_min(1e-30)).max().item())
        else:
            if module is not None and module.rsplit(".", 1)[-1].endswith("_proj") and module not in ignored:
                fail(f"{module}: unquantized but not in the config's ignore list")
            if got.dtype != ref.dtype or not torch.equal(got, ref):
                fail(f"{key}: unquantized tensor differs from the oracle ({got.dtype}, {ref.dtype})")
            exact += 1
    print(f"  transformers ({kind}): loads; {len(quantized)} quantized Linears within "
          f"{worst:.2f} of the {kind} error bound, {exact} other tensors equal the oracle", flush=True)
    if logits_tol is None:
        return len(quantized)
    ref = load_file(os.path.join(oracle_dir, "logits.safetensors"))
    with torch.no_grad():
        got = model(input_ids=ref["input_ids"]).logits.float()
    diff = (got - ref["logits"]).abs().max().item()
    scale = ref["logits"].abs().max().item()
    if diff > logits_tol * scale:
        fail(f"{kind}: logits differ from the bf16 model's by {diff:g} (> {logits_tol} x scale {scale:g})")
    print(f"  transformers ({kind}): logits within {diff:.3g} of the bf16 model's "
          f"({diff / scale:.2%} of their scale {scale:.3g}; tolerance {logits_tol:.0%})", flush=True)
    return len(quantized)


def check_hdf5_archive(folder, oracle_file, dtype):
    """model.h5 read with h5py (hdf5plugin registers the zstd filter 32015): every tensor the
    root's tensor_names lists, its stored bytes read with the file type as memory type, bit-equal
    to the oracle (after .to(dtype)); BF16 also read as h5py converts it (float32, exact); the
    archive's hf_files/ equal the files beside it."""
    import h5py
    import hdf5plugin  # noqa: F401  (registers the zstd filter)
    import numpy as np
    want = load_file(oracle_file)
    path = os.path.join(folder, "model.h5")
    with h5py.File(path, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs["tensor_names"]]
        compression = f.attrs["compression"]
        compression = compression.decode() if isinstance(compression, bytes) else str(compression)
        compare_key_sets(dict.fromkeys(names), want, path)
        total = 0
        for name in names:
            ds = f[name.replace(".", "/")]
            ref = want[name]
            ref = ref.to(dtype) if ref.is_floating_point() else ref
            hf_name = ds.attrs["hf_name"]
            hf_name = hf_name.decode() if isinstance(hf_name, bytes) else str(hf_name)
            if hf_name != name or tuple(ds.shape) != tuple(ref.shape):
                fail(f"{path}: {name}: hf_name {hf_name}, shape {ds.shape}, oracle {tuple(ref.shape)}")
            raw = np.empty(ds.shape, f"u{ds.id.get_type().get_size()}")
            ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ds.id.get_type())
            if raw.tobytes() != ref.contiguous().view(torch.uint8).numpy().tobytes():
                fail(f"{path}: {name}: stored bytes differ from the oracle")
            if ref.dtype == torch.bfloat16 and not torch.equal(torch.from_numpy(ds[()]), ref.float()):
                fail(f"{path}: {name}: h5py's float32 reading differs from the oracle")
            total += ref.numel() * ref.element_size()
        if int(f.attrs["total_size"]) != total:
            fail(f"{path}: total_size {f.attrs['total_size']}, tensors hold {total} bytes")
        for fname, ds in f["hf_files"].items():
            if not isinstance(ds, h5py.Dataset):
                continue
            beside = os.path.join(folder, fname)
            if os.path.exists(beside) and open(beside, "rb").read() != ds[()].tobytes():
                fail(f"{path}: hf_files/{fname} differs from {beside}")
    print(f"  h5py ({compression}): {len(names)} tensors bit-equal to the oracle", flush=True)
