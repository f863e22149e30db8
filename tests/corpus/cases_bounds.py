"""Corpus cases of hangs, crashes and unbounded numbers: a FIFO or device where vmerge expects
a file (it must be refused, not waited on: timeout 30 s), numbers in config.json, tracker
files, file names, tensor keys and DTensor placements beyond any real model, and every
numeric command-line flag out of range (usage errors exit 2)."""
import json
import os
import stat
import struct

from corpus_lib import case, copy_case, ops_of, patch_data_pkl, read_record, splice

# The bounds vmerge promises (src/core/bounded_number.h, src/architecture/hf_config.cpp, mpi/command_line.h);
# the expected texts are built from these and from the damage, not from vmerge's output.
MAX_LAYERS = 100000
MAX_WORLD = 1 << 20
MAX_EXPERTS = 1 << 20
MAX_VOCAB = 1 << 31
MAX_ITERATION = 999999999
MAX_EXPECTED_TENSORS = 1 << 20  # the tensors one config.json may imply (src/architecture/tensor_set.cpp)
MAX_FLAG_BYTES = 1 << 50
HANG = 30  # seconds: a case still running then is a hang


def add_cases(good_fsdp, good_megatron, out):
    fifo_cases(good_fsdp, good_megatron, out)
    config_cases(good_megatron, out)
    name_and_key_cases(good_fsdp, good_megatron, out)
    cli_cases(good_fsdp, out)
    hf_folder_cases(good_fsdp, out)


def long1_op(value):
    """LONG1 for any int: two's complement little-endian, with a sign byte kept when the top
    byte's high bit would flip it (corpus_lib.int_op drops it: 10^12 would read negative)."""
    n = 1
    while not -(1 << (8 * n - 1)) <= value < (1 << (8 * n - 1)):
        n += 1
    return b"\x8a" + bytes([n]) + value.to_bytes(n, "little", signed=True)


def not_regular(path, kind):
    return f"{path}: {kind}, not a regular file"


def replace_by_fifo(path):
    os.remove(path)
    os.mkfifo(path)


def llama(good_megatron, out, name):
    """A copy of the verl Megatron TP=2 case; returns (local_dir, config.json path)."""
    d = copy_case(os.path.join(good_megatron, "verl_llama_tp2_pp1"), os.path.join(out, name))
    actor = os.path.join(d, "actor")
    return actor, os.path.join(actor, "huggingface", "config.json")


def fifo_cases(good_fsdp, good_megatron, out):
    w2 = os.path.join(good_fsdp, "w2_bf16")
    r1 = "model_world_size_2_rank_1.pt"

    d = copy_case(w2, os.path.join(out, "fifo_rank_file"))
    replace_by_fifo(os.path.join(d, r1))
    case("fifo_rank_file", d, not_regular(os.path.join(d, r1), "a FIFO"),
         "rank 1 file replaced by a FIFO (open() would wait for a writer forever)", timeout=HANG)

    d = copy_case(w2, os.path.join(out, "fifo_config_json"))
    cfg = os.path.join(d, "huggingface", "config.json")
    replace_by_fifo(cfg)
    case("fifo_config_json", d, not_regular(cfg, "a FIFO"), "huggingface/config.json replaced by a FIFO",
         timeout=HANG)

    d = copy_case(w2, os.path.join(out, "fifo_fsdp_config_json"))
    replace_by_fifo(os.path.join(d, "fsdp_config.json"))
    case("fifo_fsdp_config_json", d, not_regular(os.path.join(d, "fsdp_config.json"), "a FIFO"),
         "fsdp_config.json replaced by a FIFO", timeout=HANG)

    # A character device that never ends (/dev/zero's numbers), where root may make one.
    d = copy_case(w2, os.path.join(out, "char_device_rank_file"))
    try:
        os.remove(os.path.join(d, r1))
        os.mknod(os.path.join(d, r1), stat.S_IFCHR | 0o600, os.makedev(1, 5))
        case("char_device_rank_file", d, not_regular(os.path.join(d, r1), "a character device"),
             "rank 1 file replaced by a character device 1,5 (/dev/zero: reads never end)", timeout=HANG)
    except (PermissionError, OSError):
        pass  # not root: no device node, no case

    dcp = os.path.join(good_megatron, "dcp_qwen2_uneven")
    for name, victim, notes in (("fifo_dcp_metadata", ".metadata", "dcp/.metadata replaced by a FIFO"),
                                ("fifo_distcp_shard", "__1_0.distcp", "dcp/__1_0.distcp (rank 1's shard) "
                                 "replaced by a FIFO")):
        d = copy_case(dcp, os.path.join(out, name))
        path = os.path.join(d, "dcp", victim)
        replace_by_fifo(path)
        case(name, os.path.join(d, "dcp"), not_regular(path, "a FIFO"), notes,
             args=["--hf_config", os.path.join(d, "hf")], timeout=HANG)

    actor, _ = llama(good_megatron, out, "fifo_megatron_tracker")
    tracker = os.path.join(actor, "latest_checkpointed_iteration.txt")
    os.mkfifo(tracker)
    case("fifo_megatron_tracker", actor, not_regular(tracker, "a FIFO"),
         "verl Megatron TP=2 case with a FIFO as latest_checkpointed_iteration.txt", timeout=HANG)

    # --log_json naming a FIFO: the log written at the end would block forever.
    d = copy_case(w2, os.path.join(out, "fifo_log_json"))
    log = os.path.join(d, "log.json")
    os.mkfifo(log)
    case("fifo_log_json", d, f"--log_json {log}: a FIFO, not a regular file",
         "--log_json names a FIFO in the case folder", args=["--log_json", log], timeout=HANG)

    d = copy_case(w2, os.path.join(out, "log_json_missing_folder"))
    case("log_json_missing_folder", d,
         "--log_json /nonexistent/dir/x.json: its folder /nonexistent/dir cannot be used",
         "--log_json into a folder that does not exist: refused before the merge starts",
         args=["--log_json", "/nonexistent/dir/x.json"])


def config_cases(good_megatron, out):
    def patched(name, changes, notes, error=None):
        actor, cfg_path = llama(good_megatron, out, name)
        cfg = json.load(open(cfg_path))
        cfg.update(changes)
        json.dump(cfg, open(cfg_path, "w"), indent=2)
        case(name, actor, [f"huggingface/config.json: {error}"], notes, timeout=HANG)

    patched("config_layers_1e9", {"num_hidden_layers": 10**9},
            "num_hidden_layers 10^9 (a table of 10^10 expected tensors)",
            f"num_hidden_layers {10**9}: expected 1..{MAX_LAYERS}")
    patched("config_vocab_size_0", {"vocab_size": 0}, "vocab_size 0",
            f"vocab_size 0: expected 1..{MAX_VOCAB}")
    patched("config_vocab_size_negative", {"vocab_size": -5}, "vocab_size -5",
            f"vocab_size -5: expected 1..{MAX_VOCAB}")
    patched("config_vocab_size_2_64", {"vocab_size": 2**64 - 1}, "vocab_size 2^64-1 (wraps to -1 as int64)",
            f"vocab_size {2**64 - 1}: expected a whole number 1..{MAX_VOCAB}")
    patched("config_hidden_size_negative", {"hidden_size": -32}, "hidden_size -32",
            f"hidden_size -32: expected 1..{1 << 20}")
    patched("config_heads_fraction", {"num_attention_heads": 4.5}, "num_attention_heads 4.5",
            f"num_attention_heads 4.5: expected a whole number 1..{1 << 16}")
    moe = {"architectures": ["Qwen2MoeForCausalLM"], "moe_intermediate_size": 16, "num_experts": 4,
           "shared_expert_intermediate_size": 16, "decoder_sparse_step": 1}
    patched("config_decoder_sparse_step_0", dict(moe, decoder_sparse_step=0),
            "the Megatron llama case's config turned into Qwen2-MoE with decoder_sparse_step 0 "
            "((i+1) % 0 was a SIGFPE)", f"decoder_sparse_step 0: expected 1..{MAX_LAYERS}")
    patched("config_num_experts_huge", dict(moe, num_experts=10**7),
            "Qwen2-MoE config with num_experts 10^7", f"num_experts {10**7}: expected 0..{MAX_EXPERTS}")
    patched("config_layers_times_experts", dict(moe, num_hidden_layers=1000, num_experts=1000),
            "Qwen2-MoE config with 1000 layers of 1000 experts (each within bounds, 10^6 expert blocks)",
            f"implies more than {MAX_EXPECTED_TENSORS} tensors")


def name_and_key_cases(good_fsdp, good_megatron, out):
    # Tracker files that hold no iteration number.
    for name, text, notes in (("tracker_10abc", "10abc", "tracker holds '10abc'"),
                              ("tracker_1e30", str(10**30), "tracker holds 10^30 (std::stoi threw)")):
        actor, _ = llama(good_megatron, out, name)
        tracker = os.path.join(actor, "latest_checkpointed_iteration.txt")
        with open(tracker, "w") as f:
            f.write(text)
        case(name, actor, f"{tracker}: holds '{text}', expected 'release' or an iteration number "
             f"0..{MAX_ITERATION}", f"verl Megatron TP=2 case, {notes}")

    w2 = os.path.join(good_fsdp, "w2_bf16")
    r0 = "model_world_size_2_rank_0.pt"
    for name, file_name, what, lo, hi in (
            ("rank_file_world_size_1e12", "model_world_size_999999999999_rank_0.pt", "world size", 1, MAX_WORLD),
            ("rank_file_rank_1e11", "model_world_size_2_rank_99999999999.pt", "rank", 0, MAX_WORLD - 1)):
        d = copy_case(w2, os.path.join(out, name))
        os.link(os.path.join(d, r0), os.path.join(d, file_name))
        number = file_name.split("_")[3] if what == "world size" else file_name.split("_")[5][:-3]
        case(name, d, f"{file_name}: {what} '{number}': expected a whole number {lo}..{hi}",
             f"w2_bf16 plus a copy of rank 0 named {file_name}")

    d = copy_case(w2, os.path.join(out, "fsdp_config_world_size_1e9"))
    with open(os.path.join(d, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": 10**9}, f)
    case("fsdp_config_world_size_1e9", d,
         f"fsdp_config.json: world_size {10**9}: expected 1..{MAX_WORLD}",
         "fsdp_config.json says world_size 10^9")

    # A Megatron rank-file key with a layer number no model has.
    key = "decoder.layers.0.self_attention.linear_proj.weight"
    for name, layer in (("megatron_layer_1e15", 10**15), ("megatron_layer_beyond_64_bits", 10**20)):
        actor, _ = llama(good_megatron, out, name)
        f = os.path.join(actor, "model", "mp_rank_00", "model.pt")
        bad = key.replace(".0.", f".{layer}.", 1)
        op = next(o for o in ops_of(read_record(f, "/data.pkl")) if o[0] == "BINUNICODE" and o[1] == key)
        patch_data_pkl(f, lambda p: splice(p, op, b"X" + struct.pack("<I", len(bad)) + bad.encode()))
        case(name, actor, f"{f}: key '{bad}': layer number '{layer}': expected a whole number 0..{MAX_LAYERS - 1}",
             f"mp_rank_00's key {key} renamed to layer {layer}")

    # FSDP2+TP: the _StridedShard(0, split_factor=2) placement's split factor set to 10^12.
    tp = os.path.join(good_fsdp, "fsdp_tp_2x2")
    r = "model_world_size_4_rank_0.pt"
    d = copy_case(tp, os.path.join(out, "strided_shard_split_factor_1e12"))
    f = os.path.join(d, r)
    ops = ops_of(read_record(f, "/data.pkl"))
    g = next(i for i, o in enumerate(ops) if o[0] == "GLOBAL" and o[1].endswith(" _StridedShard"))
    sf = next(i for i in range(g, len(ops)) if ops[i][0] == "BINUNICODE" and ops[i][1] == "split_factor")
    value = ops[sf + 2]
    assert value[0].startswith("BININT") and value[1] == 2, value
    owner = [o[1] for o in ops[:g] if o[0] == "BINUNICODE" and o[1].startswith("model.")][-1]
    patch_data_pkl(f, lambda p: splice(p, value, long1_op(10**12)))
    case("strided_shard_split_factor_1e12", d,
         [f"{r}:data.pkl", f"'{owner}'", f"placement _StridedShard(dim=0): split factor {10**12}: "
          f"expected 1..{MAX_WORLD}"],
         f"fsdp_tp_2x2 rank 0: the _StridedShard placement of '{owner}' (shared by later tensors) "
         "with split_factor 10^12 (a loop of 10^12 pieces)", timeout=HANG)


def cli_cases(good_fsdp, out):
    w2 = os.path.join(good_fsdp, "w2_bf16")

    def usage(name, args, error, command="merge", notes=None):
        d = copy_case(w2, os.path.join(out, name))
        case(name, d, f"usage error: {error}", notes or " ".join(args) + ": a usage error, exit 2",
             args=args, command=command, exit=2, timeout=HANG)

    usage("cli_np_1e8", ["--np", "100000000"], f"--np 100000000: expected 0..{MAX_WORLD}", command="inspect")
    usage("cli_max_memory_nan", ["--max_memory", "nan"], "--max_memory nan: expected a positive size")
    usage("cli_max_memory_negative", ["--max_memory", "-1"], "--max_memory -1: expected a positive size")
    usage("cli_max_memory_1e30", ["--max_memory", "1e30"], f"--max_memory 1e30: more than {MAX_FLAG_BYTES} bytes")
    usage("cli_max_shard_size_0", ["--max_shard_size", "0"], "--max_shard_size 0: expected a positive size")
    usage("cli_bits_3", ["--bits", "3"], "--bits 3: expected 4 or 8")
    usage("cli_dtype_int8", ["--dtype", "int8"], "--dtype int8: expected auto, keep, bf16, fp16 or fp32")
    usage("cli_group_size_negative", ["--group_size", "-1"], f"--group_size -1: expected 0..{1 << 24}")
    usage("cli_progress_huge", ["--progress", "1000000"], "--progress 1000000: expected -1..86400")
    usage("cli_iteration_negative", ["--iteration", "-1"], f"--iteration -1: expected 0..{MAX_ITERATION}")
    usage("cli_tp_size_0", ["--tp_size", "0"], f"--tp_size 0: expected 1..{MAX_WORLD}")
    usage("cli_hdf5_chunk_size_8GiB", ["--format", "hdf5", "--compress", "zstd", "--hdf5_chunk_size", "8GiB"],
          f"--hdf5_chunk_size 8GiB: more than {(4 << 30) - 1} bytes")
    ref = os.path.join(w2, "huggingface")
    usage("cli_atol_nan", ["--atol", "nan", "--test_hf_dir", ref], "--atol nan: expected a finite number >= 0",
          command="test")
    usage("cli_rtol_inf", ["--rtol", "inf", "--test_hf_dir", ref], "--rtol inf: expected a finite number >= 0",
          command="test")

    # Slurm's units (--mem=128M: MiB) are accepted.
    d = copy_case(w2, os.path.join(out, "cli_max_memory_slurm_128M"))
    case("cli_max_memory_slurm_128M", d, [], "--max_memory 128M (Slurm's M = MiB) is accepted",
         args=["--max_memory", "128M"], command="inspect", exit=0,
         output=[f"--max-memory {128.0:.1f} MiB per rank"])


def hf_folder_cases(good_fsdp, out):
    # The config folder's files are copied into the output at the end: a FIFO among them is
    # refused before anything is written (it was skipped, so the output silently lacked it).
    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "fifo_tokenizer_in_hf_folder"))
    tok = os.path.join(d, "huggingface", "tokenizer.json")
    replace_by_fifo(tok)
    case("fifo_tokenizer_in_hf_folder", d, not_regular(tok, "a FIFO"),
         "huggingface/tokenizer.json replaced by a FIFO", timeout=HANG)

    # merge --backend hdf5 of an archive folder whose model.h5 is a FIFO.
    d = os.path.join(out, "fifo_hdf5_archive")
    os.makedirs(d)
    os.mkfifo(os.path.join(d, "model.h5"))
    case("fifo_hdf5_archive", d, not_regular(os.path.join(d, "model.h5"), "a FIFO"),
         "an archive folder whose model.h5 is a FIFO (--backend hdf5)", args=["--backend", "hdf5"], timeout=HANG)
