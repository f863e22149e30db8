"""Corpus cases of the parsers: ZIP, pickle and torch tensor records damaged in one place,
a config that does not fit, DCP chunks that miss or overlap."""
import json
import os
import shutil
import struct
import sys

from corpus_lib import (FIXTURES_SRC, case, copy_case, first_dense_tensor, int_op, ops_of,
                        patch_data_pkl, read_record, record_name, rewrite_zip, splice,
                        storage_key_of_first_tensor, zip_layout)


def add_cases(good_fsdp, good_megatron, out):
    fsdp_cases(good_fsdp, out)
    megatron_cases(good_megatron, out)


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


