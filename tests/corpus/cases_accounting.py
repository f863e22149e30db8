"""Corpus cases of the source accounting (issue 13): every source tensor is written or dropped
for a named reason. A value that is no tensor, keys that collide after renaming, a tensor set
that does not fit config.json (FSDP, DCP), Megatron keys with no Hugging Face name; and good
merges whose summary counts the drops."""
import json
import os
import pickletools
import shutil
import struct
import sys
import zipfile

from corpus_lib import FIXTURES_SRC, case, copy_case, ops_of, patch_data_pkl, read_record

R0, R1 = "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"
STRING_OPS = ("BINUNICODE", "SHORT_BINUNICODE", "UNICODE")


def add_cases(good_fsdp, good_megatron, out):
    fsdp_cases(good_fsdp, out)
    dcp_cases(good_megatron, out)
    megatron_cases(good_megatron, out)


# ---------------------------------------------------------------------------------------------
# Pickle surgery on state-dict entries: a key's span runs from its string op to the next key
# of the same dict batch (a string pushed in the same MARK frame once key and value are on the
# stack) or the op that closes the batch.
# ---------------------------------------------------------------------------------------------

def entry_span(pkl, key):
    """(key op index, end op index) of `key`'s entry in ops_of(pkl)."""
    ops = list(pickletools.genops(pkl))
    frames = [0]  # items above the innermost MARK
    target = None  # (frame level, depth at which the next key is pushed)
    start = None
    for i, (op, arg, _) in enumerate(ops):
        level, depth = len(frames), frames[-1]
        if target and level == target[0] and depth == target[1] and op.name in STRING_OPS:
            return start, i
        if op.name == "MARK":
            frames.append(0)
            continue
        if pickletools.markobject in op.stack_before:
            frames.pop()
            if target and level == target[0]:
                return start, i
            frames[-1] += len(op.stack_after) - (len(op.stack_before) - 2)
            continue
        if target is None and op.name in STRING_OPS and arg == key:
            target, start = (level, depth + 2), i
        frames[-1] += len(op.stack_after) - len(op.stack_before)
    raise AssertionError(f"no entry {key!r}")


def string_op(text):
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def rename_key(pkl, key, new_key):
    ops = ops_of(pkl)
    k, _ = entry_span(pkl, key)
    _, _, pos, end = ops[k]
    return pkl[:pos] + string_op(new_key) + pkl[end:]


def remove_entry(pkl, key):
    ops = ops_of(pkl)
    k, e = entry_span(pkl, key)
    return pkl[:ops[k][2]] + pkl[ops[e][2]:]


def replace_value(pkl, key, new_value):
    """The value of `key` (after the key and its memo put) becomes the ops `new_value`."""
    ops = ops_of(pkl)
    k, e = entry_span(pkl, key)
    v = k + 1
    while ops[v][0] in ("BINPUT", "LONG_BINPUT", "PUT"):
        v += 1
    return pkl[:ops[v][2]] + new_value + pkl[ops[e][2]:]


def duplicate_entry(pkl, key, new_key, storage, new_storage):
    """A copy of `key`'s entry under `new_key`, at the end of its dict batch, whose tensor reads
    record `new_storage` instead of `storage`; its memo slots are fresh ones."""
    ops = ops_of(pkl)
    k, e = entry_span(pkl, key)
    memo = [o[1] for o in ops if o[0] in ("BINPUT", "LONG_BINPUT")]
    fresh = max(memo) + 1
    remap = {}
    body = b""
    for name, arg, pos, end in ops[k:e]:
        if name in ("BINPUT", "LONG_BINPUT"):
            remap[arg] = fresh
            body += b"r" + struct.pack("<I", fresh)
            fresh += 1
        elif name in ("BINGET", "LONG_BINGET") and arg in remap:
            body += b"j" + struct.pack("<I", remap[arg])
        elif name in STRING_OPS and arg == key:
            body += string_op(new_key)
        elif name in STRING_OPS and arg == storage:
            body += string_op(new_storage)
        else:
            body += pkl[pos:end]
    # The end of the batch: the op closing the frame the key lives in.
    end_op = e
    while ops[end_op][0] in STRING_OPS:  # not the last entry: walk to the batch's close
        end_op = entry_span(pkl, ops[end_op][1])[1]
    at = ops[end_op][2]
    return pkl[:at] + body + pkl[at:]


def storage_of(pkl, key):
    """The storage record key of `key`'s plain tensor: the one all-digit string of its
    persistent id ('storage' and the location are memoized or not digits)."""
    ops = ops_of(pkl)
    k, e = entry_span(pkl, key)
    return next(o[1] for o in ops[k:e] if o[0] in STRING_OPS and o[1].isdigit())


def add_record(path, name, data):
    """Rewrites the archive with one more stored record `name`."""
    with zipfile.ZipFile(path) as z:
        records = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    os.remove(path)
    with zipfile.ZipFile(path, "w") as z:
        for n, d in records + [(name, data)]:
            z.writestr(zipfile.ZipInfo(n), d, compress_type=zipfile.ZIP_STORED)


def add_copy_of_entry(path, key, new_key, new_storage):
    """`key`'s entry copied under `new_key`, its tensor bytes in a new record `new_storage`."""
    pkl = read_record(path, "/data.pkl")
    storage = storage_of(pkl, key)
    names = zipfile.ZipFile(path).namelist()
    prefix = next(n for n in names if n.endswith("/data.pkl"))[:-len("data.pkl")]
    data = zipfile.ZipFile(path).read(prefix + "data/" + storage)
    patch_data_pkl(path, lambda p: duplicate_entry(p, key, new_key, storage, new_storage))
    add_record(path, prefix + "data/" + new_storage, data)


def state_dict_keys(path):
    """The tensor keys of an FSDP rank file in order (the strings a dict batch pushes as keys)."""
    pkl = read_record(path, "/data.pkl")
    first = next(o[1] for o in ops_of(pkl) if o[0] in STRING_OPS)
    keys, key = [], first
    ops = ops_of(pkl)
    while True:
        keys.append(key)
        _, e = entry_span(pkl, key)
        if ops[e][0] not in STRING_OPS:
            return keys
        key = ops[e][1]


def edit_config(path, **changes):
    cfg = json.load(open(path))
    for k, v in changes.items():
        cfg[k] = v
    json.dump(cfg, open(path, "w"), indent=2)
    return cfg


# ---------------------------------------------------------------------------------------------
# FSDP
# ---------------------------------------------------------------------------------------------

def fsdp_cases(good, out):
    w2 = os.path.join(good, "w2_bf16")
    keys = state_dict_keys(os.path.join(w2, R0))
    hf = os.path.join(w2, "huggingface", "config.json")
    cfg = json.load(open(hf))
    arch = cfg["architectures"][0]
    assert keys[-1] == "lm_head.weight" and not cfg["tie_word_embeddings"], keys[-1]

    d = copy_case(w2, os.path.join(out, "fsdp_value_unknown_object"))
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r),
                       lambda p: replace_value(p, "lm_head.weight", b"cvmerge_corpus\nNotATensor\n)R"))
    case("fsdp_value_unknown_object", d,
         f"{R0} key 'lm_head.weight': holds vmerge_corpus.NotATensor(...) where a tensor is expected",
         "both ranks' lm_head.weight value replaced by vmerge_corpus.NotATensor() (GLOBAL, "
         "EMPTY_TUPLE, REDUCE): once silently skipped, the model lost its head with exit 0")

    d = copy_case(w2, os.path.join(out, "fsdp_lm_head_missing_untied"))
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), lambda p: remove_entry(p, "lm_head.weight"))
    case("fsdp_lm_head_missing_untied", d,
         [f"huggingface/config.json ({arch}) implies:", "missing: lm_head.weight"],
         "lm_head.weight removed from both ranks of an untied model (tie_word_embeddings false)")

    d = copy_case(w2, os.path.join(out, "fsdp_extra_layer_vs_config"))
    layers = cfg["num_hidden_layers"]
    edit_config(os.path.join(d, "huggingface", "config.json"), num_hidden_layers=layers - 1)
    extra = [k for k in keys if k.startswith(f"model.layers.{layers - 1}.")]
    case("fsdp_extra_layer_vs_config", d,
         [f"huggingface/config.json ({arch}) implies:", f"not part of {arch}: {extra[0]}, {extra[1]}"],
         f"config.json num_hidden_layers {layers} -> {layers - 1}: layer {layers - 1}'s tensors are "
         "not implied")

    d = copy_case(w2, os.path.join(out, "fsdp_shape_vs_config"))
    inter = cfg["intermediate_size"]
    edit_config(os.path.join(d, "huggingface", "config.json"), intermediate_size=inter + 16)
    first_mlp = next(k for k in keys if k.endswith("mlp.gate_proj.weight"))
    case("fsdp_shape_vs_config", d,
         [f"wrong shape: {first_mlp} [{inter}, {cfg['hidden_size']}] (config.json implies "
          f"[{inter + 16}, {cfg['hidden_size']}])"],
         f"config.json intermediate_size {inter} -> {inter + 16}")

    d = copy_case(w2, os.path.join(out, "fsdp_unknown_arch_not_checked"))
    edit_config(os.path.join(d, "huggingface", "config.json"), architectures=["FooForCausalLM"])
    case("fsdp_unknown_arch_not_checked", d, [], "architectures ['FooForCausalLM']: FSDP names its own tensors, "
         "so the merge goes on and says the config check was skipped", exit=0,
         output=["huggingface/config.json: no tensor table for architecture FooForCausalLM",
                 f"vmerge: merged {len(keys)} tensors"])

    d = copy_case(w2, os.path.join(out, "fsdp_key_metadata"))
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), lambda p: rename_key(p, "model.norm.weight", "__metadata__"))
    case("fsdp_key_metadata", d,
         f"{R0}: key '__metadata__' becomes the output tensor name '__metadata__', which safetensors "
         "reserves for its header",
         "model.norm.weight renamed __metadata__ in both ranks (an unreadable safetensors header)")

    d = copy_case(w2, os.path.join(out, "fsdp_wrapped_key_collides"))
    first_layer = keys[1]
    wrapped = "_fsdp_wrapped_module." + first_layer
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), lambda p: rename_key(p, "model.norm.weight", wrapped))
    case("fsdp_wrapped_key_collides", d,
         f"{R0}: keys '{first_layer}' and '{wrapped}' both become output tensor '{first_layer}'",
         f"model.norm.weight renamed {wrapped}: after the FSDP wrapper strip two keys give one name")

    d = copy_case(w2, os.path.join(out, "fsdp_wrapped_key_merges"))
    norm = "model.norm.weight"
    for r in (R0, R1):
        patch_data_pkl(os.path.join(d, r), lambda p: rename_key(p, norm, "_fsdp_wrapped_module." + norm))
    case("fsdp_wrapped_key_merges", d, [], "model.norm.weight saved as _fsdp_wrapped_module.model.norm.weight "
         "(FSDP1 names): the wrapper segment is stripped and the merge succeeds",
         exit=0, output=[f"vmerge: merged {len(keys)} tensors"])

    # An older transformers' rotary buffer saved with the weights: dropped with its reason.
    d = copy_case(w2, os.path.join(out, "fsdp_inv_freq_dropped"))
    norm0, inv_freq = keys[11], "model.layers.0.self_attn.rotary_emb.inv_freq"
    assert norm0 == "model.layers.0.input_layernorm.weight", norm0
    for r in (R0, R1):
        add_copy_of_entry(os.path.join(d, r), norm0, inv_freq, "inv_freq")
    case("fsdp_inv_freq_dropped", d, [], f"{inv_freq} (a copy of {norm0}'s shards in their own storages) added "
         "to both ranks: not written, and counted", exit=0,
         output=["vmerge: dropped 2 source entries: 2 rotary inv_freq buffer", f"vmerge: merged {len(keys)} tensors"])

    hsdp = os.path.join(good, "hsdp_2x2")
    rank_files = sorted(f for f in os.listdir(hsdp) if f.startswith("model_world_size_"))
    per_rank = len(state_dict_keys(os.path.join(hsdp, rank_files[0])))
    replicas = per_rank * (len(rank_files) // 2)  # mesh (2, 2): the second 'ddp' row repeats the first
    d = copy_case(hsdp, os.path.join(out, "fsdp_hsdp_drop_summary"))
    case("fsdp_hsdp_drop_summary", d, [], "good HSDP (2, 2) merge: the summary counts the replicas",
         exit=0, output=[f"vmerge: dropped {replicas} source entries: {replicas} replica (other DP/EP/TP rank)"])


# ---------------------------------------------------------------------------------------------
# DCP
# ---------------------------------------------------------------------------------------------

def dcp_cases(good, out):
    sys.path.insert(0, FIXTURES_SRC)
    import dcp_writer as dw  # noqa: E402  (torch)
    src = os.path.join(good, "dcp_qwen2_uneven")
    tensors, _, meta = dw.read_dcp(os.path.join(src, "dcp"), return_metadata=True)
    rank_of = {}
    for k, v in meta.storage_data.items():
        off = getattr(k, "offset", None)
        rank_of[(k.fqn, tuple(off) if off is not None else None)] = int(v.relative_path.split("_")[2])

    def entries(fqn, as_fqn=None):
        md = meta.state_dict_metadata[fqn]
        chunks = []
        for ch in md.chunks:
            box = tuple(slice(o, o + s) for o, s in zip(ch.offsets, ch.sizes))
            chunks.append((rank_of[(fqn, tuple(ch.offsets))], tuple(ch.offsets), tensors[fqn][box].clone()))
        return (as_fqn or fqn, tuple(md.size), chunks)

    fqns = list(meta.state_dict_metadata)
    cfg = json.load(open(os.path.join(src, "hf", "config.json")))
    arch = cfg["architectures"][0]

    def write(name, fqn_list, extra=()):
        d = copy_case(src, os.path.join(out, name))
        shutil.rmtree(os.path.join(d, "reference"))
        dw.write_dcp(os.path.join(d, "dcp"), [entries(f) for f in fqn_list] + list(extra), None,
                     files_per_rank=1, world_size=3, planner_data="first_dot")
        return d

    norm = "model.model.norm.weight"
    assert norm in fqns, fqns
    twin = "model.module.model.norm.weight"
    d = write("dcp_model_module_collide", fqns, [entries(norm, twin)])
    case("dcp_model_module_collide", os.path.join(d, "dcp"),
         f"dcp/.metadata: keys '{norm}' and '{twin}' both become output tensor 'model.norm.weight'",
         f"dcp_qwen2_uneven plus {twin}, a copy of {norm}: both strip to model.norm.weight",
         args=["--hf_config", os.path.join(d, "hf")])

    last = cfg["num_hidden_layers"] - 1
    layer = [f for f in fqns if f.startswith(f"model.model.layers.{last}.")]
    missing = sorted(f[len("model."):] for f in layer)
    d = write("dcp_missing_layer_vs_config", [f for f in fqns if f not in layer])
    shown = ", ".join(missing[:12]) + (f", ... ({len(missing)} in all)" if len(missing) > 12 else "")
    case("dcp_missing_layer_vs_config", os.path.join(d, "dcp"),
         [f"hf/config.json ({arch}) implies:", f"missing: {shown}"],
         f"dcp_qwen2_uneven without layer {last}'s {len(layer)} tensors",
         args=["--hf_config", os.path.join(d, "hf")])

    d = write("dcp_extra_tensor_vs_config", fqns, [entries(norm, "model.model.extra_norm.weight")])
    case("dcp_extra_tensor_vs_config", os.path.join(d, "dcp"),
         [f"hf/config.json ({arch}) implies:", f"not part of {arch}: model.extra_norm.weight"],
         "dcp_qwen2_uneven plus model.model.extra_norm.weight (a copy of the final norm)",
         args=["--hf_config", os.path.join(d, "hf")])


# ---------------------------------------------------------------------------------------------
# Megatron
# ---------------------------------------------------------------------------------------------

def megatron_cases(good, out):
    src = os.path.join(good, "verl_llama_tp2_pp1")
    files = [os.path.join("actor", "model", r, "model.pt") for r in ("mp_rank_00", "mp_rank_01")]
    cfg = json.load(open(os.path.join(src, "actor", "huggingface", "config.json")))
    arch = cfg["architectures"][0]
    base = "decoder.final_layernorm.weight"
    extra = "decoder.final_layernorm.extra_scale"

    def add_unmapped(d):
        for f in files:
            add_copy_of_entry(os.path.join(d, f), base, extra, "unmapped")

    d = copy_case(src, os.path.join(out, "megatron_unmapped_key"))
    add_unmapped(d)
    case("megatron_unmapped_key", os.path.join(d, "actor"),
         f"no {arch} name for these checkpoint tensors (pass --allow_unmapped to drop them): {extra}",
         f"{extra} (a copy of {base} in its own storage) added to both TP ranks")

    d = copy_case(src, os.path.join(out, "megatron_unmapped_allowed"))
    add_unmapped(d)
    case("megatron_unmapped_allowed", os.path.join(d, "actor"), [],
         f"as megatron_unmapped_key with --allow_unmapped: the summary names the drop",
         args=["--allow_unmapped"], exit=0,
         output=[f"vmerge: dropped unmapped tensors: {extra}", "1 --allow_unmapped: no HF name"])

    # A good merge: the summary counts _extra_state entries and TP rank 1's replicated norms.
    keys = [state_dict_keys(os.path.join(src, f)) for f in files]
    extra_state = sum(k.endswith("_extra_state") for ks in keys for k in ks)
    replicated = sum(k.endswith("layernorm.weight") or k.endswith("layer_norm_weight") for k in keys[1])
    d = copy_case(src, os.path.join(out, "megatron_drop_summary"))
    case("megatron_drop_summary", os.path.join(d, "actor"), [],
         "good verl Megatron TP=2 merge: the summary counts every drop by reason", exit=0,
         output=[f"vmerge: dropped {extra_state + replicated} source entries: {extra_state} _extra_state, "
                 f"{replicated} replica (other DP/EP/TP rank)"])
