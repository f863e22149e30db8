"""Qwen2.5-VL checkpoints written by mbridge's own Qwen2_5VLModel on megatron-core 0.16 (local,
non-TE spec), the way verl's Megatron engine trains a vision-language actor with mbridge.

    torchrun --standalone --nproc_per_node=4 gen_megatron_vl.py CASE_DIR VARIANT

VARIANT (4 gloo ranks, TP 2 x PP 2; the tiny Qwen2_5_VLForConditionalGeneration of
gen_families.qwen2_5_vl_config: 2 text layers, 2 vision blocks of 2 heads, bf16):
  qwen2_5_vl_tp2pp2_dist   megatron.core.dist_checkpointing.save of the model's
                           sharded_state_dict() into ckpt/global_step_1/actor/dist_ckpt/ (verl's
                           layout with use_dist_checkpointing before the v2 refactor, formats-today.md
                           §1.6), config and tokenizer in actor/huggingface/
  qwen2_5_vl_tp2pp2_legacy verl's legacy per-rank files (<= v0.4): actor/model/mp_rank_TT_PPP/
                           model.pt, a list of the model's state_dict_for_save_checkpoint()
  qwen2_5_vl_tp2pp2_dist_missing_block
                           the same with config.json claiming a vision block more than the
                           checkpoint holds: the merge must refuse it, naming the block's tensors

How the model is made: transformers builds the HF model (seeded) and save_pretrained writes it;
mbridge's Qwen2_5VLBridge (the wheel's own name mapping and _weight_to_mcore_format, the vision
QKV regroup included) loads those files into mbridge's own Qwen2_5VLModel on every rank through
its load_weights (TP split and scatter as mbridge does it). The oracle is the HF model's own
save_pretrained output and the logits are the live HF model's: the merged folder must give back
exactly what the model was built from.

Patched, because this host has neither Transformer Engine nor a GPU, and said so:
  - the layer specs: mbridge's provider asks for TE modules; the same provider is written here
    with megatron-core's local specs (get_gpt_decoder_block_spec(use_transformer_engine=False),
    get_vit_layer_with_local_spec, ColumnParallelLinear / RowParallelLinear for the projector);
    the parameter names are the local spec's (input_layernorm, pre_mlp_layernorm where TE fuses
    layer_norm_weight into linear_qkv / linear_fc1; the table reads both), and mbridge's name
    mapping, which knows only the TE names, is asked with the TE name of those two norms.
  - mbridge's get_vision_model_config hard-codes Qwen2.5-VL-7B's vision sizes (32 blocks of
    1280, 16 heads); it is replaced by one setting the same fields from vision_config.
  - mbridge 0.15.1 reads the text sizes, rope_theta and rope_scaling["mrope_section"] at the
    top level of the HF config (transformers 4.x's layout); transformers 5 keeps them in
    text_config and rope_parameters, so the bridge gets a copy with them lifted up.
  - the transformer config: sequence_parallel off (the local spec's norm refuses it), CPU
    initialisation, no fused softmax, local transformer_impl.
  - which config mbridge's TP split asks for the projector (merger) tensors: mbridge 0.15.1 gives
    every name the language config, whose gated_linear_unit makes it split the projector's
    linear_fc1 as [gate_r; up_r] halves per rank, but the projector is not gated (mbridge's own
    get_vision_projection_config) and megatron-core shards it as plain row blocks: the model
    loaded would hold the merger's fc1 rows permuted (TP > 1). The bridge is answered with the
    projection config for vision_model.projection.* names.
  - CUDA calls megatron-core makes while building (MultimodalRotaryEmbedding's inv_freq) and
    saving (gen_megatron.cuda_calls_on_cpu).
  - the vocabulary: 258 rows (eco_common.VOCAB rounded up to a multiple of TP), because mbridge's
    provider passes vocab_size to VocabParallelEmbedding unpadded.
"""
import copy
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_families as G  # noqa: E402
import gen_megatron as GM  # noqa: E402

TP, PP = 2, 2
VARIANTS = ("qwen2_5_vl_tp2pp2_dist", "qwen2_5_vl_tp2pp2_dist_missing_block", "qwen2_5_vl_tp2pp2_legacy")
# The planted fault: config.json claims a third vision block; the merge must name what is missing.
MISSING_BLOCK_ERROR = "missing: visual.blocks.2.attn.proj.bias"
AUTO_CLASS = "image_text_to_text"


def bridge_hf_config(cfg):
    """The HF config as mbridge 0.15.1 reads it: text sizes and RoPE at the top level."""
    shim = copy.deepcopy(cfg)
    text = cfg.text_config
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "rms_norm_eps", "vocab_size", "max_position_embeddings",
                "attention_dropout"):
        setattr(shim, key, getattr(text, key))
    rope = text.rope_parameters
    shim.rope_theta = rope["rope_theta"]
    shim.rope_scaling = {"mrope_section": rope["mrope_section"], "rope_type": "default"}
    return shim


def vision_model_config(config, vision):
    """mbridge's get_vision_model_config with vision_config's sizes instead of the 7B's."""
    from mbridge.models.qwen2_5_vl import transformer_config as T
    config = T.get_vision_model_config(config)   # the wheel's own settings first
    config.num_layers = vision.depth
    config.num_attention_heads = vision.num_heads
    config.hidden_size = vision.hidden_size
    config.ffn_hidden_size = vision.intermediate_size
    config.kv_channels = vision.hidden_size // vision.num_heads
    config.num_query_groups = vision.num_heads
    config.patch_size = vision.patch_size
    config.temporal_patch_size = vision.temporal_patch_size
    config.spatial_merge_size = vision.spatial_merge_size
    config.in_channels = getattr(vision, "in_channels", 3)
    config.fullatt_block_indexes = list(vision.fullatt_block_indexes)
    config._qwen2_5_vl_window_size = vision.window_size
    config.pipeline_model_parallel_size = 1      # as mbridge's provider sets it
    config.first_pipeline_num_layers = None
    return config


def build_model(bridge, hf_cfg):
    """mbridge's Qwen2_5VLBridge._model_provider with the local specs (see the docstring)."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.models.gpt.moe_module_specs import MLPSubmodules
    from megatron.core.models.vision.vit_layer_specs import get_vit_layer_with_local_spec
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from mbridge.models.qwen2_5_vl import transformer_config as T
    from mbridge.models.qwen2_5_vl.model import Qwen2_5VLModel
    vision_config = vision_model_config(copy.deepcopy(bridge.config), hf_cfg.vision_config)
    projection_config = T.get_vision_projection_config(
        copy.deepcopy(bridge.config), vision_config.hidden_size,
        spatial_merge_size=hf_cfg.vision_config.spatial_merge_size)
    bridge.projection_config = projection_config
    language_spec = get_gpt_decoder_block_spec(bridge.config, use_transformer_engine=False,
                                               normalization="RMSNorm")
    model = Qwen2_5VLModel(
        language_transformer_config=bridge.config, language_transformer_layer_spec=language_spec,
        language_vocab_size=bridge.hf_config.vocab_size,
        language_max_sequence_length=bridge.hf_config.max_position_embeddings,
        vision_transformer_config=vision_config,
        vision_transformer_layer_spec=get_vit_layer_with_local_spec(),
        vision_projection_config=projection_config,
        vision_projection_layer_spec=MLPSubmodules(linear_fc1=ColumnParallelLinear,
                                                   linear_fc2=RowParallelLinear),
        vision_projection_type="mlp", language_rotary_base=bridge.hf_config.rope_theta,
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        add_decoder=True, add_encoder=True, parallel_output=True,
        language_share_embeddings_and_output_weights=False)
    return model.to(torch.bfloat16).eval()


# The local spec's norms and the TE names mbridge's mapping knows them by (the same tensors).
LOCAL_TO_TE_NORMS = ((".input_layernorm.weight", ".self_attention.linear_qkv.layer_norm_weight"),
                     (".pre_mlp_layernorm.weight", ".mlp.linear_fc1.layer_norm_weight"))


def make_bridge(hf_cfg):
    from mbridge.models.qwen2_5_vl import Qwen2_5VLBridge

    class LocalSpecBridge(Qwen2_5VLBridge):
        """mbridge's bridge, its name mapping asked with the TE name of a local-spec norm."""

        def _weight_name_mapping_mcore_to_hf(self, name):
            for local, te in LOCAL_TO_TE_NORMS:
                if name.endswith(local):
                    name = name[:-len(local)] + te
            return super()._weight_name_mapping_mcore_to_hf(name)

        def _get_mcore_config_by_name(self, name):
            # The projector's fc1 is not gated (get_vision_projection_config); the wheel answers
            # the language config (gated) and would split it over TP as [gate_r; up_r] halves.
            if name.startswith("vision_model.projection."):
                return self.projection_config
            return super()._get_mcore_config_by_name(name)

    bridge = LocalSpecBridge(bridge_hf_config(hf_cfg), dtype=torch.bfloat16)
    bridge.set_extra_args(sequence_parallel=False, use_cpu_initialization=True,
                          masked_softmax_fusion=False, transformer_impl="local",
                          gradient_accumulation_fusion=False)
    return bridge


def save_dist_ckpt(model, ckpt_dir):
    """What verl's checkpoint manager does with use_dist_checkpointing: the model's sharded
    state dict, its keys at the top level, saved by dist_checkpointing (torch_dist)."""
    from megatron.core import dist_checkpointing
    if dist.get_rank() == 0:
        os.makedirs(ckpt_dir)
    dist.barrier()
    with GM.cuda_calls_on_cpu(synchronize=True):
        dist_checkpointing.save(model.sharded_state_dict(), ckpt_dir)


def save_verl_legacy(model, actor, ep=1, drop_expert=None, gpt_model=None, prefix=""):
    """verl's legacy Megatron files (<= v0.4): actor/model/mp_rank_TT_PPP[_EEE]/model.pt (the
    expert-parallel rank with EP > 1, written by expert data-parallel rank 0), a list of one state
    dict per virtual-pipeline chunk (one here), each the model's state_dict_for_save_checkpoint().
    `drop_expert` (global layer, local expert): that expert's tensors are left out (a planted
    fault); `gpt_model` (default `model`) holds the decoder, its keys under `prefix`."""
    from megatron.core import parallel_state as ps
    tp, pp = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    if ep > 1 and ps.get_expert_data_parallel_rank() != 0:
        return
    name = f"mp_rank_{tp:02d}_{pp:03d}" + (f"_{ps.get_expert_model_parallel_rank():03d}" if ep > 1 else "")
    state = model.state_dict_for_save_checkpoint()
    if drop_expert is not None:
        for local, layer in enumerate((gpt_model or model).decoder.layers):
            if layer.layer_number - 1 == drop_expert[0]:
                marker = f"{prefix}decoder.layers.{local}.mlp.experts.local_experts.{drop_expert[1]}."
                state = {k: v for k, v in state.items() if not k.startswith(marker)}
    rank_dir = os.path.join(actor, "model", name)
    os.makedirs(rank_dir)
    torch.save([state], os.path.join(rank_dir, "model.pt"))


def layout_text(tp, pp, ep, legacy):
    """The producer text's parallel and file layout: "TP 2 x PP 2 on gloo, torch_dist (...)"."""
    files = (f"verl legacy model/mp_rank_TT_PPP{'_EEE' if ep > 1 else ''}/model.pt" if legacy else
             "torch_dist (dist_checkpointing.save), verl dist_ckpt layout")
    return f"TP {tp} x PP {pp}" + (f" x EP {ep}" if ep > 1 else "") + f" on gloo, {files}"


def claim_one_more_vision_block(hf_dir):
    """The planted fault: config.json says the vision tower has a block the checkpoint lacks
    (a stacked torch_dist tensor cannot lose one layer and stay a valid archive: megatron-core
    and DCP both check that the chunks cover it)."""
    path = os.path.join(hf_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["vision_config"]["depth"] += 1
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def read_safetensors(folder):
    from safetensors.torch import load_file
    tensors = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(folder, name)))
    return tensors


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {VARIANTS}"
    rank, world = E.init_gloo()
    assert world == TP * PP, f"run with --nproc_per_node={TP * PP}"
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)

    cfg = G.qwen2_5_vl_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    # mbridge's provider hands vocab_size to VocabParallelEmbedding unpadded: it must divide by TP.
    cfg.text_config.vocab_size = -(-E.VOCAB // TP) * TP
    hf_dir = os.path.join(case_dir, "hf_model")
    if rank == 0:   # the HF model every rank's mbridge reads: save_pretrained's own files
        os.makedirs(case_dir, exist_ok=True)
        hf_model = E.build_model(cfg, auto_class=AUTO_CLASS)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
    dist.barrier()

    bridge = make_bridge(cfg)
    with GM.cuda_calls_on_cpu():   # MultimodalRotaryEmbedding builds inv_freq on current_device()
        model = build_model(bridge, cfg)
    bridge.load_weights([model], hf_dir)
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    missing_block = variant.endswith("_missing_block")
    legacy = variant.endswith("_legacy")
    if legacy:
        save_verl_legacy(model, actor)
    else:
        save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    if rank == 0:
        E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
        if missing_block:
            claim_one_more_vision_block(os.path.join(actor, "huggingface"))
        import megatron.core
        import mbridge
        E.write_oracle(case_dir, read_safetensors(hf_dir), logits)
        E.write_case(case_dir, producer=f"mbridge {mbridge.__version__} Qwen2_5VLModel (bridge load_weights from "
                     f"save_pretrained), megatron-core {megatron.core.__version__} local spec, "
                     + layout_text(TP, PP, 1, legacy),
                     checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "megatron"],
                     output_dtype="bfloat16", oracle_dtypes=True, hf_load=not missing_block,
                     logits_exact=True, hf_auto_class=AUTO_CLASS,
                     expected_error=MISSING_BLOCK_ERROR if missing_block else None)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
