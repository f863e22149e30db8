"""Corpus cases of the DeepSpeed ZeRO reader: sizes the format implies, checked exactly (a rank's
partition, a frozen fragment one element longer than DeepSpeed makes it, which zero_to_fp32's
2·W tolerance would let shift every later parameter), a parameter listed in two groups,
integer "masters", and what vmerge refuses by name (pipeline-engine layer files, AutoEP saves);
plus a good 16-rank ZeRO-3 save whose small sub-group leaves flats of padding only.

Each input is written by tests/fixtures/make_deepspeed_fixtures.py (torch) from one of its good
cases, with the spec's `edit` hook changing one thing in the rank files' dicts before they are
saved. The sizes in the expected messages come from the model's shapes here, never from vmerge.
"""
import math
import os
import shutil
import sys

from corpus_lib import FIXTURES_SRC, case


def add_cases(good_fsdp, good_megatron, out):
    sys.path.insert(0, FIXTURES_SRC)
    import make_deepspeed_fixtures as mdf  # noqa: E402  (torch)
    import make_fsdp_fixtures as mff  # noqa: E402
    import torch  # noqa: E402

    def write(name, base, edit=None, **changes):
        """Case `name` from the good case `base` (its spec, `changes`, and the damage `edit`);
        returns (local_dir, tag_dir, merge args)."""
        spec = dict(mdf.CASES[base], **changes)
        if edit:
            spec["edit"] = edit
        entry = mdf.write_case(out, name, spec, 4000 + list(mdf.CASES).index(base))[name]
        shutil.rmtree(os.path.join(out, entry["reference"]))  # only the good case is compared
        local = os.path.join(out, entry["local_dir"])
        args = list(entry["merge_args"])
        if "hf_config" in entry:
            args += ["--hf_config", os.path.join(out, entry["hf_config"])]
        return local, mdf.tag_dir_of(local), args

    def groups_of(base):
        """The ZeRO param groups (name lists) and shapes the generator builds for `base`."""
        spec = mdf.CASES[base]
        shapes = dict(mff.param_shapes(spec["cfg"]))
        names = [n for n in shapes if not (spec["cfg"].tied and n == "lm_head.weight")]
        return mdf.param_groups(names, set()), shapes

    # --- ZeRO-1/2: rank 0's partition one element longer, still inside the 2·W alignment ------
    base = "zero2_bf16_w3"
    w = mdf.CASES[base]["w"]
    groups, shapes = groups_of(base)
    g = next(i for i, grp in enumerate(groups) if sum(math.prod(shapes[n]) for n in grp) % (2 * w))
    n = sum(math.prod(shapes[p]) for p in groups[g])
    part = -(-n // (2 * w)) * 2  # DeepSpeed: the group padded to a multiple of 2·W, cut in W

    def longer_rank0(kind, rank, sd):
        if kind == "optim" and rank == 0:
            flats = sd["single_partition_of_fp32_groups"]
            flats[g] = torch.cat([flats[g], torch.zeros(1)])

    local, tag, args = write("ds_zero2_rank0_partition_longer", base, longer_rank0)
    key = f"optimizer_state_dict.single_partition_of_fp32_groups.{g}"
    case("ds_zero2_rank0_partition_longer", local,
         f"global_step5/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt: {key} (param group {g}) holds {part + 1} "
         f"elements, but its param_shapes ({n} elements, in {w} partitions of {part}) give rank 0 exactly {part}",
         "ZeRO-2: rank 0 saved one element more than its partition; zero_to_fp32's 2·W tolerance accepts it and "
         "every parameter after rank 0's end would be read one element late", args=args)

    # --- ZeRO-3: a frozen fragment of ceil(N/W) + 1 elements -----------------------------------
    base = "zero3_frozen_tied"
    w = mdf.CASES[base]["w"]
    norm = "model.norm.weight"  # frozen in this case (with layer 0)
    numel = math.prod(dict(mff.param_shapes(mdf.CASES[base]["cfg"]))[norm])

    def longer_fragment(kind, rank, sd):
        if kind == "model" and rank == 0:
            fragments = sd["frozen_param_fragments"]
            fragments[norm] = torch.cat([fragments[norm], fragments[norm][:1]])

    local, tag, args = write("ds_zero3_frozen_fragment_longer", base, longer_fragment)
    case("ds_zero3_frozen_fragment_longer", local,
         f"global_step5/zero_pp_rank_0_mp_rank_00_model_states.pt: frozen_param_fragments '{norm}' holds "
         f"{-(-numel // w) + 1} elements, but the parameter's {numel} elements cut into {w} ranks need exactly "
         f"{-(-numel // w)}",
         "ZeRO-3 frozen parameter whose rank-0 fragment is one element longer: ranks 1 and 2's elements would shift",
         args=args)

    # --- a parameter listed in two param groups --------------------------------------------------
    renamed = {}

    def name_in_two_groups(kind, rank, sd):
        if kind == "model":
            shapes = sd["param_shapes"]
            renamed["name"] = next(iter(shapes[0]))
            items = list(shapes[1].items())
            renamed["lost"] = items[0][0]
            shapes[1] = type(shapes[1])([(renamed["name"], items[0][1])] + items[1:])

    local, tag, args = write("ds_zero2_name_in_two_groups", "zero2_bf16_w3", name_in_two_groups)
    case("ds_zero2_name_in_two_groups", local,
         f"global_step5/mp_rank_00_model_states.pt: parameter '{renamed['name']}' is listed in param_shapes param "
         f"group 0 and in param_shapes param group 1; each parameter belongs to one group",
         f"param_shapes group 1 names its first parameter like group 0's: '{renamed['lost']}' would be taken from "
         "the bit16 module copy and group 1's elements for it left unread", args=args)

    # --- integer master partitions ---------------------------------------------------------------
    def int_masters(kind, rank, sd):
        if kind == "optim":
            sd["single_partition_of_fp32_groups"][0] = sd["single_partition_of_fp32_groups"][0].to(torch.int32)

    local, tag, args = write("ds_zero1_int_masters", "zero1_fp16_fp32", int_masters)
    case("ds_zero1_int_masters", local,
         "pytorch_model/zero_pp_rank_0_mp_rank_00_optim_states.pt key "
         "'optimizer_state_dict.single_partition_of_fp32_groups.0' (param group 0): the fp32 master partition holds "
         "int32 elements; ZeRO master weights are floating point",
         "ZeRO-1 whose param group 0 masters are int32 on every rank: they would be written as integer weights",
         args=args)

    def int_flat_groups(kind, rank, sd):
        if kind == "optim":
            flat = sd["fp32_flat_groups"][1]
            flat.tensor = flat.tensor.detach().to(torch.int64)

    local, tag, args = write("ds_zero3_int_masters", "zero3_w4_subgroups", int_flat_groups)
    case("ds_zero3_int_masters", local,
         "global_step5/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt key 'optimizer_state_dict.fp32_flat_groups.1' "
         "(sub-group 1): the fp32 master partition holds int64 elements; ZeRO master weights are floating point",
         "ZeRO-3 whose sub-group 1 flats are int64 on every rank", args=args)

    # --- a 16-rank ZeRO-3 save: flats of padding only are dropped as padding -----------------------
    spec = mdf.CASES["zero3_w16_padding_flats"]
    groups, shapes = groups_of("zero3_w16_padding_flats")
    # Rank r holds data of sub-group g when some parameter's piece r starts before its numel.
    padding_flats = sum(1 for grp in groups for r in range(spec["w"])
                        if all(r * -(-math.prod(shapes[p]) // spec["w"]) >= math.prod(shapes[p]) for p in grp))
    assert padding_flats > 0, "the case must have flats of padding only"
    local, tag, args = write("ds_zero3_w16_padding_flats", "zero3_w16_padding_flats")
    case("ds_zero3_w16_padding_flats", local, [],
         "16 ranks, a sub-group of 8-element norms (one element per rank): ranks 8-15's fp32_flat_groups.1 hold "
         "padding only and are counted as dropped padding", args=args, exit=0,
         output=[f"{padding_flats} ZeRO partition padding"])

    # --- refused by name -------------------------------------------------------------------------
    local, tag, args = write("ds_pipeline_layer_files", "zero1_fp16_fp32")
    layers = ["layer_%02d-model_states.pt" % i for i in range(3)]
    for name in layers:  # PipelineModule without a tensor-parallel axis names them so
        mff.torch_save({"weight": torch.zeros(2)}, os.path.join(tag, name))
    case("ds_pipeline_layer_files", local,
         f"pytorch_model/{layers[0]}: a DeepSpeed pipeline-engine layer file (3 in the tag folder: "
         f"{', '.join(layers)}); pipeline-parallel DeepSpeed checkpoints are not supported",
         "a pipeline-parallel save (PipeDataParallelTopology: layer files without a model_NN part)", args=args)

    autoep = {"moe_layer_id": 0, "module_path": "model.layers.0.mlp", "num_experts": 8, "num_local_experts": 4,
              "ep_size": 2, "expert_key_prefix": "model.layers.0.mlp.experts",
              "checkpoint_format": "zero3_partitioned", "checkpoint_format_version": 1}

    def with_autoep(kind, rank, sd):
        if kind == "model":
            sd["ds_autoep_layers"] = [dict(autoep)]

    local, tag, args = write("ds_zero3_autoep", "zero3_w4_subgroups", with_autoep)
    case("ds_zero3_autoep", local,
         ["global_step5/zero_pp_rank_",
          "_mp_rank_00_model_states.pt:data.pkl: ds_autoep_layers holds 1 AutoEP MoE layer (first: "
          "'model.layers.0.mlp', num_experts 8, ep_size 2, checkpoint_format 'zero3_partitioned'): a DeepSpeed "
          "AutoEP (expert-parallel) checkpoint, which is not supported"],
         "an AutoEP ZeRO-3 save (ds_autoep_layers in every model-states file), refused before any size is checked",
         args=args)

    def with_legacy_autoep(kind, rank, sd):
        if kind == "model":
            sd["autoep_layers"] = [dict(autoep, module_path="model.layers.1.mlp", checkpoint_format="per_expert_files"),
                                   dict(autoep)]

    local, tag, args = write("ds_zero1_autoep_legacy_key", "zero1_fp16_fp32", with_legacy_autoep)
    case("ds_zero1_autoep_legacy_key", local,
         "pytorch_model/mp_rank_00_model_states.pt:data.pkl: autoep_layers holds 2 AutoEP MoE layers (first: "
         "'model.layers.1.mlp', num_experts 8, ep_size 2, checkpoint_format 'per_expert_files'): a DeepSpeed AutoEP "
         "(expert-parallel) checkpoint, which is not supported",
         "an AutoEP save under the older key autoep_layers", args=args)
