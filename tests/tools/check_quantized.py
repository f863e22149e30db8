#!/usr/bin/python3
"""Independent checker for vmerge's compressed-tensors `pack-quantized` output (numpy only).

    check_quantized.py --out QDIR --ref REFDIR --bits 4|8 --group G [--asymmetric]
    check_quantized.py --selftest

Written from docs/reference/output-formats.md §3 only (not from vmerge's code). REFDIR is the
unquantized merge of the same checkpoint, QDIR the quantized one; G = 0 means per channel.

Rules checked
  * Both folders obey the safetensors file/layout rules (check_hf_output.read_folder: header
    length, padding, contiguous offsets, shards + index, __metadata__).
  * Targets: every 2-D float `*.weight` whose name starts with `model.layers.` and ends in
    `_proj.weight`, `.w1.weight`, `.w2.weight` or `.w3.weight`, except (G > 0) those whose input
    dim is not divisible by G. Every other reference tensor must be in QDIR unchanged (dtype,
    shape, bytes). Nothing else may be in QDIR.
  * Per target `<p>.weight` [out, in] (b bits, k = 32 / b values per word):
      <p>.weight            absent
      <p>.weight_packed     I32 [out, ceil(in / k)]
      <p>.weight_scale      reference dtype (BF16/F16/F32; anything else F16) [out, in/G] or [out, 1]
      <p>.weight_shape      I64 [2] == [out, in]
      <p>.weight_zero_point I32 [ceil(out / k), in/G or 1]  iff --asymmetric
  * Packing: u = q + 2^(b-1); element j of a row sits in word j // k at bits [b*(j%k), b*(j%k)+b);
    the bits of the last word past the row end are zero. Zero points: the same along dim 0.
  * RTN, recomputed here from the reference values x (as fp32), per group of G columns (G = in
    for channel), qmin = -2^(b-1), qmax = 2^(b-1) - 1, all arithmetic in numpy float32:
      mn = min(min(x), 0), mx = max(max(x), 0)
      symmetric:  s32 = max(|mn|, |mx|) / ((qmax - qmin) / 2)      (amax/7.5, amax/127.5)
      asymmetric: s32 = (mx - mn) / (qmax - qmin)
                  zp  = rint(clamp(qmin - mn / s32, qmin, qmax))   (uses the fp32 s32, §3.5 step 5)
      s = s32 cast to the stored dtype with round-to-nearest-even; a zero s (s32 == 0, or an
          underflow of the cast) becomes the stored dtype's eps: BF16 2^-7, F16 2^-10, F32 2^-23
      q = clamp(rint(x / s + zp), qmin, qmax)    (float32, rint = round half to even)
    The stored scale bytes and the unpacked q and zp must equal these exactly. The one exception:
    an asymmetric group that is entirely zero (s32 == 0, where qmin - 0/0 is undefined) may carry
    any zero point, and then each q must equal that zero point (dequant 0).
  * |(q - zp) * s - x| <= s/2 + s * 2^b * 2^-20 for every element, plus s * 2^b * u(dtype) for
    elements at qmin/qmax (a rounded-down stored scale may push the group's extreme past the
    clamp; u = 2^-8 BF16, 2^-11 F16, 2^-24 F32).
  * config.json == REF's config.json (JSON types compared strictly) plus exactly one key,
    `quantization_config` = {quant_method "compressed-tensors", format "pack-quantized",
    quantization_status "compressed", config_groups {"group_0": {targets ["Linear"], weights
    {num_bits, type "int", symmetric, group_size (G or null), strategy ("group"/"channel"),
    dynamic false, actorder null, observer "minmax", observer_kwargs {}, block_structure null},
    input_activations null, output_activations null}}, ignore, kv_cache_scheme null}; optional
    extra top-level keys only as compressed-tensors writes them: global_compression_ratio
    (null/number), sparsity_config ({}/null), transform_config ({}/null), version (string).
    `ignore` holds unique strings: "lm_head" plus the module name of every 2-D `*.weight` but the
    embedding left unquantized (router gates, shared_expert_gate, non-divisible Linears, score),
    no other literal names; "re:" entries are tolerated only if they match no quantized module.
  * Every other non-weight file of REF is byte-identical in QDIR.
Prints per tensor kind mean/max |dequant - x|, then "OK n quantized, m unchanged" (exit 0), or the
first 10 problems (exit 1).
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_output as hf  # noqa: E402

MAX_REPORT = 10
EPS = {"BF16": 2.0 ** -7, "F16": 2.0 ** -10, "F32": 2.0 ** -23}
UNIT = {"BF16": 2.0 ** -8, "F16": 2.0 ** -11, "F32": 2.0 ** -24}  # unit roundoff of the cast
TARGET_RE = re.compile(r"model\.layers\..*(_proj|\.w1|\.w2|\.w3)\.weight")
WEIGHTS_KEYS = ["num_bits", "type", "symmetric", "group_size", "strategy", "dynamic", "actorder",
                "observer", "observer_kwargs", "block_structure"]
OPTIONAL_TOP = {"global_compression_ratio", "sparsity_config", "transform_config", "version"}


# ------------------------------------------------------------------------------------------------
# numeric helpers
# ------------------------------------------------------------------------------------------------


def to_f32(dt, shape, b):
    """Reference tensor bytes -> float32 array (exact for BF16/F16/F32)."""
    if dt == "BF16":
        u = np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16
        a = u.view(np.float32)
    elif dt == "F16":
        a = np.frombuffer(b, dtype="<f2").astype(np.float32)
    elif dt == "F32":
        a = np.frombuffer(b, dtype="<f4").astype(np.float32)
    elif dt == "F64":
        a = np.frombuffer(b, dtype="<f8").astype(np.float32)
    else:
        raise ValueError("not a float dtype: %s" % dt)
    return a.reshape(shape)


def bf16_bits(a32):
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(a32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(a32)
    r = np.where(nan, (u >> 16) | 0x40, r)
    return r.astype(np.uint16)


def cast_stored(a32, dt):
    """float32 -> (stored values as float32, little-endian bytes) for dtype dt."""
    if dt == "BF16":
        bits = bf16_bits(a32)
        return (bits.astype(np.uint32) << 16).view(np.float32), bits.astype("<u2").tobytes()
    if dt == "F16":
        h = a32.astype(np.float16)  # numpy rounds to nearest even
        return h.astype(np.float32), h.astype("<f2").tobytes()
    f = a32.astype(np.float32)
    return f, f.astype("<f4").tobytes()


def scale_dtype_for(ref_dt):
    return ref_dt if ref_dt in EPS else "F16"


def rtn(x, group, bits, asym, sdt):
    """Reference RTN. x float32 [out, in]. Returns dict with s (stored, as f32) [out, ng],
    s_bytes, zp (int64 [out, ng], zeros when symmetric), zero_grp (bool [out, ng]: s32 == 0),
    q (int64 [out, in])."""
    out, inn = x.shape
    g = inn if group == 0 else group
    ng = inn // g
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    xg = x.reshape(out, ng, g)
    with np.errstate(all="ignore"):
        mn = np.minimum(xg.min(axis=2), np.float32(0))
        mx = np.maximum(xg.max(axis=2), np.float32(0))
        if asym:
            s32 = (mx - mn) / np.float32(qmax - qmin)
            z = np.float32(qmin) - mn / s32
            z = np.clip(z, np.float32(qmin), np.float32(qmax))
            zp = np.where(s32 == 0, qmin, np.rint(z)).astype(np.int64)
        else:
            s32 = np.maximum(np.abs(mn), np.abs(mx)) / np.float32((qmax - qmin) / 2)
            zp = np.zeros((out, ng), dtype=np.int64)
        s32 = s32.astype(np.float32)
        s, _ = cast_stored(s32, sdt)
        s = np.where(s == 0, np.float32(EPS[sdt]), s).astype(np.float32)
        s, s_bytes = cast_stored(s, sdt)  # eps is exact in every dtype; re-derive the bytes
        q = quantize(xg, s, zp, bits).reshape(out, inn)
    return {"s": s, "s_bytes": s_bytes, "zp": zp, "zero_grp": s32 == 0, "q": q}


def quantize(xg, s, zp, bits):
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    with np.errstate(all="ignore"):
        t = xg / s[:, :, None]
        t = t + zp.astype(np.float32)[:, :, None]
        return np.clip(np.rint(t), qmin, qmax).astype(np.int64)


def unpack_rows(words_i32, bits, n):
    """int32 [rows, W] -> (signed values int64 [rows, n], bool [rows]: padding bits non-zero)."""
    per = 32 // bits
    w = words_i32.astype(np.int64) & 0xFFFFFFFF
    shifts = np.arange(per, dtype=np.int64) * bits
    u = (w[:, :, None] >> shifts) & ((1 << bits) - 1)
    u = u.reshape(w.shape[0], -1)
    pad_bad = (u[:, n:] != 0).any(axis=1)
    return u[:, :n] - (1 << (bits - 1)), pad_bad


# ------------------------------------------------------------------------------------------------
# config
# ------------------------------------------------------------------------------------------------


def jtype(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


def jdiff(a, b, path, probs):
    """Strict JSON comparison (int != float != bool); a = got, b = want."""
    ta, tb = jtype(a), jtype(b)
    if ta != tb:
        probs.add("config.json %s: %s%s, want %s%s" % (
            path, json.dumps(a), "" if ta == "null" else " (%s)" % ta, json.dumps(b),
            "" if tb == "null" else " (%s)" % tb))
        return
    if ta == "object":
        for k in b:
            if k not in a:
                probs.add("config.json %s: key %r missing" % (path, k))
        for k in a:
            if k not in b:
                probs.add("config.json %s: unexpected key %r = %s" % (path, k, json.dumps(a[k])))
            else:
                jdiff(a[k], b[k], "%s.%s" % (path, k), probs)
    elif ta == "list":
        if len(a) != len(b):
            probs.add("config.json %s: %s, want %s" % (path, json.dumps(a), json.dumps(b)))
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                jdiff(x, y, "%s[%d]" % (path, i), probs)
    elif a != b or (ta == "float" and math.copysign(1, a) != math.copysign(1, b)):
        probs.add("config.json %s: %s, want %s" % (path, json.dumps(a), json.dumps(b)))


def expected_qconfig(bits, group, asym):
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": bits, "type": "int", "symmetric": not asym,
                        "group_size": group if group else None,
                        "strategy": "group" if group else "channel",
                        "dynamic": False, "actorder": None, "observer": "minmax",
                        "observer_kwargs": {}, "block_structure": None},
            "input_activations": None, "output_activations": None}},
        "ignore": None,  # checked separately
        "kv_cache_scheme": None,
    }


def _re_hits(entry, module):
    try:
        return re.match(entry[3:], module) is not None
    except re.error:
        return False


def check_config(qdir, refdir, bits, group, asym, required_ignore, quantized_modules, probs):
    cfgs = []
    for d in (qdir, refdir):
        try:
            with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
                cfgs.append(json.load(f, object_pairs_hook=hf._no_dupes))
        except (OSError, ValueError) as e:
            probs.add("%s/config.json unreadable: %s" % (d, e))
            return
    got, ref = cfgs
    if not isinstance(got, dict) or not isinstance(ref, dict):
        probs.add("config.json is not a JSON object")
        return
    if "quantization_config" in ref:
        probs.add("REF config.json already has quantization_config")
    if "quantization_config" not in got:
        probs.add("config.json: quantization_config missing")
    rest = {k: v for k, v in got.items() if k != "quantization_config"}
    jdiff(rest, {k: v for k, v in ref.items() if k != "quantization_config"}, "$", probs)
    qc = got.get("quantization_config")
    if qc is None:
        return
    if not isinstance(qc, dict):
        probs.add("config.json quantization_config is %s, not an object" % jtype(qc))
        return
    want = expected_qconfig(bits, group, asym)
    base = {k: v for k, v in qc.items() if k not in OPTIONAL_TOP or k in want}
    jdiff({k: (None if k == "ignore" else v) for k, v in base.items()}, want,
          "$.quantization_config", probs)
    for k in sorted(set(qc) - set(want)):
        v = qc[k]
        ok = (k == "global_compression_ratio" and (v is None or jtype(v) in ("int", "float"))) or \
             (k in ("sparsity_config", "transform_config") and v in ({}, None)) or \
             (k == "version" and isinstance(v, str))
        if not ok and k in OPTIONAL_TOP:
            probs.add("config.json $.quantization_config.%s: unexpected value %s" % (k, json.dumps(v)))
    ign = qc.get("ignore")
    if not isinstance(ign, list) or not all(isinstance(e, str) for e in ign):
        probs.add("config.json quantization_config.ignore is not a list of strings: %s"
                  % json.dumps(ign))
        return
    dup = sorted({e for e in ign if ign.count(e) > 1})
    if dup:
        probs.add("config.json ignore has duplicates: %s" % dup)
    literal = {e for e in ign if not e.startswith("re:")}
    for m in sorted(required_ignore - literal):
        probs.add("config.json ignore lacks %r" % m)
    for m in sorted(literal - required_ignore):
        probs.add("config.json ignore names %r, which is not an unquantized Linear%s"
                  % (m, " (it is quantized)" if m in quantized_modules else ""))
    for e in ign:
        if e.startswith("re:"):
            hit = sorted(m for m in quantized_modules if _re_hits(e, m))
            if hit:
                probs.add("config.json ignore %r matches quantized module(s) %s" % (e, hit[:3]))


# ------------------------------------------------------------------------------------------------
# main check
# ------------------------------------------------------------------------------------------------


def is_target(name, dt, shape):
    return len(shape) == 2 and dt in ("BF16", "F16", "F32", "F64") and \
        TARGET_RE.fullmatch(name) is not None


def kind_of(module):
    return module.rsplit(".", 1)[-1]


def check_one(name, ref_entry, out, bits, group, asym, probs, stats):
    p = name[:-len(".weight")]
    rdt, (o, i), rb = ref_entry
    per = 32 // bits
    g = i if group == 0 else group
    ng = i // g
    sdt = scale_dtype_for(rdt)
    want = {p + ".weight_packed": ("I32", (o, -(-i // per))),
            p + ".weight_scale": (sdt, (o, ng)),
            p + ".weight_shape": ("I64", (2,))}
    if asym:
        want[p + ".weight_zero_point"] = ("I32", (-(-o // per), ng))
    bad = False
    for k, (dt, sh) in want.items():
        if k not in out:
            probs.add("%s: missing" % k)
            bad = True
        elif out[k][0] != dt or out[k][1] != sh:
            probs.add("%s: %s%s, want %s%s" % (k, out[k][0], list(out[k][1]), dt, list(sh)))
            bad = True
    if bad:
        return
    shp = np.frombuffer(out[p + ".weight_shape"][2], dtype="<i8").tolist()
    if shp != [o, i]:
        probs.add("%s.weight_shape holds %s, want %s" % (p, shp, [o, i]))
    x = to_f32(rdt, (o, i), rb)
    if not np.isfinite(x).all():
        probs.add("%s: reference holds non-finite values; RTN is undefined" % name)
        return
    r = rtn(x, group, bits, asym, sdt)
    if out[p + ".weight_scale"][2] != r["s_bytes"]:
        got_s = to_f32(sdt, (o, ng), out[p + ".weight_scale"][2])
        idx = np.argwhere(got_s.view(np.uint32) != r["s"].view(np.uint32))
        rr, cc = idx[0] if len(idx) else (0, 0)
        probs.add("%s.weight_scale: %d of %d differ, first [%d,%d] = %r, want %r"
                  % (p, len(idx), o * ng, rr, cc, float(got_s[rr, cc]), float(r["s"][rr, cc])))
    s = r["s"]
    q, pad_bad = unpack_rows(np.frombuffer(out[p + ".weight_packed"][2], dtype="<i4")
                             .reshape(o, -1), bits, i)
    if pad_bad.any():
        probs.add("%s.weight_packed: padding bits non-zero in %d row(s), first row %d"
                  % (p, int(pad_bad.sum()), int(np.argmax(pad_bad))))
    zp = r["zp"]
    if asym:
        zt, zpad = unpack_rows(np.frombuffer(out[p + ".weight_zero_point"][2], dtype="<i4")
                               .reshape(-1, ng).T.copy(), bits, o)
        zgot = zt.T
        if zpad.any():
            probs.add("%s.weight_zero_point: padding bits non-zero in column %d"
                      % (p, int(np.argmax(zpad))))
        zg = r["zero_grp"]
        zp = np.where(zg, zgot, zp)  # all-zero group: any zero point, q must equal it
        if zg.any():
            r["q"] = np.where(np.repeat(zg, i // ng, axis=1),
                              np.repeat(zp, i // ng, axis=1), r["q"])
        diff = np.argwhere(zgot != zp)
        if len(diff):
            rr, cc = diff[0]
            probs.add("%s.weight_zero_point: %d of %d differ, first [%d,%d] = %d, want %d"
                      % (p, len(diff), o * ng, rr, cc, zgot[rr, cc], zp[rr, cc]))
    diff = np.argwhere(q != r["q"])
    if len(diff):
        rr, cc = diff[0]
        probs.add("%s.weight_packed: %d of %d values differ, first [%d,%d] = %d, want %d (x=%r)"
                  % (p, len(diff), o * i, rr, cc, q[rr, cc], r["q"][rr, cc], float(x[rr, cc])))
    # error bound, on the stored values, in float64 (exact products)
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    s_el = np.repeat(s.astype(np.float64), g, axis=1)
    zp_el = np.repeat(zp, g, axis=1)
    deq = (q - zp_el).astype(np.float64) * s_el
    err = np.abs(deq - x.astype(np.float64))
    span = float(1 << bits)
    allow = s_el * (0.5 + span * 2.0 ** -20)
    allow = allow + np.where((q == qmin) | (q == qmax), s_el * span * UNIT[sdt], 0.0)
    over = np.argwhere(err > allow)
    if len(over):
        rr, cc = over[0]
        probs.add("%s: %d element(s) with |dequant - x| > scale/2, first [%d,%d]: x=%r dequant=%r "
                  "scale=%r" % (p, len(over), rr, cc, float(x[rr, cc]), deq[rr, cc], s_el[rr, cc]))
    st = stats.setdefault(kind_of(p), [0, 0.0, 0.0, 0.0])
    st[0] += err.size
    st[1] += float(err.sum())
    st[2] = max(st[2], float(err.max()) if err.size else 0.0)
    st[3] = max(st[3], float((err / s_el).max()) if err.size else 0.0)


def check(qdir, refdir, bits, group, asym):
    probs = hf.Problems()
    stats = {}
    if bits not in (4, 8):
        probs.add("--bits must be 4 or 8")
        return probs, stats, 0, 0
    if group < 0:
        probs.add("--group must be >= 0")
        return probs, stats, 0, 0
    out = hf.read_folder(qdir, probs, False, "OUT")
    rprobs = hf.Problems()
    ref = hf.read_folder(refdir, rprobs, False, "REF")
    probs += ["REF invalid: " + p for p in rprobs]
    targets, unchanged, required_ignore = [], [], {"lm_head"}
    for name, (dt, shape, _b) in sorted(ref.items()):
        if is_target(name, dt, shape) and (group == 0 or shape[1] % group == 0):
            targets.append(name)
        else:
            unchanged.append(name)
            # Every Linear left unquantized: layers' and a value model's score head alike.
            if name.endswith(".weight") and len(shape) == 2 and name not in (
                    "model.embed_tokens.weight", "lm_head.weight"):
                required_ignore.add(name[:-len(".weight")])
    expected = set(unchanged)
    for name in targets:
        p = name[:-len(".weight")]
        expected |= {p + ".weight_packed", p + ".weight_scale", p + ".weight_shape"}
        if asym:
            expected.add(p + ".weight_zero_point")
    for name in targets:
        if name in out:
            probs.add("%s: still present (should be replaced by weight_packed/scale/shape)" % name)
    for name in sorted(set(out) - expected - set(targets)):
        probs.add("unexpected tensor %s" % name)
    for name in unchanged:
        if name not in out:
            probs.add("missing unchanged tensor %s" % name)
            continue
        (dt, sh, b), (rdt, rsh, rb) = out[name], ref[name]
        if dt != rdt or sh != rsh:
            probs.add("%s: %s%s, want unchanged %s%s" % (name, dt, list(sh), rdt, list(rsh)))
        elif b != rb:
            probs.add("%s: bytes differ from REF (%s)" % (name, hf._first_diff(b, rb, dt)))
    for name in targets:
        check_one(name, ref[name], out, bits, group, asym, probs, stats)
    check_config(qdir, refdir, bits, group, asym, required_ignore,
                 {n[:-len(".weight")] for n in targets}, probs)
    # the other HF files travel unchanged
    if os.path.isdir(refdir):
        for f in sorted(os.listdir(refdir)):
            fp = os.path.join(refdir, f)
            # vmerge.checksums.json describes each folder's own bytes, so it differs by design
            if f in ("config.json", "vmerge.checksums.json") or hf.WEIGHT_FILE_RE.fullmatch(f) or not os.path.isfile(fp):
                continue
            o = os.path.join(qdir, f)
            if not os.path.isfile(o):
                probs.add("file %s missing from OUT" % f)
            else:
                with open(o, "rb") as a, open(fp, "rb") as b:
                    if a.read() != b.read():
                        probs.add("file %s differs from REF" % f)
    return probs, stats, len(targets), len(unchanged)


def report(probs, stats, nq, nu, quiet=False):
    if not quiet:
        for k in sorted(stats):
            n, tot, mx, rel = stats[k]
            print("%-16s mean |dq-x| %.3e  max %.3e  max/scale %.4f  (%d elements)"
                  % (k, tot / max(n, 1), mx, rel, n))
    if probs:
        if not quiet:
            for p in probs[:MAX_REPORT]:
                print(p)
            if len(probs) > MAX_REPORT:
                print("... %d more problem(s)" % (len(probs) - MAX_REPORT))
        return 1
    if not quiet:
        print("OK %d quantized, %d unchanged" % (nq, nu))
    return 0


# ------------------------------------------------------------------------------------------------
# self test: a tiny reference model and a quantized folder built here, with a packer written
# independently of unpack_rows (plain Python integer loops)
# ------------------------------------------------------------------------------------------------


def _pack_loop(vals, bits):
    """vals: list of rows of signed ints -> list of rows of int32 words (Python ints)."""
    per, off = 32 // bits, 1 << (bits - 1)
    rows = []
    for row in vals:
        words = []
        for start in range(0, len(row), per):
            w = 0
            for j, v in enumerate(row[start:start + per]):
                u = int(v) + off
                assert 0 <= u < (1 << bits)
                w |= u << (bits * j)
            words.append(w - (1 << 32) if w >= 1 << 31 else w)
        rows.append(words)
    return rows


def _i32_bytes(rows):
    return b"".join(struct.pack("<%di" % len(r), *r) for r in rows)


def _write_st(path, tensors):
    """tensors: {name: (dtype, shape, bytes)}; sorted by element size (alignment) then name."""
    items = sorted(tensors.items(), key=lambda kv: (-hf.BITS[kv[1][0]], kv[0]))
    with open(path, "wb") as f:
        f.write(hf._st_bytes([(k, dt, list(sh), b) for k, (dt, sh, b) in items]))


def _write_folder(d, tensors, config, shards=1, extra_files=None):
    os.makedirs(d)
    names = sorted(tensors)
    if shards == 1:
        _write_st(os.path.join(d, "model.safetensors"), tensors)
    else:
        wm = {}
        for k in range(shards):
            part = {n: tensors[n] for n in names[k::shards]}
            fn = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
            _write_st(os.path.join(d, fn), part)
            wm.update({n: fn for n in part})
        idx = {"metadata": {"total_size": sum(len(v[2]) for v in tensors.values())},
               "weight_map": wm}
        with open(os.path.join(d, hf.INDEX), "w") as f:
            json.dump(idx, f, indent=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for fn, txt in (extra_files or {}).items():
        with open(os.path.join(d, fn), "w") as f:
            f.write(txt)


def _raw(dt, a32):
    if dt == "BF16":
        return bf16_bits(a32).astype("<u2").tobytes()
    if dt == "F16":
        return a32.astype("<f2").tobytes()
    return a32.astype("<f4").tobytes()


def _tiny_model(rng):
    H, V = 64, 16

    def w(dt, shape, scale=0.05):
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        return (dt, tuple(shape), a)

    t = {
        "model.embed_tokens.weight": w("BF16", (V, H)),
        "model.norm.weight": w("BF16", (H,)),
        "lm_head.weight": w("BF16", (V, H)),
        "model.layers.0.input_layernorm.weight": w("BF16", (H,)),
        "model.layers.0.self_attn.q_proj.weight": w("BF16", (64, H)),
        "model.layers.0.self_attn.q_proj.bias": w("BF16", (64,)),
        "model.layers.0.self_attn.k_proj.weight": w("BF16", (18, H)),
        "model.layers.0.self_attn.o_proj.weight": w("F16", (H, 64)),
        "model.layers.0.mlp.gate_proj.weight": w("BF16", (40, H)),
        "model.layers.0.mlp.down_proj.weight": w("BF16", (H, 36)),
        "model.layers.0.mlp.gate.weight": w("BF16", (4, H)),
        "model.layers.0.mlp.shared_expert_gate.weight": w("BF16", (1, H)),
        "model.layers.0.mlp.experts.0.w1.weight": w("F32", (32, H)),
        "model.layers.0.mlp.experts.0.w2.weight": w("F32", (H, 32)),
        "model.layers.0.mlp.experts.0.w3.weight": w("F32", (32, H)),
    }
    g = t["model.layers.0.mlp.gate_proj.weight"][2]
    g[0, :] = 0.0                                    # all-zero row: eps scale, zero groups
    g[1, :8] = [7.5, 2.5, 3.5, -0.5, -7.5, 0.5, 1.5, 0.0]  # exact ties at scale 1.0 (sym int4)
    g[1, 8:32] = 0.0
    g[2, :] = -np.abs(g[2, :]) - 0.01                # all negative
    g[3, 5] = 3.0                                    # one outlier
    g[4, :32] = 1e-30                                # tiny positive group
    return {k: (dt, sh, a.astype(np.float32)) for k, (dt, sh, a) in t.items()}


def _quantize_folder(model, bits, group, asym):
    """Build the expected quantized tensors and ignore list for a tiny model (float32 arrays)."""
    tensors, ignore = {}, ["lm_head"]
    for name, (dt, sh, a) in model.items():
        raw = _raw(dt, a)
        x = to_f32(dt, sh, raw)
        if is_target(name, dt, sh) and (group == 0 or sh[1] % group == 0):
            p = name[:-len(".weight")]
            r = rtn(x, group, bits, asym, scale_dtype_for(dt))
            tensors[p + ".weight_packed"] = ("I32", (sh[0], -(-sh[1] // (32 // bits))),
                                             _i32_bytes(_pack_loop(r["q"].tolist(), bits)))
            tensors[p + ".weight_scale"] = (scale_dtype_for(dt), r["s"].shape, r["s_bytes"])
            tensors[p + ".weight_shape"] = ("I64", (2,), struct.pack("<2q", *sh))
            if asym:
                zcols = _pack_loop(r["zp"].T.tolist(), bits)  # pack each column along dim 0
                zrows = [list(row) for row in zip(*zcols)]
                tensors[p + ".weight_zero_point"] = ("I32", (len(zrows), r["zp"].shape[1]),
                                                     _i32_bytes(zrows))
        else:
            tensors[name] = (dt, sh, raw)
            if name.startswith("model.layers.") and len(sh) == 2:
                ignore.append(name[:-len(".weight")])
    qc = expected_qconfig(bits, group, asym)
    qc["ignore"] = ignore
    return tensors, qc


def _selftest():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    # 1. hand-computed anchors (independent of rtn's internals)
    x = np.array([[7.5, 2.5, 3.5, -0.5, -7.5, 0.5, 1.5, 0.0]], dtype=np.float32)
    r = rtn(x, 8, 4, False, "BF16")
    expect(r["q"].tolist() == [[7, 2, 4, 0, -8, 0, 2, 0]], "sym int4 ties: %s" % r["q"].tolist())
    expect(r["s_bytes"] == struct.pack("<H", 0x3F80), "sym int4 scale 1.0 in bf16")
    expect(_pack_loop(r["q"].tolist(), 4) == [[0x8A808CAF - (1 << 32)]], "int4 pack order")
    q8, _ = unpack_rows(np.array([[0x8A808CAF - (1 << 32)]], dtype=np.int32), 4, 8)
    expect(q8.tolist() == [[7, 2, 4, 0, -8, 0, 2, 0]], "int4 unpack order")
    q8, pad = unpack_rows(np.array([[0x00FF8000]], dtype=np.int32), 8, 3)
    expect(q8.tolist() == [[-128, 0, 127]] and not pad[0], "int8 unpack order %s" % q8.tolist())
    _q, pad = unpack_rows(np.array([[0x01FF8000]], dtype=np.int32), 8, 3)
    expect(bool(pad[0]), "int8 padding byte detected")
    r = rtn(np.array([[-1.0, 0.5]], dtype=np.float32), 2, 4, True, "BF16")
    expect(r["zp"].tolist() == [[2]] and r["q"].tolist() == [[-8, 7]],
           "asym int4: zp %s q %s" % (r["zp"].tolist(), r["q"].tolist()))
    expect(r["s_bytes"] == struct.pack("<H", 0x3DCD), "bf16(0.1) = 0x3DCD")
    r = rtn(np.zeros((1, 4), dtype=np.float32), 0, 8, False, "F16")
    expect(r["s_bytes"] == struct.pack("<e", 2.0 ** -10) and r["q"].tolist() == [[0] * 4],
           "zero row: F16 eps scale")
    r = rtn(np.full((1, 4), 1e-30, dtype=np.float32), 0, 4, False, "F16")
    expect(r["s_bytes"] == struct.pack("<e", 2.0 ** -10), "F16 underflowing scale -> eps")
    # 2. bf16 cast against torch's round-to-nearest-even, when torch is here
    try:
        import torch
        rng = np.random.default_rng(3)
        v = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 10.0 ** rng.integers(
            -30, 30, 20000), (np.arange(1, 4000, dtype=np.uint32) << 15 | 0x3F000000)
            .view(np.float32)]).astype(np.float32)
        tb = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        expect((tb == bf16_bits(v)).all(), "bf16 RNE cast disagrees with torch")
    except ImportError:
        pass

    # 3. full folders: every combination passes
    rng = np.random.default_rng(11)
    model = _tiny_model(rng)
    base = tempfile.mkdtemp(prefix="check_quantized_selftest_")
    cfg = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "rms_norm_eps": 1e-06,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    extra = {"generation_config.json": '{"do_sample": true}\n'}
    ref = os.path.join(base, "ref")
    _write_folder(ref, {k: (dt, sh, _raw(dt, a)) for k, (dt, sh, a) in model.items()}, cfg,
                  shards=2, extra_files=extra)
    n = [0]

    def run(tensors, qc, bits, group, asym, cfg_over=None, want_ok=True, what=""):
        n[0] += 1
        d = os.path.join(base, "q%d" % n[0])
        c = dict(cfg)
        c["quantization_config"] = qc
        if cfg_over:
            cfg_over(c)
        _write_folder(d, tensors, c, extra_files=extra)
        probs, stats, nq, nu = check(d, ref, bits, group, asym)
        if want_ok and probs:
            failures.append("%s: unexpected problems %s" % (what, probs[:3]))
        if not want_ok and not probs:
            failures.append("%s: corruption accepted" % what)
        return probs, nq, nu

    cases = [(b, g, a) for b in (4, 8) for g in (32, 0) for a in (False, True)]
    good = {}
    for b, g, a in cases:
        t, qc = _quantize_folder(model, b, g, a)
        good[(b, g, a)] = (t, qc)
        probs, nq, nu = run(t, qc, b, g, a, what="good b%d g%d %s" % (b, g, "asym" if a else "sym"))
        expect(nq == (8 if g == 0 else 7), "b%d g%d: %d quantized" % (b, g, nq))
    # the checker for one setting rejects the output of another
    t, qc = good[(4, 32, True)]
    run(t, qc, 4, 32, False, want_ok=False, what="asym output checked as sym")
    run(t, qc, 8, 32, True, want_ok=False, what="4-bit output checked as 8-bit")
    t, qc = good[(8, 0, False)]
    run(t, qc, 8, 32, False, want_ok=False, what="channel output checked as group 32")

    # 4. corruptions
    def mutate(key, b, g, a, fn, cfg_over=None, what=""):
        t, qc = good[(b, g, a)]
        t = dict(t)
        qc = json.loads(json.dumps(qc))
        if fn:
            fn(t, qc)
        probs, _, _ = run(t, qc, b, g, a, cfg_over=cfg_over, want_ok=False, what=what)
        if key and not any(key in p for p in probs):
            failures.append("%s: no problem mentions %r: %s" % (what, key, probs[:3]))

    Q = "model.layers.0.self_attn.q_proj"

    def flip(name, byte, mask=0x01):
        def fn(t, qc):
            dt, sh, raw = t[name]
            raw = bytearray(raw)
            raw[byte] ^= mask
            t[name] = (dt, sh, bytes(raw))
        return fn

    for b, g, a in [(4, 32, True), (8, 0, False), (4, 0, False), (8, 32, True)]:
        tag = "b%d g%d %s: " % (b, g, "asym" if a else "sym")
        mutate("weight_packed", b, g, a, flip(Q + ".weight_packed", 37), what=tag + "packed word")
        mutate("weight_scale", b, g, a, flip(Q + ".weight_scale", 2), what=tag + "scale ulp")
        mutate("symmetric", b, g, a, None, cfg_over=lambda c: c["quantization_config"][
            "config_groups"]["group_0"]["weights"].__setitem__("symmetric", a),
            what=tag + "config symmetric")
        mutate("lm_head", b, g, a, lambda t, qc: qc["ignore"].remove("lm_head"),
               what=tag + "ignore without lm_head")
        mutate("scale_dtype", b, g, a, lambda t, qc: qc["config_groups"]["group_0"]["weights"]
               .__setitem__("scale_dtype", "bfloat16"), what=tag + "scale_dtype key")
        mutate("extra_key", b, g, a, None, cfg_over=lambda c: c.__setitem__("extra_key", 1),
               what=tag + "extra config key")
        mutate("rope_theta", b, g, a, None, cfg_over=lambda c: c.__setitem__("rope_theta", 10000),
               what=tag + "config float written as int")
        mutate("group_size", b, g, a, lambda t, qc: qc["config_groups"]["group_0"]["weights"]
               .__setitem__("group_size", -1 if g == 0 else 64), what=tag + "group_size")
        mutate("model.norm.weight", b, g, a, flip("model.norm.weight", 5),
               what=tag + "unchanged tensor")
        mutate("weight_shape holds", b, g, a, flip(Q + ".weight_shape", 0),
               what=tag + "weight_shape value")
        mutate(Q + ".weight_scale: missing", b, g, a,
               lambda t, qc: t.pop(Q + ".weight_scale"), what=tag + "scale missing")
        mutate("still present", b, g, a, lambda t, qc: t.__setitem__(
            Q + ".weight", ("BF16", (64, 64), _raw("BF16", model[Q + ".weight"][2]))),
            what=tag + "original weight left")
        mutate("weight_scale: F32", b, g, a, lambda t, qc: t.__setitem__(
            Q + ".weight_scale", ("F32", t[Q + ".weight_scale"][1], to_f32(
                "BF16", t[Q + ".weight_scale"][1], t[Q + ".weight_scale"][2]).tobytes())),
            what=tag + "scale stored as F32")
        mutate("mlp.gate", b, g, a, lambda t, qc: qc["ignore"].remove(
            "model.layers.0.mlp.gate"), what=tag + "router gate not ignored")
        mutate("re:", b, g, a, lambda t, qc: qc["ignore"].append("re:.*q_proj$"),
               what=tag + "regex ignoring a quantized module")
        mutate("v_proj", b, g, a, lambda t, qc: qc["ignore"].append(
            "model.layers.0.self_attn.v_proj"), what=tag + "stale ignore entry")
        if a:
            mutate("weight_zero_point", b, g, a, flip(Q + ".weight_zero_point", 1),
                   what=tag + "zero point word")
            mutate("weight_zero_point: missing", b, g, a,
                   lambda t, qc: t.pop(Q + ".weight_zero_point"), what=tag + "zp missing")
            K = "model.layers.0.self_attn.k_proj.weight_zero_point"
            last = len(good[(b, g, a)][0][K][2]) - 1
            mutate("padding", b, g, a, flip(K, last, 0x80), what=tag + "zp padding bits")
        else:
            mutate("unexpected tensor", b, g, a, lambda t, qc: t.__setitem__(
                Q + ".weight_zero_point", ("I32", (-(-64 // (32 // b)), 64 // (g or 64)),
                                           b"\0" * 4 * (-(-64 // (32 // b))) * (64 // (g or 64)))),
                what=tag + "zp written for sym")
    D = "model.layers.0.mlp.down_proj"
    # 36 int4 values need 4.5 words: the upper half of the last word is padding
    last = len(good[(4, 0, False)][0][D + ".weight_packed"][2]) - 1
    mutate("padding", 4, 0, False, flip(D + ".weight_packed", last, 0x10),
           what="b4 channel: packed padding bits")

    def quantize_ignored(t, qc):
        x = model[D + ".weight"][2]
        xr = to_f32("BF16", x.shape, _raw("BF16", x))
        r = rtn(xr, 0, 4, False, "BF16")
        del t[D + ".weight"]
        t[D + ".weight_packed"] = ("I32", (64, 5), _i32_bytes(_pack_loop(r["q"].tolist(), 4)))
        t[D + ".weight_scale"] = ("BF16", (64, 1), r["s_bytes"])
        t[D + ".weight_shape"] = ("I64", (2,), struct.pack("<2q", 64, 36))
        qc["ignore"].remove(D)
    mutate("down_proj", 4, 32, False, quantize_ignored,
           what="b4 g32: non-divisible Linear quantized per channel")

    # an all-zero asymmetric group may carry any zero point if every q equals it; not otherwise
    G = "model.layers.0.mlp.gate_proj"

    def zero_group(zpv, qv):
        def fn(t, qc):
            x = model[G + ".weight"][2]
            r = rtn(to_f32("BF16", x.shape, _raw("BF16", x)), 32, 4, True, "BF16")
            r["zp"][0, :] = zpv
            r["q"][0, :] = qv
            t[G + ".weight_packed"] = ("I32", (40, 8), _i32_bytes(_pack_loop(r["q"].tolist(), 4)))
            zrows = [list(row) for row in zip(*_pack_loop(r["zp"].T.tolist(), 4))]
            t[G + ".weight_zero_point"] = ("I32", (5, 2), _i32_bytes(zrows))
        return fn
    t, qc = good[(4, 32, True)]
    t = dict(t)
    zero_group(3, 3)(t, qc)
    run(t, qc, 4, 32, True, what="all-zero group with zero point 3")
    mutate("gate_proj.weight_packed", 4, 32, True, zero_group(3, 2),
           what="all-zero group, q != zero point")

    shutil.rmtree(base, ignore_errors=True)
    if failures:
        for f in failures:
            print("SELFTEST FAIL:", f)
        return 1
    print("selftest OK (%d folders checked)" % n[0])
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--ref")
    ap.add_argument("--bits", type=int)
    ap.add_argument("--group", type=int, help="group size; 0 = per channel")
    ap.add_argument("--asymmetric", action="store_true")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    if a.selftest:
        return _selftest()
    if not a.out or not a.ref or a.bits is None or a.group is None:
        ap.error("--out, --ref, --bits and --group are required")
    probs, stats, nq, nu = check(a.out, a.ref, a.bits, a.group, a.asymmetric)
    return report(probs, stats, nq, nu)


if __name__ == "__main__":
    sys.exit(main())
