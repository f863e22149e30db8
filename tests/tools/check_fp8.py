#!/usr/bin/python3
"""Independent checker for vmerge's FP8 output (numpy only).

    check_fp8.py --out QDIR --ref REFDIR --scheme fp8|fp8-block|fp8-dynamic [--scale-format ue8m0]
                 [--ignore M1,M2] [--ignore-pattern RE]
    check_fp8.py --selftest

Written from docs/reference/fp8-formats.md and lowbit-formats.md §4-§5 (not from vmerge's code). REFDIR is the unquantized
merge of the same checkpoint, QDIR the FP8 one.

Rules checked
  * Both folders obey the safetensors file/layout rules (check_hf_output.read_folder).
  * Targets (§4): every 2-D BF16/F16/F32 tensor `model.layers.<...>.weight` whose module's last
    name is `*_proj` (but not `eh_proj`), `kv_a_proj_with_mqa`, `w1`, `w2` or `w3`, except the
    --ignore modules and the other parts of their fused group (q/k/v, gate/up, q_a_proj/
    kv_a_proj_with_mqa, w1/w3 of one parent); fp8-block also leaves out every module whose input
    size K is not a multiple of 128, with the other parts of its fused group.
  * Per target `<m>.weight` [N, K] of dtype D in REF, QDIR holds exactly
      fp8:          <m>.weight F8_E4M3 [N, K] and <m>.weight_scale_inv F32 [ceil(N/128), ceil(K/128)]
      fp8-block:    <m>.weight F8_E4M3 [N, K] and <m>.weight_scale D [ceil(N/128), K/128]
      fp8-dynamic:  <m>.weight F8_E4M3 [N, K] and <m>.weight_scale D [N, 1]
    with bytes equal to this recomputation (numpy float32, every operation rounded once):
      fp8:  per 128x128 block (partial edge blocks over their real elements),
            a = max(max|w|, float32(1e-4)); s = a / 448; r = 1 / s; code = E(clip(w * r, ±448))
            (--scale-format ue8m0: s replaced by the least power of two >= a / 448, from frexp)
      fp8-block: the fp8-dynamic arithmetic below per 128x128 block (partial row blocks over their
            real rows): s = round_D(max|w| / 448), eps(D) where 0; code = E(clip(round_D(w / s) + 0, ±448))
      fp8-dynamic: per row, s = round_D(max|w| / 448), s = eps(D) where s == 0
            (BF16 2^-7, F16 2^-10, F32 2^-23); code = E(clip(round_D(w / s) + 0, ±448)) (the + 0 is
            compressed-tensors' zero point: a quotient of -0 becomes +0, code 0x00)
    where E is float8_e4m3fn rounding: the nearest value of the e4m3fn grid (codes 0..0x7E, and
    0x7F counted as 480, which is NaN), ties to the even code, sign copied. No code is 0x7F/0xFF.
  * Every other REF tensor is in QDIR unchanged (dtype, shape, bytes); nothing else is in QDIR.
  * config.json == REF's (its torch_dtype/dtype naming the dtype of QDIR's unquantized float
    tensors) plus exactly `quantization_config`:
      fp8: {quant_method "fp8", fmt "e4m3", activation_scheme "dynamic", weight_block_size [128, 128],
            (--scale-format ue8m0: scale_fmt "ue8m0",) modules_to_not_convert L, ignored_layers L}
      fp8-block: compressed-tensors float-quantized with the FP8_BLOCK group (weights strategy
            "block", block_structure [128, 128]; input activations dynamic, strategy "group",
            group_size 128) and ignore L
      fp8-dynamic: compressed-tensors float-quantized with the FP8_DYNAMIC group (§3.3) and ignore L
    where L holds each of these once, in any order: "lm_head" and the module of every 2-D
    `*.weight` in QDIR that is not FP8 and whose name mentions neither "norm" nor "embed".
  * Every other non-weight file of REF is byte-identical in QDIR.
Prints the mean/max |dequantized - w| and "OK n quantized, m unchanged" (exit 0) or the first
problems (exit 1).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hf_output as hf  # noqa: E402

BLOCK = 128
MAX_REPORT = 10
EPS = {"BF16": 2.0 ** -7, "F16": 2.0 ** -10, "F32": 2.0 ** -23}
TARGET_RE = re.compile(r"model\.layers\..*\.([A-Za-z0-9_]+)\.weight")
FUSED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
         "q_a_proj": "qkv_a", "kv_a_proj_with_mqa": "qkv_a", "w1": "w13", "w3": "w13"}


class Problems(list):
    def add(self, msg):
        self.append(msg)


# ------------------------------------------------------------------------------------------------
# e4m3fn, from the format definition
# ------------------------------------------------------------------------------------------------

def e4m3_decode(codes):
    c = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    e, m = (c >> 3) & 0xF, c & 7
    mag = np.where(e == 0, m * 2.0 ** -9, (8 + m) * np.exp2(e.astype(np.float64) - 10))
    mag = np.where((c & 0x7F) == 0x7F, np.nan, mag)
    return np.where(c & 0x80, -mag, mag)


# Magnitudes of codes 0..0x7F, the last one standing for 480 (where rounding reaches NaN).
_GRID = np.concatenate([e4m3_decode(np.arange(0x7F)), [480.0]])


def e4m3_encode(values):
    """float32/float64 array -> uint8 codes, nearest grid value, ties to the even code."""
    v = np.asarray(values, dtype=np.float64)
    a = np.abs(v)
    hi = np.clip(np.searchsorted(_GRID, a, side="left"), 0, 0x7F)
    lo = np.clip(hi - 1, 0, 0x7F)
    d_hi, d_lo = np.abs(_GRID[hi] - a), np.abs(a - _GRID[lo])
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0))
    code = np.where(pick_lo, lo, hi)
    code = np.where(np.isnan(v) | (a >= 480.0), 0x7F, code)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


# ------------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------------

def to_f32(dt, shape, b):
    if dt == "BF16":
        return (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dt == "F16":
        return np.frombuffer(b, dtype="<f2").astype(np.float32).reshape(shape)
    return np.frombuffer(b, dtype="<f4").astype(np.float32).reshape(shape)


def round_to(dt, a32):
    """float32 values rounded to dtype dt (nearest even), back as float32, and their bytes."""
    a32 = np.ascontiguousarray(a32, dtype=np.float32)
    if dt == "BF16":
        u = a32.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return (bits.astype(np.uint32) << 16).view(np.float32), bits.astype("<u2").tobytes()
    if dt == "F16":
        h = a32.astype(np.float16)
        return h.astype(np.float32), h.astype("<f2").tobytes()
    return a32, a32.astype("<f4").tobytes()


# ------------------------------------------------------------------------------------------------
# expected bytes
# ------------------------------------------------------------------------------------------------

def block_amax(w):
    """max |w| of every 128x128 block (partial edge blocks padded with zeros), float32."""
    n, k = w.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    padded = np.zeros((nb * BLOCK, kb * BLOCK), dtype=np.float32)
    padded[:n, :k] = w
    return np.abs(padded.reshape(nb, BLOCK, kb, BLOCK)).max(axis=(1, 3)).astype(np.float32)


def expand_blocks(s, shape):
    return np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:shape[0], :shape[1]]


def power_of_two_at_least(x):
    """The least power of two >= x (x > 0, float32): frexp gives x = m * 2^e with m in [0.5, 1);
    m == 0.5 means x is 2^(e-1) already."""
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(1.0, np.where(m == 0.5, e - 1, e)).astype(np.float32)


def expect_block(w, ue8m0=False):
    n, k = w.shape
    amax = np.maximum(block_amax(w), np.float32(1e-4)).astype(np.float32)
    s = (amax / np.float32(448.0)).astype(np.float32)
    if ue8m0:
        s = power_of_two_at_least(s)
    r = (np.float32(1.0) / s).astype(np.float32)
    r_full = np.repeat(np.repeat(r, BLOCK, axis=0), BLOCK, axis=1)[:n, :k]
    v = (w * r_full).astype(np.float32)
    codes = e4m3_encode(np.clip(v, np.float32(-448.0), np.float32(448.0)))
    s_full = np.repeat(np.repeat(s, BLOCK, axis=0), BLOCK, axis=1)[:n, :k]
    return codes, s.astype("<f4").tobytes(), s_full


def expect_ct_block(w, dt):
    s, _ = round_to(dt, (block_amax(w) / np.float32(448.0)).astype(np.float32))
    s = np.where(s == 0, np.float32(EPS[dt]), s).astype(np.float32)
    s, s_bytes = round_to(dt, s)
    s_full = expand_blocks(s, w.shape)
    with np.errstate(over="ignore"):  # F16 quotients may overflow; the clip takes them
        t, _ = round_to(dt, (w / s_full).astype(np.float32))
    t = t + np.float32(0.0)  # the zero point compressed-tensors adds: -0 becomes +0
    codes = e4m3_encode(np.clip(t, np.float32(-448.0), np.float32(448.0)))
    return codes, s_bytes, s_full


def expect_channel(w, dt):
    amax = np.abs(w).max(axis=1, keepdims=True).astype(np.float32)
    s, _ = round_to(dt, (amax / np.float32(448.0)).astype(np.float32))
    s = np.where(s == 0, np.float32(EPS[dt]), s).astype(np.float32)
    s, s_bytes = round_to(dt, s)
    t, _ = round_to(dt, (w / s).astype(np.float32))
    t = t + np.float32(0.0)  # the zero point compressed-tensors adds: -0 becomes +0
    codes = e4m3_encode(np.clip(t, np.float32(-448.0), np.float32(448.0)))
    return codes, s_bytes, np.broadcast_to(s, w.shape)


# ------------------------------------------------------------------------------------------------
# selection and config
# ------------------------------------------------------------------------------------------------

def module_of(name):
    return name[:-len(".weight")]


def targets(ref, ignore, ignore_patterns, whole_column_blocks=False):
    cand = {}
    for name, (dt, shape, _) in ref.items():
        m = TARGET_RE.fullmatch(name)
        if not m or len(shape) != 2 or dt not in EPS:
            continue
        last = m.group(1)
        if (last.endswith("_proj") and last != "eh_proj") or last in ("kv_a_proj_with_mqa", "w1", "w2", "w3"):
            cand[module_of(name)] = last

    def user_ignored(mod):
        if whole_column_blocks and ref[mod + ".weight"][1][1] % BLOCK:
            return True
        return mod in ignore or any(re.fullmatch(p, mod) for p in ignore_patterns)

    def group(mod, last):
        return mod.rsplit(".", 1)[0] + "|" + FUSED[last] if last in FUSED else None

    dead = {group(m, l) for m, l in cand.items() if user_ignored(m) and group(m, l)}
    return {m for m, l in cand.items() if not user_ignored(m) and group(m, l) not in dead}


def expected_config(scheme, listed, ue8m0=False):
    if scheme == "fp8":
        config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                  "weight_block_size": [128, 128]}
        if ue8m0:
            config["scale_fmt"] = "ue8m0"
        config.update({"modules_to_not_convert": listed, "ignored_layers": listed})
        return config
    def args(strategy, dynamic, group_size=None, block_structure=None):
        return {"num_bits": 8, "type": "float", "symmetric": True, "group_size": group_size, "strategy": strategy,
                "block_structure": block_structure, "dynamic": dynamic, "actorder": None,
                "observer": None if dynamic else "minmax", "observer_kwargs": {}}
    if scheme == "fp8-block":
        weights, inputs = args("block", False, block_structure=[128, 128]), args("group", True, group_size=128)
    else:
        weights, inputs = args("channel", False), args("token", True)
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": inputs, "output_activations": None}},
            "ignore": listed, "kv_cache_scheme": None, "global_compression_ratio": None, "sparsity_config": {}}


def jsame(a, b):
    """Strict JSON equality: bool/int/float/None are told apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(jsame(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(jsame(x, y) for x, y in zip(a, b))
    return a == b


TORCH_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def check_config(qdir, refdir, scheme, required, weights_dtype, probs, ue8m0=False):
    with open(os.path.join(qdir, "config.json"), encoding="utf-8") as f:
        got = json.load(f)
    with open(os.path.join(refdir, "config.json"), encoding="utf-8") as f:
        ref = json.load(f)
    # The dtype keys REF states become the dtype the unquantized weights are written in.
    for key in ("torch_dtype", "dtype"):
        if key in ref and weights_dtype in TORCH_NAMES:
            ref[key] = TORCH_NAMES[weights_dtype]
    qc = got.pop("quantization_config", None)
    if not jsame(got, ref):
        probs.add("config.json differs from REF's outside quantization_config")
    if not isinstance(qc, dict):
        probs.add("config.json: quantization_config missing")
        return
    keys = ("modules_to_not_convert", "ignored_layers") if scheme == "fp8" else ("ignore",)
    for k in keys:
        lst = qc.get(k)
        if not isinstance(lst, list) or len(set(lst)) != len(lst) or set(lst) != required:
            probs.add("quantization_config.%s = %s, want the set %s" % (k, json.dumps(lst), sorted(required)))
    if scheme == "fp8" and qc.get("modules_to_not_convert") != qc.get("ignored_layers"):
        probs.add("modules_to_not_convert and ignored_layers differ")
    listed = qc.get(keys[0])
    want = expected_config(scheme, listed, ue8m0)
    if not jsame(qc, want):
        probs.add("quantization_config = %s, want %s" % (json.dumps(qc), json.dumps(want)))


def check_files(qdir, refdir, probs):
    for f in sorted(os.listdir(refdir)):
        if f.endswith(".safetensors") or f in ("config.json", hf.INDEX, "vmerge.checksums.json"):
            continue
        p = os.path.join(refdir, f)
        if not os.path.isfile(p):
            continue
        q = os.path.join(qdir, f)
        if not os.path.isfile(q):
            probs.add("%s missing in QDIR" % f)
            continue
        with open(p, "rb") as a, open(q, "rb") as b:
            if a.read() != b.read():
                probs.add("%s differs from REF" % f)


# ------------------------------------------------------------------------------------------------
# main check
# ------------------------------------------------------------------------------------------------

def check(qdir, refdir, scheme, ignore, ignore_patterns, ue8m0=False):
    probs = Problems()
    hprobs = hf.Problems()
    out = hf.read_folder(qdir, hprobs, what="QDIR")
    ref = hf.read_folder(refdir, hprobs, what="REF")
    probs.extend(hprobs)
    if probs:
        return probs, 0, 0
    quant = targets(ref, ignore, ignore_patterns, whole_column_blocks=scheme == "fp8-block")
    seen = set()
    errors = []
    for m in sorted(quant):
        dt, shape, rb = ref[m + ".weight"]
        w = to_f32(dt, shape, rb)
        if scheme == "fp8":
            codes, s_bytes, s_full = expect_block(w, ue8m0)
            sname, sdt, sshape = m + ".weight_scale_inv", "F32", [-(-shape[0] // BLOCK), -(-shape[1] // BLOCK)]
        elif scheme == "fp8-block":
            codes, s_bytes, s_full = expect_ct_block(w, dt)
            sname, sdt, sshape = m + ".weight_scale", dt, [-(-shape[0] // BLOCK), shape[1] // BLOCK]
        else:
            codes, s_bytes, s_full = expect_channel(w, dt)
            sname, sdt, sshape = m + ".weight_scale", dt, [shape[0], 1]
        for name, want_dt, want_shape in ((m + ".weight", "F8_E4M3", list(shape)), (sname, sdt, sshape)):
            seen.add(name)
            if name not in out:
                probs.add("%s missing" % name)
                continue
            if out[name][0] != want_dt or list(out[name][1]) != want_shape:
                probs.add("%s is %s %s, want %s %s" % (name, out[name][0], list(out[name][1]), want_dt, want_shape))
        if probs:
            continue
        got = np.frombuffer(out[m + ".weight"][2], dtype=np.uint8).reshape(shape)
        if ((got & 0x7F) == 0x7F).any():
            probs.add("%s holds the NaN code" % m)
        bad = np.argwhere(got != codes)
        if len(bad):
            r, c = bad[0]
            probs.add("%s.weight: %d codes differ, first at [%d, %d]: 0x%02x, want 0x%02x (w = %r)"
                      % (m, len(bad), r, c, got[r, c], codes[r, c], float(w[r, c])))
        if out[sname][2] != s_bytes:
            probs.add("%s: scale bytes differ from the recomputation" % sname)
        errors.append(np.abs(e4m3_decode(got) * s_full - w))
    for name, (dt, shape, b) in ref.items():
        if name.endswith(".weight") and module_of(name) in quant:
            continue
        seen.add(name)
        if name not in out:
            probs.add("%s (unquantized) missing" % name)
        elif out[name][0] != dt or list(out[name][1]) != list(shape) or out[name][2] != b:
            probs.add("%s differs from REF (%s %s)" % (name, out[name][0], list(out[name][1])))
    for name in sorted(set(out) - seen):
        probs.add("unexpected tensor %s" % name)
    required = {"lm_head"} | {module_of(n) for n, (dt, shape, _) in out.items()
                              if n.endswith(".weight") and len(shape) == 2 and dt != "F8_E4M3"
                              and "norm" not in n and "embed" not in n}
    plain = {dt for n, (dt, _, _) in out.items() if dt in TORCH_NAMES and not n.endswith((".weight_scale_inv", ".weight_scale"))}
    check_config(qdir, refdir, scheme, required, plain.pop() if len(plain) == 1 else None, probs, ue8m0)
    check_files(qdir, refdir, probs)
    if errors:
        flat = np.concatenate([e.ravel() for e in errors])
        print("check_fp8: |dequantized - w| mean %.3e, max %.3e over %d weights" % (flat.mean(), flat.max(), flat.size))
    return probs, len(quant), len(ref) - len(quant)


def selftest():
    worked = {1.0: 0x38, 1.125: 0x39, 2.0 ** -10: 0x00, 3 * 2.0 ** -10: 0x02, 7.5 * 2.0 ** -9: 0x08,
              463.99: 0x7E, 464.0: 0x7E, 464.00003: 0x7F, -0.0: 0x80, 448.0: 0x7E, 480.0: 0x7F, -1.0625: 0xB8}
    for v, want in worked.items():
        got = int(e4m3_encode(np.float32(v)))
        assert got == want, (v, hex(got), hex(want))
    codes = np.arange(256, dtype=np.uint8)
    finite = (codes & 0x7F) != 0x7F
    assert (e4m3_encode(e4m3_decode(codes[finite])) == codes[finite]).all()
    w = np.zeros((130, 129), dtype=np.float32)
    codes, s_bytes, _ = expect_block(w)
    assert (codes == 0).all() and np.frombuffer(s_bytes, "<f4")[0] == np.float32(1e-4) / np.float32(448)
    # UE8M0: powers of two stay, anything above goes to the next; the all-zero floor is 2^-22.
    x = np.array([1.0, np.nextafter(np.float32(1), np.float32(2)), 0.75, 2.0 ** -126, 3.0e36], dtype=np.float32)
    assert (power_of_two_at_least(x) == np.array([1.0, 2.0, 1.0, 2.0 ** -126, 2.0 ** 122], np.float32)).all()
    _, s_bytes, _ = expect_block(w, ue8m0=True)
    assert np.frombuffer(s_bytes, "<f4")[0] == np.float32(2.0 ** -22)
    w[0, 0], w[1, 128] = 449.0, -1.0
    codes, s_bytes, _ = expect_block(w, ue8m0=True)
    assert np.frombuffer(s_bytes, "<f4")[0] == 2.0 and codes[0, 0] == 0x76
    # FP8_BLOCK in BF16: amax 1 -> s = bf16(1/448) = 146 * 2^-16; an all-zero block -> eps 2^-7;
    # a partial row block (rows 128, 129) over its real rows only.
    w = np.zeros((130, 256), dtype=np.float32)
    w[0, 0], w[1, 1], w[129, 5] = 1.0, -0.5, 448.0
    codes, s_bytes, _ = expect_ct_block(w, "BF16")
    scales = (np.frombuffer(s_bytes, "<u2").astype(np.uint32) << 16).view(np.float32)
    assert (scales == np.array([146 * 2.0 ** -16, 2.0 ** -7, 1.0, 2.0 ** -7], np.float32)).all(), scales
    assert codes[0, 0] == 0x7E and codes[1, 1] == 0xF6 and codes[129, 5] == 0x7E
    print("check_fp8 selftest: OK")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--ref")
    ap.add_argument("--scheme", choices=("fp8", "fp8-block", "fp8-dynamic"))
    ap.add_argument("--scale-format", choices=("float", "ue8m0"), default="float",
                    help="--scheme fp8: the block scales' format")
    ap.add_argument("--ignore", default="", help="comma-separated module names left unquantized")
    ap.add_argument("--ignore-pattern", action="append", default=[])
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    if a.selftest:
        return selftest()
    ignore = {m for m in a.ignore.split(",") if m}
    probs, nq, nu = check(a.out, a.ref, a.scheme, ignore, a.ignore_pattern, a.scale_format == "ue8m0")
    if probs:
        for p in probs[:MAX_REPORT]:
            print("FAIL:", p)
        return 1
    print("check_fp8: OK %d quantized, %d unchanged" % (nq, nu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
