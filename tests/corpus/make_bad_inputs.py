#!/usr/bin/python3
"""Build the corpus of bad inputs: each case is a good generated checkpoint damaged in one
precise way, with the exact text vmerge's error message must contain.

    /usr/bin/python3 tests/corpus/make_bad_inputs.py OUT_DIR [--fsdp DIR] [--megatron DIR]

--fsdp / --megatron: folders already written by tests/fixtures/make_fsdp_fixtures.py and
make_megatron_fixtures.py (ctest's build/fixtures/{fsdp,megatron}); when left out, the
generators are run into OUT_DIR/.good/ first (needs Debian's torch, hence /usr/bin/python3).

OUT_DIR/corpus.json: {name: {"local_dir": absolute path, "args": [extra merge arguments],
"error": [substrings the one error line (and what follows it) must contain], "notes": ...}}.
Every expected text names the damaged file plus the offset, key or expectation that is wrong;
the offsets are computed here from the damaged bytes, not copied from vmerge's output.
Only the standard library is used for the damage (zip and pickle bytes are patched by hand);
the DCP cases re-chunk the good folder with tests/fixtures/dcp_writer.py (torch).
"""
import argparse
import json
import os
import pickletools
import shutil
import struct
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES_SRC = os.path.join(os.path.dirname(HERE), "fixtures")

CASES = {}


def case(name, local_dir, error, notes, args=()):
    CASES[name] = {"local_dir": os.path.abspath(local_dir), "args": list(args),
                   "error": error if isinstance(error, list) else [error], "notes": notes}


# ---------------------------------------------------------------------------------------------
# ZIP helpers
# ---------------------------------------------------------------------------------------------

def zip_layout(path):
    """(file size, EOCD offset, ZIP64 locator offset or None, central directory offset, size)."""
    data = open(path, "rb").read()
    eocd = data.rfind(b"PK\x05\x06")
    assert eocd >= 0, path
    cd_size, cd_offset = struct.unpack_from("<II", data, eocd + 12)
    locator = eocd - 20 if data[eocd - 20:eocd - 16] == b"PK\x06\x07" else None
    if locator is not None:
        zip64 = struct.unpack_from("<Q", data, locator + 8)[0]
        assert data[zip64:zip64 + 4] == b"PK\x06\x06"
        cd_size, cd_offset = struct.unpack_from("<QQ", data, zip64 + 40)
    return len(data), eocd, locator, cd_offset, cd_size


def rewrite_zip(path, replace=None, deflate=()):
    """Rewrites a torch archive record by record (stored, or deflated for names in `deflate`);
    `replace` maps a record name to its new bytes."""
    replace = replace or {}
    with zipfile.ZipFile(path) as z:
        records = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    os.remove(path)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in records:
            method = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(name), replace.get(name, data), compress_type=method)


def record_name(path, suffix):
    with zipfile.ZipFile(path) as z:
        return next(n for n in z.namelist() if n.endswith(suffix))


def read_record(path, suffix):
    with zipfile.ZipFile(path) as z:
        return z.read(record_name(path, suffix))


# ---------------------------------------------------------------------------------------------
# Pickle helpers: ops with byte positions; a change splices new bytes for one op (protocol 2
# pickles as torch writes them have no FRAME, so lengths may change freely).
# ---------------------------------------------------------------------------------------------

def ops_of(pkl):
    ops = list(pickletools.genops(pkl))
    out = []
    for i, (op, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else len(pkl)
        out.append((op.name, arg, pos, end))
    return out


def splice(pkl, op, new_bytes):
    _, _, pos, end = op
    return pkl[:pos] + new_bytes + pkl[end:]


def int_op(value):
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if -2**31 <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes(9, "little", signed=True).rstrip(b"\x00")
    return b"\x8a" + bytes([len(raw)]) + raw


def first_dense_tensor(ops):
    """The ops of the first _rebuild_tensor_v2 call: (persid tuple ints, offset op, size ops,
    stride ops). Layout: GLOBAL, BINPUT, MARK, persid..., BINPERSID, offset, size..., TUPLEn,
    BINPUT, stride..., TUPLEn."""
    g = next(i for i, o in enumerate(ops)
             if o[0] == "GLOBAL" and o[1] == "torch._utils _rebuild_tensor_v2")
    p = next(i for i in range(g, len(ops)) if ops[i][0] == "BINPERSID")
    numel_op = ops[p - 3]  # ..., numel, TUPLE, BINPUT, BINPERSID
    assert numel_op[0].startswith("BININT"), numel_op
    i = p + 1
    offset = ops[i]
    i += 1
    size = []
    while ops[i][0].startswith("BININT"):
        size.append(ops[i])
        i += 1
    assert ops[i][0].startswith("TUPLE") and ops[i + 1][0].startswith("BINPUT"), ops[i]
    i += 2
    stride = []
    while ops[i][0].startswith("BININT"):
        stride.append(ops[i])
        i += 1
    return numel_op, offset, size, stride


def storage_key_of_first_tensor(ops):
    g = next(i for i, o in enumerate(ops)
             if o[0] == "GLOBAL" and o[1] == "torch._utils _rebuild_tensor_v2")
    p = next(i for i in range(g, len(ops)) if ops[i][0] == "BINPERSID")
    return ops[p - 7][1]  # MARK 'storage' BINPUT class BINPUT key BINPUT location BINPUT numel


def patch_data_pkl(path, change):
    name = record_name(path, "/data.pkl")
    with zipfile.ZipFile(path) as z:
        pkl = z.read(name)
    rewrite_zip(path, replace={name: change(pkl)})


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------

def copy_case(src, dst):
    shutil.copytree(src, dst, symlinks=False)
    return dst


def fsdp_cases(good, out):
    w2 = os.path.join(good, "w2_bf16")
    r0, r1 = "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"

    # --- ZIP level ---
    d = copy_case(w2, os.path.join(out, "zip_truncated_mid_central_dir"))
    f = os.path.join(d, r1)
    size, _, _, cd_offset, cd_size = zip_layout(f)
    cut = cd_offset + cd_size // 2
    os.truncate(f, cut)
    tail = min(cut, 22 + 0xFFFF)
    case("zip_truncated_mid_central_dir", d,
         f"{r1}: ZIP archive, byte {cut - tail} of {cut}: no end-of-central-directory record "
         f"in the last {tail} bytes (a truncated file",
         f"rank 1 file cut at byte {cut}, in the middle of its central directory")

    d = copy_case(w2, os.path.join(out, "zip_bad_central_dir_signature"))
    f = os.path.join(d, r0)
    size, _, _, cd_offset, _ = zip_layout(f)
    with open(f, "r+b") as h:
        h.seek(cd_offset)
        h.write(b"PK\x09\x09")
    case("zip_bad_central_dir_signature", d,
         f"{r0}: ZIP archive, byte {cd_offset} of {size}: no central directory signature for entry #0",
         "first central directory entry's signature overwritten")

    d = copy_case(w2, os.path.join(out, "zip64_eocd_offset_past_end"))
    f = os.path.join(d, r1)
    size, _, locator, _, _ = zip_layout(f)
    bad = size + 4096
    with open(f, "r+b") as h:
        h.seek(locator + 8)
        h.write(struct.pack("<Q", bad))
    case("zip64_eocd_offset_past_end", d,
         f"{r1}: ZIP archive, byte {locator} of {size}: ZIP64 locator points to offset {bad}, "
         "outside the archive before the locator",
         "ZIP64 locator's record offset set past the end of the file")

    d = copy_case(w2, os.path.join(out, "zip_deflated_data_pkl"))
    f = os.path.join(d, r0)
    name = record_name(f, "/data.pkl")
    rewrite_zip(f, deflate={name})
    case("zip_deflated_data_pkl", d,
         f"{r0}: ZIP archive, byte {zip_layout(f)[3]} of {os.path.getsize(f)}: record '{name}' is "
         "compressed (method 8)",
         "data.pkl stored with deflate (the first central directory entry)")

    # --- pickle level ---
    d = copy_case(w2, os.path.join(out, "pickle_unknown_opcode"))
    f = os.path.join(d, r0)
    patch_data_pkl(f, lambda p: p[:2] + b"\xff" + p[2:])
    case("pickle_unknown_opcode", d, f"{r0}:data.pkl: pickle opcode 0xff at byte 2: unknown opcode",
         "byte 0xff inserted right after PROTO 2")

    depth = 1000
    d = copy_case(w2, os.path.join(out, "pickle_depth_bomb"))
    f = os.path.join(d, r1)
    patch_data_pkl(f, lambda p: b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
    # The 200th APPEND would put a 200-deep list into another.
    case("pickle_depth_bomb", d,
         f"{r1}:data.pkl: pickle opcode 0x61 at byte {2 + depth + 199}: values nested deeper "
         "than 200 levels",
         f"data.pkl replaced by {depth} empty lists appended into each other")

    memo = (1 << 22) + 1
    d = copy_case(w2, os.path.join(out, "pickle_memo_bomb"))
    f = os.path.join(d, r0)
    bomb = b"".join(b"r" + struct.pack("<I", 0xFFFFFFFF - i) for i in range(memo))
    patch_data_pkl(f, lambda p: b"\x80\x02N" + bomb + b".")
    case("pickle_memo_bomb", d,
         f"{r0}:data.pkl: pickle opcode 0x72 at byte {3 + 5 * (memo - 1)}: more than 4194304 "
         "memo entries",
         f"data.pkl replaced by {memo} LONG_BINPUTs of None at indices 0xFFFFFFFF downwards")

    d = copy_case(w2, os.path.join(out, "pickle_giant_binunicode"))
    f = os.path.join(d, r1)
    pkl = read_record(f, "/data.pkl")
    op = next(o for o in ops_of(pkl) if o[0] == "BINUNICODE")
    left = len(pkl) - op[2] - 5
    patch_data_pkl(f, lambda p: p[:op[2] + 1] + struct.pack("<I", 0xFFFFFFF0) + p[op[2] + 5:])
    case("pickle_giant_binunicode", d,
         f"{r1}:data.pkl: pickle opcode 0x58 at byte {op[2]}: BINUNICODE text of 4294967280 bytes "
         f"runs past the end of the pickle ({left} bytes left)",
         "first BINUNICODE (a state dict key) declares 0xFFFFFFF0 bytes")

    # --- torch level (the first tensor: model.embed_tokens.weight's local [32, 32] bf16 shard,
    # stride [32, 1], offset 0, in a 1024-element storage) ---
    key = "model.embed_tokens.weight"
    where = f"{r0}:data.pkl key '{key}' (_local_tensor)"
    pkl = read_record(os.path.join(w2, r0), "/data.pkl")
    ops = ops_of(pkl)
    numel_op, offset_op, size_ops, stride_ops = first_dense_tensor(ops)
    storage = storage_key_of_first_tensor(ops)
    n = numel_op[1]
    rows, cols = size_ops[0][1], size_ops[1][1]
    assert (n, rows, cols, offset_op[1]) == (1024, 32, 32, 0), (n, rows, cols, offset_op)

    d = copy_case(w2, os.path.join(out, "tensor_offset_past_storage"))
    patch_data_pkl(os.path.join(d, r0), lambda p: splice(p, offset_op, int_op(n)))
    case("tensor_offset_past_storage", d,
         f"{where}: tensor [32, 32] with stride [32, 1] at offset {n} reaches byte "
         f"{(n + rows * cols) * 2} of a {n * 2}-byte storage data/{storage}",
         "storage offset of the first tensor set to its storage's numel")

    d = copy_case(w2, os.path.join(out, "tensor_negative_shape"))
    patch_data_pkl(os.path.join(d, r0), lambda p: splice(p, size_ops[0], int_op(-1)))
    case("tensor_negative_shape", d, f"{where}: size has a negative value -1 at index 0",
         "size[0] of the first tensor set to -1")

    # (rows - 1) * stride wraps around 2^64 to 15: a 64-bit extent check that wraps accepts it.
    big = -(-(1 << 64) // (rows - 1))
    assert ((rows - 1) * big) % (1 << 64) == 15 and big < (1 << 63)
    d = copy_case(w2, os.path.join(out, "tensor_stride_overflow"))
    patch_data_pkl(os.path.join(d, r0), lambda p: splice(p, stride_ops[0], int_op(big)))
    case("tensor_stride_overflow", d,
         f"{where}: tensor [32, 32] with stride [{big}, 1] at offset 0: its extent overflows 64 bits",
         "stride[0] of the first tensor set so that (rows-1)*stride wraps around 2^64")

    d = copy_case(w2, os.path.join(out, "storage_shorter_than_declared"))
    f = os.path.join(d, r0)
    data_name = record_name(f, f"/data/{storage}")
    data = read_record(f, f"/data/{storage}")
    rewrite_zip(f, replace={data_name: data[:len(data) // 2]})
    case("storage_shorter_than_declared", d,
         f"{where}: storage record data/{storage} holds {len(data) // 2} bytes, but the pickle "
         f"declares {n} elements of torch.BFloat16Storage ({n * 2} bytes)",
         "first storage record cut to half its bytes (the pickle still declares the full numel)")

    # Two keys with one name: the second state-dict key renamed to the first.
    d = copy_case(w2, os.path.join(out, "duplicate_key"))
    f = os.path.join(d, r1)
    pkl = read_record(f, "/data.pkl")
    keys = [o for o in ops_of(pkl) if o[0] == "BINUNICODE" and o[1].startswith("model.")]
    second = keys[1]
    patch_data_pkl(f, lambda p: splice(p, second, b"X" + struct.pack("<I", len(keys[0][1])) +
                                       keys[0][1].encode()))
    case("duplicate_key", d,
         f"{r1}: key '{keys[0][1]}' appears twice",
         f"state dict key '{second[1]}' renamed to '{keys[0][1]}'")

    # Rank 1 of another model: same keys, dtypes and world size, but a 63-row embedding.
    d = copy_case(os.path.join(good, "keep_fp32_w2"), os.path.join(out, "ranks_of_two_checkpoints"))
    shutil.copy(os.path.join(good, "noncontig_w2", r1), os.path.join(d, r1))
    case("ranks_of_two_checkpoints", d,
         [f"{r1}", f"{r0}", "model.embed_tokens.weight"],
         "keep_fp32_w2 with rank 1 of noncontig_w2 (63-row embedding)")


def megatron_cases(good, out):
    # A config.json that does not fit the tensors: hidden_size 32 -> 64.
    d = copy_case(os.path.join(good, "verl_llama_tp2_pp1"), os.path.join(out, "config_hidden_size_changed"))
    cfg_path = os.path.join(d, "actor", "huggingface", "config.json")
    cfg = json.load(open(cfg_path))
    assert cfg["hidden_size"] == 32
    cfg["hidden_size"] = 64
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    case("config_hidden_size_changed", os.path.join(d, "actor"),
         ["huggingface/config.json (LlamaForCausalLM) implies:",
          "model.embed_tokens.weight [100, 32] (config.json implies [100, 64])"],
         "verl Megatron TP=2 case with hidden_size changed from 32 to 64 in config.json")

    d = copy_case(os.path.join(good, "verl_llama_tp2_pp1"), os.path.join(out, "config_unknown_arch"))
    cfg_path = os.path.join(d, "actor", "huggingface", "config.json")
    cfg = json.load(open(cfg_path))
    cfg["architectures"] = ["FooForCausalLM"]
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    case("config_unknown_arch", os.path.join(d, "actor"),
         "huggingface/config.json: unknown architecture FooForCausalLM; supported: LlamaForCausalLM",
         "architectures set to ['FooForCausalLM']")

    # DCP: re-chunk the good uneven folder with one chunk of the embedding dropped / grown.
    sys.path.insert(0, FIXTURES_SRC)
    import dcp_writer as dw  # noqa: E402  (torch)
    src = os.path.join(good, "dcp_qwen2_uneven")
    tensors, _, meta = dw.read_dcp(os.path.join(src, "dcp"), return_metadata=True)
    rank_of = {}
    for k, v in meta.storage_data.items():
        off = getattr(k, "offset", None)
        rank_of[(k.fqn, tuple(off) if off is not None else None)] = int(
            v.relative_path.split("_")[2])
    emb = "model.model.embed_tokens.weight"

    def chunks_of(fqn, damage):
        md = meta.state_dict_metadata[fqn]
        out_chunks = []
        for i, ch in enumerate(md.chunks):
            offs, sizes = list(ch.offsets), list(ch.sizes)
            if fqn == emb and i == 1:
                if damage == "missing":
                    continue
                offs[0] -= 1  # one row earlier: row offs[0] is also in chunk 0
                sizes[0] += 1
            box = tuple(slice(o, o + s) for o, s in zip(offs, sizes))
            out_chunks.append((rank_of[(fqn, tuple(ch.offsets))], tuple(offs),
                               tensors[fqn][box].clone()))
        return out_chunks

    for damage, text in (("missing", "the shards cover 2144 of 3200 elements of [100, 32]"),
                         ("overlap", "the shards cover 3232 of 3200 elements of [100, 32]")):
        name = "dcp_chunk_" + damage
        d = copy_case(src, os.path.join(out, name))
        shutil.rmtree(os.path.join(d, "reference"))
        md = meta.state_dict_metadata[emb]
        assert [tuple(c.offsets)[0] for c in md.chunks] == [0, 25, 58], [c.offsets for c in md.chunks]
        dw.write_dcp(os.path.join(d, "dcp"),
                     [(fqn, tuple(meta.state_dict_metadata[fqn].size), chunks_of(fqn, damage))
                      for fqn in meta.state_dict_metadata],
                     None, files_per_rank=1, world_size=3, planner_data="first_dot")
        case(name, os.path.join(d, "dcp"), f"dcp/.metadata: {emb}: {text}",
             f"dcp_qwen2_uneven with chunk 1 of {emb} " +
             ("left out" if damage == "missing" else "starting one row early (rows 24..57)"),
             args=["--hf_config", os.path.join(d, "hf")])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--fsdp", help="folder of make_fsdp_fixtures.py output")
    ap.add_argument("--megatron", help="folder of make_megatron_fixtures.py output")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    fsdp, megatron = a.fsdp, a.megatron
    if not fsdp:
        fsdp = os.path.join(out, ".good", "fsdp")
        subprocess.run([sys.executable, os.path.join(FIXTURES_SRC, "make_fsdp_fixtures.py"), fsdp],
                       check=True, stdout=subprocess.DEVNULL)
    if not megatron:
        megatron = os.path.join(out, ".good", "megatron")
        subprocess.run([sys.executable, os.path.join(FIXTURES_SRC, "make_megatron_fixtures.py"),
                        megatron, "--cases", "verl_llama_tp2_pp1,dcp_qwen2_uneven"],
                       check=True, stdout=subprocess.DEVNULL)
    fsdp_cases(fsdp, out)
    megatron_cases(megatron, out)
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump(CASES, f, indent=2)
    print(f"{len(CASES)} bad inputs in {out}")


if __name__ == "__main__":
    main()
