"""Corpus cases of ZIP integrity and byte-level truth: records that overlap, local headers that
disagree with the central directory, bytes that fail their CRC-32 (tensor data, data.pkl, the
central directory's CRC, bytes split over ranks or never copied), and state dicts whose names or
shapes no safetensors header can hold. Expected CRCs come from Python's zlib.crc32."""
import json
import os
import struct
import zipfile
import zlib

from corpus_lib import (case, copy_case, first_dense_tensor, int_op, ops_of, patch_data_pkl,
                        read_record, record_name, rewrite_zip, splice, zip_layout)

R0, R1 = "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"


def add_cases(good_fsdp, good_megatron, out):
    overlap_cases(good_fsdp, out)
    local_header_cases(good_fsdp, out)
    crc_cases(good_fsdp, good_megatron, out)
    name_and_shape_cases(good_fsdp, out)


# ---------------------------------------------------------------------------------------------
# ZIP layout, read the way the format says (not the way vmerge does)
# ---------------------------------------------------------------------------------------------

def central_entries(path):
    """{name: {entry, local, size, crc}}: offsets of each central directory entry and its local
    header, the stored size and CRC (32-bit fields; the fixtures need no ZIP64 extra)."""
    data = open(path, "rb").read()
    _, _, _, cd_offset, cd_size = zip_layout(path)
    out, pos = {}, cd_offset
    while pos < cd_offset + cd_size:
        assert data[pos:pos + 4] == b"PK\x01\x02"
        crc, comp, size = struct.unpack_from("<III", data, pos + 16)
        n, e, c = struct.unpack_from("<HHH", data, pos + 28)
        local = struct.unpack_from("<I", data, pos + 42)[0]
        assert 0xFFFFFFFF not in (comp, size, local)
        name = data[pos + 46:pos + 46 + n].decode()
        out[name] = {"entry": pos, "local": local, "size": size, "crc": crc}
        pos += 46 + n + e + c
    return out


def local_data_offset(path, local):
    with open(path, "rb") as f:
        f.seek(local)
        header = f.read(30)
    assert header[:4] == b"PK\x03\x04"
    n, e = struct.unpack_from("<HH", header, 26)
    return local + 30 + n + e


def patch(path, offset, new_bytes):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(new_bytes)


def flip(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


def crc_message(file_name, record, size, offset, computed, expected):
    record = record.split("/", 1)[1]  # named inside the archive prefix, as the pickle names storages
    return (f"{file_name}: ZIP record '{record}' ({size} bytes at byte {offset}): CRC-32 of its bytes is "
            f"0x{computed:08x} but the central directory says 0x{expected:08x}")


def flipped_record_case(name, src, rel_file, suffix, at, notes, np=2, args=(), pass_text="", local_dir=None):
    """Copies `src` to the case, flips bit 0 of byte `at` of record `suffix` in `rel_file`, and
    expects the CRC error with both CRCs (computed here with zlib) and the pass that found it."""
    d = copy_case(src, os.path.join(out_dir[0], name))
    f = os.path.join(d, rel_file)
    record = record_name(f, suffix)
    good = read_record(f, suffix)
    entry = central_entries(f)[record]
    offset = local_data_offset(f, entry["local"])
    assert 0 <= at < len(good) and entry["crc"] == zlib.crc32(good)
    flip(f, offset + at)
    bad = good[:at] + bytes([good[at] ^ 1]) + good[at + 1:]
    texts = [crc_message(rel_file, record, len(good), offset, zlib.crc32(bad), zlib.crc32(good))]
    if pass_text:
        texts.append(pass_text)
    case(name, os.path.join(d, local_dir) if local_dir else d, texts, notes, np=np, args=args)
    return d


out_dir = [None]


# ---------------------------------------------------------------------------------------------
# Overlapping records
# ---------------------------------------------------------------------------------------------

def span(path, entries, name):
    e = entries[name]
    return e["local"], local_data_offset(path, e["local"]) + e["size"]


def overlap_cases(good, out):
    out_dir[0] = out
    w2 = os.path.join(good, "w2_bf16")

    # Entry data/1 points at data/0's local header: both records claim the same bytes.
    d = copy_case(w2, os.path.join(out, "zip_two_entries_one_local_header"))
    f = os.path.join(d, R0)
    entries = central_entries(f)
    prefix = record_name(f, "/data.pkl").split("/")[0]
    a, b = f"{prefix}/data/0", f"{prefix}/data/1"
    patch(f, entries[b]["entry"] + 42, struct.pack("<I", entries[a]["local"]))
    start = entries[a]["local"]
    header_end = local_data_offset(f, start)
    end_a, end_b = header_end + entries[a]["size"], header_end + entries[b]["size"]
    assert end_b < end_a
    # Sorted by (begin, end): b's shorter span comes first, a is reported as overlapping it.
    case("zip_two_entries_one_local_header", d,
         f"{R0}: ZIP archive, byte {start} of {os.path.getsize(f)}: record '{a}' (bytes {start}..{end_a}) "
         f"overlaps record '{b}' (bytes {start}..{end_b})",
         "central directory entry of data/1 given data/0's local header offset")

    # data/0's sizes grown by 20 bytes: its data runs over the next record's local header.
    d = copy_case(w2, os.path.join(out, "zip_data_runs_into_next_record"))
    f = os.path.join(d, R1)
    entries = central_entries(f)
    prefix = record_name(f, "/data.pkl").split("/")[0]
    a, b = f"{prefix}/data/0", f"{prefix}/data/1"
    grown = entries[a]["size"] + 20
    patch(f, entries[a]["entry"] + 20, struct.pack("<II", grown, grown))
    begin_a, end_a = entries[a]["local"], local_data_offset(f, entries[a]["local"]) + grown
    begin_b, end_b = span(f, entries, b)
    assert begin_a < begin_b < end_a, (begin_a, begin_b, end_a)
    case("zip_data_runs_into_next_record", d,
         f"{R1}: ZIP archive, byte {begin_b} of {os.path.getsize(f)}: record '{b}' (bytes {begin_b}..{end_b}) "
         f"overlaps record '{a}' (bytes {begin_a}..{end_a})",
         "data/0's compressed and uncompressed sizes in the central directory grown by 20 bytes")

    # The last record's data runs into the central directory.
    d = copy_case(w2, os.path.join(out, "zip_record_into_central_directory"))
    f = os.path.join(d, R0)
    entries = central_entries(f)
    size, _, _, cd_offset, _ = zip_layout(f)
    last = max(entries, key=lambda n: entries[n]["local"])
    begin = entries[last]["local"]
    data_at = local_data_offset(f, begin)
    grown = cd_offset - data_at + 4
    patch(f, entries[last]["entry"] + 20, struct.pack("<II", grown, grown))
    case("zip_record_into_central_directory", d,
         f"{R0}: ZIP archive, byte {begin} of {size}: record '{last}' (bytes {begin}..{data_at + grown}) "
         f"overlaps the central directory (bytes {cd_offset}..{size})",
         f"sizes of the last record ({last}) grown to end 4 bytes into the central directory")


# ---------------------------------------------------------------------------------------------
# Local headers that disagree with the central directory
# ---------------------------------------------------------------------------------------------

def local_header_cases(good, out):
    w2 = os.path.join(good, "w2_bf16")

    d = copy_case(w2, os.path.join(out, "zip_local_name_differs"))
    f = os.path.join(d, R1)
    entries = central_entries(f)
    prefix = record_name(f, "/data.pkl").split("/")[0]
    name = f"{prefix}/data/3"
    local = entries[name]["local"]
    patch(f, local + 30 + len(name) - 1, b"9")
    case("zip_local_name_differs", d,
         f"{R1}: ZIP archive, byte {local} of {os.path.getsize(f)}: local header of record '{name}' says name "
         f"'{name[:-1]}9', the central directory '{name}'",
         "last character of data/3's name in its local header changed to '9'")

    d = copy_case(w2, os.path.join(out, "zip_local_method_differs"))
    f = os.path.join(d, R0)
    entries = central_entries(f)
    prefix = record_name(f, "/data.pkl").split("/")[0]
    name = f"{prefix}/data/2"
    local = entries[name]["local"]
    patch(f, local + 8, struct.pack("<H", 8))
    case("zip_local_method_differs", d,
         f"{R0}: ZIP archive, byte {local} of {os.path.getsize(f)}: local header of record '{name}' says method 8, "
         "the central directory 0",
         "data/2's local header method set to 8 (deflate); the central directory still says stored")

    # Python's zipfile writes sizes and CRCs in the local headers (no data descriptors): one
    # size there made one byte larger than the central directory's.
    d = copy_case(w2, os.path.join(out, "zip_local_size_differs"))
    f = os.path.join(d, R1)
    rewrite_zip(f)
    entries = central_entries(f)
    prefix = record_name(f, "/data.pkl").split("/")[0]
    name = f"{prefix}/data/4"
    local = entries[name]["local"]
    flags, = struct.unpack_from("<H", open(f, "rb").read(), local + 6)
    assert flags & 8 == 0, hex(flags)
    patch(f, local + 22, struct.pack("<I", entries[name]["size"] + 1))
    case("zip_local_size_differs", d,
         f"{R1}: ZIP archive, byte {local} of {os.path.getsize(f)}: local header of record '{name}' says size "
         f"{entries[name]['size'] + 1}, the central directory {entries[name]['size']}",
         "file rewritten by zipfile (local sizes filled in), then data/4's local uncompressed size + 1")


# ---------------------------------------------------------------------------------------------
# CRC-32 mismatches
# ---------------------------------------------------------------------------------------------

def crc_cases(good_fsdp, good_megatron, out):
    w2 = os.path.join(good_fsdp, "w2_bf16")
    copying, joined = "checked while copying", "checked after the copy, over every rank's reads"

    flipped_record_case("crc_flipped_tensor_byte", w2, R0, "/data/0", 1000,
                        "bit 0 of byte 1000 of rank 0's data/0 (model.embed_tokens.weight's shard) flipped",
                        pass_text=copying)

    flipped_record_case("crc_flipped_tensor_byte_np1", w2, R1, "/data/27", 5,
                        "bit 0 of byte 5 of rank 1's last data record flipped, merged by one rank",
                        np=1, pass_text=copying)

    # data.pkl still parses (a byte of a key's text), but its CRC is checked before parsing.
    pkl = read_record(os.path.join(w2, R1), "/data.pkl")
    key = next(o for o in ops_of(pkl) if o[0] == "BINUNICODE" and o[1].startswith("model."))
    at = key[2] + 5 + len("model.")  # the first character after "model."
    flipped_record_case("crc_flipped_data_pkl_byte", w2, R1, "/data.pkl", at,
                        f"bit 0 of the character after 'model.' in key '{key[1]}' of rank 1's data.pkl flipped",
                        pass_text="checked while scanning")

    # The data is right, the central directory's CRC is not.
    d = copy_case(w2, os.path.join(out, "crc_flipped_in_central_directory"))
    f = os.path.join(d, R0)
    record = record_name(f, "/data/5")
    entry = central_entries(f)[record]
    data = read_record(f, "/data/5")
    patch(f, entry["entry"] + 16, struct.pack("<I", entry["crc"] ^ 0x80000000))
    case("crc_flipped_in_central_directory", d,
         [crc_message(R0, record, len(data), local_data_offset(f, entry["local"]), zlib.crc32(data),
                      zlib.crc32(data) ^ 0x80000000), copying],
         "top bit of data/5's CRC-32 in the central directory flipped (the data is intact)")

    # Megatron, 3 ranks over 2 TP files.
    meg = os.path.join(good_megatron, "verl_llama_tp2_pp1")
    flipped_record_case("crc_flipped_megatron_byte", meg, "actor/model/mp_rank_01/model.pt", "/data/0", 3000,
                        "bit 0 of byte 3000 of TP rank 1's data/0 (its embedding half) flipped; 3 ranks",
                        np=3, local_dir="actor", pass_text=copying)

    # One record read by several ranks: model.embed_tokens.weight (rank 0's data/0, 32 rows) is
    # split by rows over 8 ranks, so no rank reads it whole; the join on rank 0 finds the byte.
    flipped_record_case("crc_flipped_byte_split_over_ranks", w2, R0, "/data/0", 2040,
                        "bit 0 of byte 2040 (the last row) of rank 0's data/0, a record 8 ranks read in parts",
                        np=8, pass_text=joined)

    # Megatron-LM pads the vocabulary to 256 rows: rows 100..127 of TP rank 0's embedding are
    # never copied; rank 0 reads them after the copy to complete the record's CRC.
    mlm = os.path.join(good_megatron, "mlm_llama_tp2_pp2")
    if os.path.isdir(mlm):
        row = 110
        flipped_record_case("crc_flipped_byte_in_vocab_padding", mlm,
                            "ckpt/iter_0000020/mp_rank_00_000/model_optim_rng.pt", "/data/0", row * 32 * 2 + 7,
                            f"bit 0 of a byte in padded vocabulary row {row} (not copied) of TP rank 0's embedding",
                            np=2, local_dir="ckpt", pass_text=joined,
                            args=["--hf_config", os.path.join(out, "crc_flipped_byte_in_vocab_padding", "hf")])


# ---------------------------------------------------------------------------------------------
# Names and shapes a safetensors header cannot hold
# ---------------------------------------------------------------------------------------------

def rename_key(pkl, old, new):
    op = next(o for o in ops_of(pkl) if o[0] == "BINUNICODE" and o[1] == old)
    return splice(pkl, op, b"X" + struct.pack("<I", len(new)) + new.encode())


def name_and_shape_cases(good, out):
    w2 = os.path.join(good, "w2_bf16")
    d = copy_case(w2, os.path.join(out, "state_dict_key_metadata"))
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), lambda p: rename_key(p, "model.norm.weight", "__metadata__"))
    case("state_dict_key_metadata", d, "'__metadata__'",
         "state dict key model.norm.weight renamed to __metadata__ in both rank files")

    # 2^62 elements in 0 bytes: each plain rank shard of model.embed_tokens.weight becomes a
    # [2^30, 2^31] view with stride [0, 0] of a storage of numel 0 (it reaches only the first
    # element, so it "fits"); concatenated, [2^31, 2^31] float32 needs 2^64 bytes.
    d = copy_case(os.path.join(good, "plain_w2"), os.path.join(out, "shape_2p62_elements_in_0_bytes"))
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), huge_view)
    # An architecture without a tensor table: the config check (which would refuse the shape
    # first) is skipped, so the safetensors header rule is what must refuse it.
    cfg_path = os.path.join(d, "huggingface", "config.json")
    cfg = json.load(open(cfg_path))
    cfg["architectures"] = ["UntabledForCausalLM"]
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    case("shape_2p62_elements_in_0_bytes", d,
         "model.safetensors: safetensors header: tensor 'model.embed_tokens.weight': shape "
         f"[{2**31}, {2**31}] of F32 has more than 2^63 elements or 2^64 bytes",
         "plain_w2: first tensor of each rank: size [2^30, 2^31], stride [0, 0], storage numel 0")


def long_op(value):
    """LONG1 with room for the sign bit (corpus_lib.int_op drops it for 2^31 <= value < 2^32)."""
    n = (value.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + value.to_bytes(n, "little", signed=True)


def huge_view(pkl):
    numel_op, _, size_ops, stride_ops = first_dense_tensor(ops_of(pkl))
    assert len(size_ops) == 2 and numel_op[1] == 1024, (numel_op, size_ops)
    edits = [(numel_op, int_op(0)), (size_ops[0], long_op(2**30)), (size_ops[1], long_op(2**31)),
             (stride_ops[0], int_op(0)), (stride_ops[1], int_op(0))]
    for op, new in sorted(edits, key=lambda e: -e[0][2]):  # from the end: earlier positions hold
        pkl = splice(pkl, op, new)
    return pkl
