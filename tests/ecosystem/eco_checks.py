"""The consumer checks of the ecosystem round trip: each loads a vmerge output with the real
library a user serves with and compares it with the generator's oracle."""
import json
import os

import torch


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
    output dtype differs from the stored one). partial: the oracle may lack some output tensors
    (a producer's own tool that omits some, e.g. zero_to_fp32 with ZeRO-1 frozen parameters);
    every tensor it has must still be in the output and equal."""
    got, want = output_tensors(folder), load_file(oracle_file)
    compare_key_sets({k: v for k, v in got.items() if k in want} if partial else got, want, folder)
    for key, ref in want.items():
        ref = ref.to(dtype) if ref.is_floating_point() else ref
        out = got[key]
        if out.dtype != ref.dtype or out.shape != ref.shape:
            fail(f"{key}: {out.dtype} {tuple(out.shape)}, {what} {ref.dtype} {tuple(ref.shape)}")
        if not torch.equal(out.view(torch.uint8), ref.contiguous().view(torch.uint8)):
            diff = (out.float() - ref.float()).abs().max().item()
            fail(f"{key}: values differ from {what} (max |diff| {diff:g})")
    count = f"{len(want)} of {len(got)}" if partial else f"{len(got)}"
    print(f"  safetensors: {count} tensors bit-equal to {what}", flush=True)


def check_tensors_close(folder, oracle_file, dtype, rel=1e-2):
    """Folded weights: each within the fold's tolerance of PEFT's own merge_and_unload."""
    got, want = output_tensors(folder), load_file(oracle_file)
    compare_key_sets(got, want, folder)
    worst = 0.0
    for key, ref in want.items():
        out = got[key]
        if out.dtype != dtype or out.shape != ref.shape:
            fail(f"{key}: {out.dtype} {tuple(out.shape)}, PEFT's fold {ref.dtype} {tuple(ref.shape)}")
        err = (out.float() - ref.float()).abs().max().item() / max(ref.float().abs().max().item(), 1e-6)
        worst = max(worst, err)
        if err > rel:
            fail(f"{key}: relative difference {err:g} from PEFT's merge_and_unload (> {rel})")
    print(f"  fold: {len(got)} tensors within {worst:.2g} (relative) of PEFT's merge_and_unload",
          flush=True)


def load_causal_lm(folder, dtype):
    """transformers' own loader; any missing, unexpected or mismatched key fails."""
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, output_loading_info=True)
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


def check_hf_load(folder, dtype, logits_file, exact):
    model = load_causal_lm(folder, dtype)
    if logits_file:
        compare_logits(model, logits_file, exact, "transformers")
    else:
        print("  transformers: loads with no missing or unexpected keys", flush=True)


def check_adapter(folder, oracle, dtype):
    """The extracted adapter: its tensors equal PEFT's own export, and PeftModel on the merged
    base gives the live PEFT model's logits."""
    from peft import PeftModel
    adapter_dir = os.path.join(folder, "lora_adapter")
    got = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    want = load_file(os.path.join(oracle, "adapter.safetensors"))
    compare_key_sets(got, want, adapter_dir)
    for key, ref in want.items():
        if not torch.equal(got[key], ref):
            fail(f"{adapter_dir}: {key} differs from PEFT's export")
    model = PeftModel.from_pretrained(load_causal_lm(folder, dtype), adapter_dir).eval()
    compare_logits(model, os.path.join(oracle, "logits.safetensors"), True, "PeftModel")
