#!/usr/bin/python3
"""Independent checker for vmerge's LoRA outputs (no torch; safetensors read by check_hf_output).

    check_lora_output.py --out OUT --ref REF --mode extract
    check_lora_output.py --out OUT --ref REF --mode merge [--max-ulp N]

extract: OUT's model must equal REF's bit for bit (check_hf_output's rules), OUT/lora_adapter/
adapter_model.safetensors must hold exactly REF's adapter tensors bit for bit (PEFT names, no
".default"), and OUT/lora_adapter/adapter_config.json must agree with the expected fields in
REF/lora_adapter/adapter_config.json: peft_type, task_type, lora_alpha, use_rslora, use_dora,
fan_in_fan_out, bias, target_modules, modules_to_save, and each module's r (config r, or its
rank_pattern entry, must equal the tensors').
merge: OUT follows the safetensors rules, has no lora_adapter/ folder and the same tensors as REF;
every element equals REF's or lies within --max-ulp units in the last place of the output dtype
(the fp32 product's summation order differs from torch's matmul). Prints how many elements were
not identical, and the largest distance.
"""
import argparse
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_output as H  # noqa: E402

ADAPTER = os.path.join("lora_adapter", "adapter_model.safetensors")
CONFIG = os.path.join("lora_adapter", "adapter_config.json")


def ordered_bits(raw, dtype):
    """Element bit patterns mapped to integers that are ordered like the float values."""
    if dtype == "F32":
        vals = struct.unpack("<%dI" % (len(raw) // 4), raw)
        sign = 0x80000000
    elif dtype in ("BF16", "F16"):
        vals = struct.unpack("<%dH" % (len(raw) // 2), raw)
        sign = 0x8000
    else:
        return None
    return [(-(v & (sign - 1))) if v & sign else v for v in vals]


def check_merge(out_dir, ref_dir, max_ulp, probs):
    out = H.read_folder(out_dir, probs, False, "OUT")
    rprobs = H.Problems()
    ref = H.read_folder(ref_dir, rprobs, False, "REF")
    probs += ["REF invalid: " + p for p in rprobs]
    if os.path.exists(os.path.join(out_dir, "lora_adapter")):
        probs.add("a merged model must not carry a lora_adapter/ folder")
    for k in sorted(set(ref) ^ set(out)):
        probs.add("%s tensor %s" % ("missing" if k in ref else "unexpected", k))
    differing = total = worst = 0
    for k in sorted(set(out) & set(ref)):
        (dt, sh, b), (rdt, rsh, rb) = out[k], ref[k]
        if dt != rdt or sh != rsh:
            probs.add("%s: %s%s vs ref %s%s" % (k, dt, list(sh), rdt, list(rsh)))
            continue
        if re.search(r"lora_|base_layer|\.default", k):
            probs.add("%s: a PEFT name in a merged model" % k)
        if b == rb:
            total += len(b)
            continue
        a, r = ordered_bits(b, dt), ordered_bits(rb, dt)
        if a is None:
            probs.add("%s: bytes differ (%s)" % (k, H._first_diff(b, rb, dt)))
            continue
        dist = [abs(x - y) for x, y in zip(a, r)]
        total += len(b)
        differing += sum(1 for d in dist if d)
        worst = max(worst, max(dist))
        if max(dist) > max_ulp:
            i = max(range(len(dist)), key=dist.__getitem__)
            probs.add("%s: element %d is %d ulp from the reference (limit %d)" % (k, i, dist[i], max_ulp))
    return len(out), differing, worst


def module_rank(cfg, module):
    for key, r in (cfg.get("rank_pattern") or {}).items():
        if re.fullmatch(r"(.*\.)?(%s)" % key, module):
            return r
    return cfg.get("r")


def check_extract(out_dir, ref_dir, probs):
    p, n = H.check(out_dir, ref_dir)
    probs += p
    for path, what in ((os.path.join(out_dir, ADAPTER), "OUT"), (os.path.join(ref_dir, ADAPTER), "REF")):
        if not os.path.isfile(path):
            probs.add("%s: no %s" % (what, ADAPTER))
            return n
    out = H.read_safetensors(os.path.join(out_dir, ADAPTER), probs)
    ref = H.read_safetensors(os.path.join(ref_dir, ADAPTER), H.Problems())
    for k in out:
        if ".default" in k or not k.startswith("base_model.model."):
            probs.add("adapter key %s is not a PEFT export name" % k)
    H.compare(out, ref, probs)
    try:
        with open(os.path.join(out_dir, CONFIG)) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        probs.add("%s: %s" % (CONFIG, e))
        return n
    with open(os.path.join(ref_dir, CONFIG)) as f:
        want = json.load(f)
    for key in ("peft_type", "task_type", "lora_alpha", "use_rslora", "use_dora", "fan_in_fan_out", "bias",
                "target_modules", "modules_to_save"):
        got = cfg.get(key)
        if key == "target_modules" and isinstance(got, list):
            got = sorted(got)
        if got != want[key]:
            probs.add("adapter_config.json %s = %r, expected %r" % (key, got, want[key]))
    if not cfg.get("lora_alpha"):
        probs.add("adapter_config.json lora_alpha is %r: the adapter would do nothing" % cfg.get("lora_alpha"))
    for module, r in want["module_ranks"].items():
        if module_rank(cfg, module) != r:
            probs.add("adapter_config.json gives %s r = %r, its tensors have r = %d" % (module, module_rank(cfg, module), r))
    return n + len(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--mode", choices=("extract", "merge"), required=True)
    ap.add_argument("--max-ulp", type=int, default=1)
    a = ap.parse_args(argv)
    probs = H.Problems()
    if a.mode == "extract":
        n = check_extract(a.out, a.ref, probs)
        summary = "OK %d tensors (model and adapter bit for bit, adapter_config.json as expected)" % n
    else:
        n, differing, worst = check_merge(a.out, a.ref, a.max_ulp, probs)
        summary = "OK %d tensors; %d elements not bit-identical to the fp32 reference, largest distance %d ulp" % (
            n, differing, worst)
    if probs:
        for p in list(probs)[:10]:
            print("FAIL: " + p)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
