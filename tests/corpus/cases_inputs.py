"""What a merge reads and where it writes: one input under two names (a link or a copy of
another rank's file), a missing last tensor-parallel rank folder, a target file system too
small for the planned bytes."""
import json
import os
import struct
import shutil

from corpus_lib import case, copy_case, read_record, record_name, rewrite_zip

OWN = "each input must be a file of its own (a rank file linked to or copied from another rank's merges " \
      "one shard twice and leaves another out)"


def add_cases(good_fsdp, good_megatron, out):
    w2 = os.path.join(good_fsdp, "w2_bf16")
    # (An FSDP rank file records its mesh coordinate: a copy of another rank's is refused by the
    # coverage check already. Megatron's legacy files record nothing of the kind.)

    # HSDP 2x2: ranks 2 and 3 save the same shards as ranks 0 and 1. One byte of rank 2's first
    # record changed, its CRC-32 rewritten to match: a consistent file whose replica differs.
    d = copy_case(os.path.join(good_fsdp, "hsdp_2x2"), os.path.join(out, "input_replica_differs"))
    rank2 = os.path.join(d, "model_world_size_4_rank_2.pt")
    data = bytearray(read_record(rank2, "/data/0"))
    data[0] ^= 1
    rewrite_zip(rank2, replace={record_name(rank2, "/data/0"): bytes(data)})
    case("input_replica_differs", d,
         ["model_world_size_4_rank_2.pt (", "hold different values for it (each should be a copy of the other): two "
          "different sources for one output tensor; the save is inconsistent, merge a complete one"],
         "HSDP replica rank 2's data/0 differs from its primary's in one bit, with a matching CRC-32")

    meg = os.path.join(good_megatron, "verl_llama_tp2_pp1")
    if not os.path.isdir(meg):
        return
    d = copy_case(meg, os.path.join(out, "input_rank_file_copied"))
    rank0 = os.path.join(d, "actor/model/mp_rank_00/model.pt")
    shutil.copyfile(rank0, os.path.join(d, "actor/model/mp_rank_01/model.pt"))
    case("input_rank_file_copied", os.path.join(d, "actor"),
         [f"{rank0} and {os.path.join(d, 'actor/model/mp_rank_01/model.pt')} hold the same "
          f"{os.path.getsize(rank0)} bytes: " + OWN],
         "TP rank 1's model.pt replaced by a copy of TP rank 0's (same shapes: it would merge rank 0's shard twice)")

    d = copy_case(meg, os.path.join(out, "input_rank_file_linked"))
    rank1 = os.path.join(d, "actor/model/mp_rank_01/model.pt")
    os.remove(rank1)
    os.symlink("../mp_rank_00/model.pt", rank1)
    case("input_rank_file_linked", os.path.join(d, "actor"),
         [f"mp_rank_01/model.pt (a link to ../mp_rank_00/model.pt) are one file: " + OWN],
         "TP rank 1's model.pt a symbolic link to TP rank 0's", np=1)

    d = copy_case(meg, os.path.join(out, "input_last_tp_folder_missing"))
    shutil.rmtree(os.path.join(d, "actor/model/mp_rank_01"))
    case("input_last_tp_folder_missing", os.path.join(d, "actor"),
         ["are tensor-parallel rank folders (files) missing?"],
         "the last TP rank folder of two removed: no hole among the folders, only half the rows", np=1)

    case("output_no_room", w2,
         ["but its file system has 1000 B (1000 bytes) free; free space or choose another --target_dir "
          "(--skip_free_space_check when the file system reports less than it holds)"],
         "the target's file system reports 1000 bytes free (VMERGE_TEST_FREE_BYTES)", env={"VMERGE_TEST_FREE_BYTES": "1000"})

    # 255 - 30 = 225 bytes is the longest target name with room for the names made beside it.
    long_name = "m" * 226
    case("output_name_too_long", w2,
         [f"{long_name}: a name of 226 bytes leaves no room for the staging, journal and lock names vmerge makes "
          "beside it (30 bytes more, at most 255 in all on that file system); choose a target name of at most 225 bytes"],
         "a 226-byte target name: its staging folder could be made, its lock's stale name not",
         target=os.path.join(out, "long_target", long_name))
    os.makedirs(os.path.join(out, "long_target"), exist_ok=True)

    # A journal left beside the target by someone else's interrupted commit: found before the copy.
    parent = os.path.join(out, "journal_left")
    os.makedirs(os.path.join(parent, ".out.vmerge-journal"), exist_ok=True)
    case("output_journal_name_taken", w2,
         [os.path.join(parent, ".out.vmerge-journal") + ": exists, and the journal must wait there during the final "
          "rename; it was not made by this merge, so move it away first"],
         "a folder named like the target's detached journal exists beside it, with no staging folder",
         target=os.path.join(parent, "out"))

    case("exclude_frozen_on_fsdp", w2,
         ["--exclude_frozen_parameters: ", "which records no frozen parameters (the flag is zero_to_fp32.py's, for "
          "DeepSpeed checkpoints)"],
         "zero_to_fp32.py's --exclude_frozen_parameters on a verl FSDP checkpoint", args=["--exclude_frozen_parameters"])

    # The tracker names the iteration; its bytes never reach a message unescaped, and a link out
    # of the checkpoint is not followed.
    mlm = os.path.join(good_megatron, "mlm_llama_tp2_pp2")
    if os.path.isdir(mlm):
        d = copy_case(mlm, os.path.join(out, "tracker_with_nul"))
        with open(os.path.join(d, "ckpt/latest_checkpointed_iteration.txt"), "wb") as f:
            f.write(b"2\x000\n")
        case("tracker_with_nul", os.path.join(d, "ckpt"),
             ["latest_checkpointed_iteration.txt: not a line of text (byte 1 is '\\x00'); expected ",
              "to hold a name or a number"],
             "a NUL byte inside the tracker file (it would cut the message short)")
        d = copy_case(mlm, os.path.join(out, "tracker_links_out"))
        tracker = os.path.join(d, "ckpt/latest_checkpointed_iteration.txt")
        os.remove(tracker)
        os.symlink("/etc/hostname", tracker)
        case("tracker_links_out", os.path.join(d, "ckpt"),
             [": 'latest_checkpointed_iteration.txt': ", "; expected a file inside"],
             "the tracker a link to a file outside the checkpoint (its contents must not be read or shown)")

    # A name from inside a file (a safetensors index's weight_map) that leaves the checkpoint:
    # never followed, whatever the file it names holds.
    hf = os.path.join(good_megatron, "verl_hf_safetensors")
    if os.path.isdir(hf):
        d = copy_case(hf, os.path.join(out, "weight_map_leaves_folder"))
        weights = os.path.join(d, "actor/huggingface/model.safetensors")
        with open(weights, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        names = [n for n in header if n != "__metadata__"]
        shutil.copyfile(weights, os.path.join(d, "secret.safetensors"))
        weight_map = {n: "model.safetensors" for n in names}
        weight_map[names[0]] = "../../secret.safetensors"
        with open(os.path.join(d, "actor/huggingface/model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        case("weight_map_leaves_folder", os.path.join(d, "actor"),
             ["'../../secret.safetensors': a '..' part; expected a file inside"],
             "model.safetensors.index.json maps a tensor to ../../secret.safetensors (outside the checkpoint)",
             args=["--backend", "megatron"])
