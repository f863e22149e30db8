#!/usr/bin/python3
"""Independent checker for a merged Hugging Face safetensors folder (no torch, no safetensors pkg).

    check_hf_output.py --out OUT --ref REF [--hf HFDIR] [--strict-order]
    check_hf_output.py --selftest

OUT is validated against the safetensors reader rules and the writer conventions
(docs/reference/output-formats.md §1.2, §1.3, §2):
  * 8-byte little-endian header length N, N <= 100,000,000, 8 + N <= file size;
  * header is UTF-8 JSON starting with '{', right-padded with spaces only, N % 8 == 0;
  * no duplicate keys; `__metadata__` == {"format": "pt"};
  * every tensor entry has exactly dtype/shape/data_offsets, a known dtype, non-negative int shape;
  * offsets (sorted) start at 0, are contiguous (no holes, no overlaps), end - begin ==
    numel * element size, last end + 8 + N == file size; every tensor begins at a multiple of its
    element size (what the Rust writer's dtype sort guarantees);
  * with --strict-order also the Rust writer's order (dtype alignment desc, then name);
  * files: either exactly one model.safetensors and no index, or model-0000K-of-0000N.safetensors
    for K = 1..N plus model.safetensors.index.json whose metadata.total_size is the sum of tensor byte
    sizes and whose weight_map lists every tensor exactly once, pointing at the file that holds it.
Then OUT is compared with REF (read the same way, any sharding): same names, dtypes, shapes and
identical bytes (NaN bit patterns included). With --hf every non-weight file under HFDIR must exist
in OUT byte-identical, except config.json when its dtype keys (torch_dtype / dtype, also in
text_config) named another dtype than the one all of OUT's floating tensors share: then it must
be HFDIR's JSON, key for key and in order, with exactly those keys naming OUT's dtype. Prints up to 10 problems and exits 1, or prints "OK <n> tensors" and exits 0.
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys
import tempfile

MAX_HEADER = 100_000_000
# Rust Dtype enum order (docs/reference/output-formats.md §1.1) with bits per element
DTYPE_BITS = [("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8),
              ("F8_E5M2", 8), ("F8_E4M3", 8), ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8),
              ("F8_E5M2FNUZ", 8), ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32),
              ("U32", 32), ("F32", 32), ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64)]
BITS = dict(DTYPE_BITS)
ORDER = {d: i for i, (d, _) in enumerate(DTYPE_BITS)}
SHARD_RE = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
INDEX = "model.safetensors.index.json"
WEIGHT_FILE_RE = re.compile(r".*\.(safetensors|bin|pt|pth|ckpt|h5|msgpack)$|.*\.index\.json$")
MAX_REPORT = 10


class Problems(list):
    def add(self, msg):
        self.append(msg)


def _no_dupes(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError("duplicate key %r" % k)
        seen[k] = v
    return seen


def read_safetensors(path, probs, strict_order=False):
    """Validate one file. Returns {name: (dtype, shape, bytes)} (possibly partial on errors)."""
    tag = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        probs.add("%s: file shorter than 8 bytes (HeaderTooSmall)" % tag)
        return {}
    n = struct.unpack("<Q", data[:8])[0]
    if n > MAX_HEADER:
        probs.add("%s: header length %d > 100,000,000 (HeaderTooLarge)" % (tag, n))
        return {}
    if 8 + n > len(data):
        probs.add("%s: header length %d runs past end of file (InvalidHeaderLength)" % (tag, n))
        return {}
    raw = data[8:8 + n]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        probs.add("%s: header is not UTF-8" % tag)
        return {}
    if not text.startswith("{"):
        probs.add("%s: header does not start with '{'" % tag)
    if n % 8:
        probs.add("%s: header length %d is not a multiple of 8" % (tag, n))
    body = text.rstrip(" ")
    if body != body.rstrip() or not body.endswith("}"):
        probs.add("%s: header padding is not trailing spaces only" % tag)
    try:
        hdr = json.loads(text, object_pairs_hook=_no_dupes)
    except ValueError as e:
        probs.add("%s: header JSON invalid: %s" % (tag, e))
        return {}
    if not isinstance(hdr, dict):
        probs.add("%s: header is not a JSON object" % tag)
        return {}
    meta = hdr.get("__metadata__")
    if meta != {"format": "pt"}:
        probs.add("%s: __metadata__ is %r, want {'format': 'pt'}" % (tag, meta))
    entries = []
    for name, v in hdr.items():
        if name == "__metadata__":
            continue
        if not isinstance(v, dict) or set(v) != {"dtype", "shape", "data_offsets"}:
            probs.add("%s: %s: entry keys %r (want dtype/shape/data_offsets)"
                      % (tag, name, sorted(v) if isinstance(v, dict) else v))
            continue
        dt, shape, offs = v["dtype"], v["shape"], v["data_offsets"]
        if dt not in BITS:
            probs.add("%s: %s: unknown dtype %r" % (tag, name, dt))
            continue
        if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
            probs.add("%s: %s: bad shape %r" % (tag, name, shape))
            continue
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and o >= 0
                                                                  for o in offs)):
            probs.add("%s: %s: bad data_offsets %r" % (tag, name, offs))
            continue
        entries.append((offs[0], offs[1], name, dt, shape))
    entries.sort(key=lambda e: (e[0], e[1]))
    pos = 0
    out = {}
    buf = 8 + n
    for b, e, name, dt, shape in entries:
        numel = 1
        for s in shape:
            numel *= s
        nbits = numel * BITS[dt]
        if e < b or b != pos:
            probs.add("%s: %s: data_offsets [%d, %d] not contiguous (expected begin %d)"
                      % (tag, name, b, e, pos))
        if nbits % 8 or e - b != nbits // 8:
            probs.add("%s: %s: %d bytes for %s%s (want %s)" % (tag, name, e - b, dt, shape,
                                                               nbits / 8))
        esize = max(1, BITS[dt] // 8)
        if b % esize:
            probs.add("%s: %s: begins at %d, not a multiple of its element size %d"
                      % (tag, name, b, esize))
        pos = max(pos, e)
        out[name] = (dt, tuple(shape), data[buf + b:buf + e])
    if buf + pos != len(data):
        probs.add("%s: last offset %d + 8 + %d != file size %d" % (tag, pos, n, len(data)))
    if strict_order:
        want = sorted(entries, key=lambda x: (-ORDER[x[3]], x[2]))
        if [x[2] for x in want] != [x[2] for x in entries]:
            probs.add("%s: tensors not in the Rust writer order (dtype alignment desc, name)" % tag)
        keys = [k for k in hdr if k != "__metadata__"]
        if list(hdr)[:1] != ["__metadata__"] or keys != [x[2] for x in entries]:
            probs.add("%s: header keys not in __metadata__-first offset order" % tag)
    return out


def read_folder(d, probs, strict_order=False, what="OUT"):
    """Validate the file layout of a HF folder and return {name: (dtype, shape, bytes)}."""
    if not os.path.isdir(d):
        probs.add("%s: %s is not a directory" % (what, d))
        return {}
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    has_index = os.path.exists(os.path.join(d, INDEX))
    tensors = {}
    holder = {}
    if files == ["model.safetensors"]:
        if has_index:
            probs.add("%s: single model.safetensors but %s exists" % (what, INDEX))
        tensors = read_safetensors(os.path.join(d, "model.safetensors"), probs, strict_order)
        return tensors
    if not files:
        probs.add("%s: no .safetensors file" % what)
        return {}
    shards = [SHARD_RE.fullmatch(f) for f in files]
    if not all(shards):
        probs.add("%s: unexpected safetensors file names %s" % (what, files))
        return {}
    total = {int(m.group(2)) for m in shards}
    nums = sorted(int(m.group(1)) for m in shards)
    if len(total) != 1 or nums != list(range(1, total.copy().pop() + 1)):
        probs.add("%s: shard files are not model-0000K-of-0000N for K=1..N: %s" % (what, files))
    if len(files) == 1:
        probs.add("%s: a single shard must be named model.safetensors" % what)
    for f in files:
        part = read_safetensors(os.path.join(d, f), probs, strict_order)
        if not part:
            probs.add("%s: %s holds no tensors" % (what, f))
        for k, v in part.items():
            if k in tensors:
                probs.add("%s: tensor %s is in %s and %s" % (what, k, holder[k], f))
            tensors[k] = v
            holder[k] = f
    if not has_index:
        probs.add("%s: sharded output without %s" % (what, INDEX))
        return tensors
    try:
        with open(os.path.join(d, INDEX), encoding="utf-8") as fh:
            idx = json.load(fh, object_pairs_hook=_no_dupes)
    except ValueError as e:
        probs.add("%s: %s invalid: %s" % (what, INDEX, e))
        return tensors
    if not isinstance(idx, dict) or not isinstance(idx.get("metadata"), dict) or \
            not isinstance(idx.get("weight_map"), dict):
        probs.add("%s: %s needs 'metadata' and 'weight_map' objects" % (what, INDEX))
        return tensors
    size = sum(len(v[2]) for v in tensors.values())
    if idx["metadata"].get("total_size") != size:
        probs.add("%s: index metadata.total_size %r != sum of tensor bytes %d"
                  % (what, idx["metadata"].get("total_size"), size))
    if "total_parameters" in idx["metadata"]:
        params = 0
        for dt, shape, _ in tensors.values():
            n = 1
            for s in shape:
                n *= s
            params += n
        if idx["metadata"]["total_parameters"] != params:
            probs.add("%s: index metadata.total_parameters %r != %d"
                      % (what, idx["metadata"]["total_parameters"], params))
    wm = idx["weight_map"]
    for k, f in wm.items():
        if k not in tensors:
            probs.add("%s: weight_map names %s, which no shard holds" % (what, k))
        elif holder[k] != f:
            probs.add("%s: weight_map says %s is in %s, it is in %s" % (what, k, f, holder[k]))
    for k in tensors:
        if k not in wm:
            probs.add("%s: tensor %s (in %s) missing from weight_map" % (what, k, holder[k]))
    return tensors


def _first_diff(a, b, dt):
    esize = max(1, BITS.get(dt, 8) // 8)
    for i in range(0, min(len(a), len(b)), esize):
        if a[i:i + esize] != b[i:i + esize]:
            return "element %d: %s vs ref %s" % (i // esize, a[i:i + esize][::-1].hex(),
                                                 b[i:i + esize][::-1].hex())
    return "lengths %d vs %d" % (len(a), len(b))


def compare(out, ref, probs):
    for k in sorted(set(ref) - set(out)):
        probs.add("missing tensor %s" % k)
    for k in sorted(set(out) - set(ref)):
        probs.add("unexpected tensor %s" % k)
    for k in sorted(set(out) & set(ref)):
        (dt, sh, b), (rdt, rsh, rb) = out[k], ref[k]
        if dt != rdt or sh != rsh:
            probs.add("%s: %s%s vs ref %s%s" % (k, dt, list(sh), rdt, list(rsh)))
        elif b != rb:
            probs.add("%s: bytes differ (%s)" % (k, _first_diff(b, rb, dt)))


TORCH_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}


def config_for_weights(pairs, dtype):
    """HF config pairs with every dtype key naming `dtype` (text_config too); (pairs, changed)."""
    changed, out = False, []
    for k, v in pairs:
        if k in ("torch_dtype", "dtype") and isinstance(v, str) and dtype and v.replace("torch.", "") != dtype:
            v, changed = dtype, True
        elif k == "text_config" and isinstance(v, list) and all(isinstance(e, tuple) for e in v):
            v, sub = config_for_weights(v, dtype)
            changed = changed or sub
        out.append((k, v))
    return out, changed


def check_config(out_file, src_file, weights_dtype, probs):
    with open(out_file, "rb") as a, open(src_file, "rb") as b:
        got, src = a.read(), b.read()
    want, changed = config_for_weights(json.loads(src, object_pairs_hook=list), weights_dtype)
    if not changed and got != src:
        probs.add("HF file config.json differs from %s (its dtype already matches the weights)" % src_file)
    elif changed and json.loads(got, object_pairs_hook=list) != want:
        probs.add("config.json does not state the weights' dtype %s with every other key as in %s"
                  % (weights_dtype, src_file))


def compare_hf(out_dir, hf_dir, probs, weights_dtype=None, training=()):
    """Every non-weight file of HF_DIR copied into OUT unchanged, except the training-state files
    `training` names (names, or "dir/" prefixes), which must not be in OUT."""
    for root, _dirs, files in os.walk(hf_dir):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(root, f), hf_dir)
            if WEIGHT_FILE_RE.fullmatch(f):
                continue
            o = os.path.join(out_dir, rel)
            if any(rel == t or (t.endswith("/") and rel.startswith(t)) for t in training):
                if os.path.exists(o):
                    probs.add("training file %s was copied into OUT" % rel)
                continue
            if not os.path.isfile(o):
                probs.add("HF file %s missing from OUT" % rel)
                continue
            if rel == "config.json":
                check_config(o, os.path.join(root, f), weights_dtype, probs)
                continue
            with open(o, "rb") as a, open(os.path.join(root, f), "rb") as b:
                if a.read() != b.read():
                    probs.add("HF file %s differs from %s" % (rel, hf_dir))


def check(out_dir, ref_dir, hf_dir=None, strict_order=False, training=()):
    probs = Problems()
    out = read_folder(out_dir, probs, strict_order, "OUT")
    rprobs = Problems()
    ref = read_folder(ref_dir, rprobs, False, "REF")
    probs += ["REF invalid: " + p for p in rprobs]
    compare(out, ref, probs)
    if hf_dir:
        floating = {TORCH_NAMES.get(dt) for dt, _sh, _b in out.values() if dt in TORCH_NAMES}
        compare_hf(out_dir, hf_dir, probs, floating.pop() if len(floating) == 1 else None, training)
    return probs, len(out)


# ------------------------------------------------------------------------------------------------
# self test
# ------------------------------------------------------------------------------------------------


def _st_bytes(tensors, meta=None, pad=True, hole=0, order=None, lead=b"", extra=None,
              trail=b"", header_override=None):
    """tensors: list of (name, dtype, shape, bytes). Knobs build broken variants."""
    hdr = {"__metadata__": meta if meta is not None else {"format": "pt"}}
    if meta is False:
        del hdr["__metadata__"]
    off, blobs = 0, []
    for i, (name, dt, shape, b) in enumerate(tensors):
        if i == 1:
            off += hole
            blobs.append(b"\0" * hole)
        e = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        if extra and name == tensors[0][0]:
            e.update(extra)
        hdr[name] = e
        off += len(b)
        blobs.append(b)
    h = lead + json.dumps(hdr, separators=(",", ":")).encode() if header_override is None \
        else header_override
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    elif len(h) % 8 == 0:
        h += b" " * 3
    return struct.pack("<Q", len(h)) + h + b"".join(blobs) + trail


def _selftest():
    import random
    rnd = random.Random(7)

    def t(name, dt, shape):
        n = 1
        for s in shape:
            n *= s
        return (name, dt, shape, bytes(rnd.getrandbits(8) for _ in range(n * BITS[dt] // 8)))

    A = [t("a.weight", "F32", [3, 4]), t("b.bias", "F32", [5]), t("c.weight", "BF16", [2, 3])]
    base = tempfile.mkdtemp(prefix="check_hf_selftest_")
    failures = []

    def folder(name, files, index=None):
        d = os.path.join(base, name)
        os.makedirs(d)
        for fn, blob in files.items():
            with open(os.path.join(d, fn), "wb") as f:
                f.write(blob)
        if index is not None:
            with open(os.path.join(d, INDEX), "w") as f:
                json.dump(index, f, indent=2, sort_keys=True)
        return d

    def sharded_index(parts):
        wm, size = {}, 0
        for fn, ts in parts.items():
            for name, _dt, _sh, b in ts:
                wm[name] = fn
                size += len(b)
        return {"metadata": {"total_size": size}, "weight_map": wm}

    ref = folder("ref", {"model.safetensors": _st_bytes(A)})
    hf = folder("hf", {"config.json": b'{"a": 1}\n', "tokenizer.json": b"{}"})
    good_files = {"model.safetensors": _st_bytes(A), "config.json": b'{"a": 1}\n',
                  "tokenizer.json": b"{}"}
    p1 = {"model-00001-of-00002.safetensors": A[:2], "model-00002-of-00002.safetensors": A[2:]}
    sharded = {fn: _st_bytes(ts) for fn, ts in p1.items()}
    sharded.update({"config.json": b'{"a": 1}\n', "tokenizer.json": b"{}"})

    good = [("single file", folder("good1", good_files), None),
            ("two shards + index", folder("good2", sharded, sharded_index(p1)), None)]
    for label, d, _ in good:
        probs, _n = check(d, ref, hf)
        if probs:
            failures.append("good case '%s' rejected: %s" % (label, probs[:3]))

    flipped = list(A)
    nb = bytearray(A[0][3])
    nb[5] ^= 0x40
    flipped[0] = (A[0][0], A[0][1], A[0][2], bytes(nb))
    wrong_idx = sharded_index(p1)
    del wrong_idx["weight_map"]["b.bias"]
    bad_size = sharded_index(p1)
    bad_size["metadata"]["total_size"] += 4
    wrong_file = sharded_index(p1)
    wrong_file["weight_map"]["c.weight"] = "model-00001-of-00002.safetensors"
    dup = {"model-00001-of-00002.safetensors": _st_bytes(A[:2]),
           "model-00002-of-00002.safetensors": _st_bytes(A[1:])}
    dup_idx = sharded_index({"model-00001-of-00002.safetensors": A[:2],
                             "model-00002-of-00002.safetensors": A[2:]})
    hdr_dupkey = json.dumps({"__metadata__": {"format": "pt"},
                             "a.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}},
                            separators=(",", ":"))
    hdr_dupkey = (hdr_dupkey[:-1] + ',"a.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,48]}}'
                  ).encode()
    overlap = bytearray(_st_bytes(A))
    hlen = struct.unpack("<Q", overlap[:8])[0]
    htxt = overlap[8:8 + hlen].decode().replace('"data_offsets":[48,68]', '"data_offsets":[44,64]')
    overlap[8:8 + hlen] = htxt.encode()

    bad = [
        ("hole in offsets", {"model.safetensors": _st_bytes(A, hole=4)}, None),
        ("bad padding (not multiple of 8)", {"model.safetensors": _st_bytes(A, pad=False)}, None),
        ("leading whitespace", {"model.safetensors": _st_bytes(A, lead=b" ")}, None),
        ("missing __metadata__", {"model.safetensors": _st_bytes(A, meta=False)}, None),
        ("wrong __metadata__", {"model.safetensors": _st_bytes(A, meta={"format": "np"})}, None),
        ("extra key in entry", {"model.safetensors": _st_bytes(A, extra={"foo": 1})}, None),
        ("trailing bytes", {"model.safetensors": _st_bytes(A, trail=b"\0" * 8)}, None),
        ("overlapping offsets", {"model.safetensors": bytes(overlap)}, None),
        ("duplicate key", {"model.safetensors": _st_bytes(A[:1], header_override=hdr_dupkey)},
         None),
        ("unknown dtype", {"model.safetensors": _st_bytes([("a.weight", "F33", [3, 4],
                                                            A[0][3])] + A[1:])}, None),
        ("size mismatch", {"model.safetensors": _st_bytes([("a.weight", "F32", [3, 5],
                                                            A[0][3])] + A[1:])}, None),
        ("header too large", {"model.safetensors": struct.pack("<Q", MAX_HEADER + 8) + b"{}"},
         None),
        ("one flipped bit vs REF", {"model.safetensors": _st_bytes(flipped)}, None),
        ("missing tensor vs REF", {"model.safetensors": _st_bytes(A[:2])}, None),
        ("missing index entry", dict((k, v) for k, v in sharded.items() if "safetensors" in k),
         wrong_idx),
        ("index total_size wrong", dict((k, v) for k, v in sharded.items() if "safetensors" in k),
         bad_size),
        ("index points at wrong file",
         dict((k, v) for k, v in sharded.items() if "safetensors" in k), wrong_file),
        ("sharded without index",
         dict((k, v) for k, v in sharded.items() if "safetensors" in k), None),
        ("tensor in two files", dup, dup_idx),
        ("single file plus index", {"model.safetensors": _st_bytes(A)}, sharded_index(p1)),
        ("bad shard name", {"model-1-of-2.safetensors": _st_bytes(A[:2]),
                            "model-2-of-2.safetensors": _st_bytes(A[2:])}, None),
        ("missing HF file", {"model.safetensors": _st_bytes(A), "config.json": b'{"a": 1}\n'},
         None),
        ("changed HF file", {"model.safetensors": _st_bytes(A), "config.json": b'{"a": 2}\n',
                             "tokenizer.json": b"{}"}, None),
    ]
    for i, (label, files, index) in enumerate(bad):
        d = folder("bad%02d" % i, files, index)
        probs, _n = check(d, ref, hf)
        if not probs:
            failures.append("broken case '%s' was accepted" % label)
        else:
            print("rejected %-32s -> %s" % (label, probs[0]))
    shutil.rmtree(base)
    for f in failures:
        print("SELFTEST FAIL: " + f)
    if failures:
        return 1
    print("selftest OK: %d good accepted, %d broken rejected" % (len(good), len(bad)))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--ref")
    ap.add_argument("--hf")
    ap.add_argument("--hf-training", action="append", default=[],
                    help="a file (or dir/ prefix) of --hf that is training state: must not be copied")
    ap.add_argument("--strict-order", action="store_true",
                    help="also require the Rust writer's tensor order inside each file")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args(argv)
    if a.selftest:
        return _selftest()
    if not a.out or not a.ref:
        ap.error("--out and --ref are required")
    probs, n = check(a.out, a.ref, a.hf, a.strict_order, a.hf_training)
    if probs:
        for p in probs[:MAX_REPORT]:
            print(p)
        if len(probs) > MAX_REPORT:
            print("... %d more problem(s)" % (len(probs) - MAX_REPORT))
        return 1
    print("OK %d tensors" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
