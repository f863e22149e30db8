"""verl FSDP2 checkpoints of the model families vmerge supports beyond Llama/Qwen2, each written
by transformers' own model class, torch 2.13's real fully_shard and torch.save.

    torchrun --standalone --nproc_per_node=2 gen_families.py CASE_DIR VARIANT

VARIANT: one tiny model per family, its config the real hub config's keys and ratios scaled down
(bf16 parameters, bf16 config, vocabulary eco_common.VOCAB so that FIXED_INPUT fits):
  qwen2_5_vl       Qwen2_5_VLForConditionalGeneration (Qwen2.5-VL-7B shape)
  qwen3_vl         Qwen3VLForConditionalGeneration (Qwen3-VL-8B shape, deepstack mergers)
  qwen3_vl_moe     Qwen3VLMoeForConditionalGeneration (Qwen3-VL-30B-A3B shape, fused experts)
  qwen3_moe_fused  Qwen3MoeForCausalLM (Qwen3-30B-A3B shape)
  gpt_oss          GptOssForCausalLM (gpt-oss-20b shape: sinks, router bias, expert biases)
  qwen3_next       Qwen3NextForCausalLM (Qwen3-Next-80B-A3B shape: linear attention, shared expert)
  glm4_moe         Glm4MoeForCausalLM (GLM-4.5 shape: dense first layer, shared expert, qk norm)
  kimi_k2          DeepseekV3ForCausalLM (Kimi-K2 shape: MLA with q_lora_rank, one group)
  mllama           MllamaForConditionalGeneration (Llama-3.2-11B-Vision shape: cross-attention
                   layers, tiled vision encoder with a gated global transformer)
  <family>_dcp     the same model saved by accelerate's own save_fsdp_model (FSDP2, sharded state
                   dict: plain DCP, config.json beside it in hf_config/) instead of verl's files
  <family>_user_table
                   config.json names an architecture vmerge ships no table for (MyMoeForCausalLM);
                   merged with user_table_my_moe.json, a table written from scratch, and no rebuild
  <family>_missing_block, <family>_missing_expert
                   planted faults the merge must refuse, naming what is missing: vision block 1
                   taken out of every rank file; config.json claiming one expert more than saved
  qwen2_5_vl_lora  the Qwen2.5-VL model wrapped by PEFT LoRA (r 4, alpha 8, random B) on the
                   language model's q/k/v/o and gate/up/down and on vision block 0's qkv, saved
                   as verl saves a PeftModel (its sharded state dict under transformers' and
                   PEFT's run-time names); oracles: the base's save_pretrained, PEFT's own
                   save_pretrained adapter (run-time names) and merge_and_unload()'s
                   save_pretrained (saved names), and oracle/saved_names.json
  qwen3_moe_fused_lora
                   the same for Qwen3-MoE (fused experts at run time, per expert on disk): LoRA
                   on q/k/v/o and the router mlp.gate, experts frozen
  qwen3_moe_fused_experts_lora
                   the same plus PEFT's target_parameters on the fused experts: refused by name

The checkpoint holds the RUNTIME state dict (what verl saves: model.state_dict() of the
FSDP-wrapped model), whose names and expert layouts transformers 5 changes on the way to disk;
the oracle is what the live model's own save_pretrained writes, so a merge passes only if its
output carries save_pretrained's names and layouts.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_dcp  # noqa: E402
import gen_fsdp2  # noqa: E402

# Token ids of the VL configs: inside the vocabulary, none of them in FIXED_INPUT (text only).
VL_TOKENS = dict(image_token_id=251, video_token_id=252, vision_start_token_id=253,
                 vision_end_token_id=254)
TEXT_COMMON = dict(vocab_size=E.VOCAB, hidden_size=64, num_attention_heads=4, max_position_embeddings=256,
                   tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


def qwen2_5_vl_config():
    from transformers import Qwen2_5_VLConfig
    text = dict(TEXT_COMMON, intermediate_size=176, num_hidden_layers=2, num_key_value_heads=2,
                max_window_layers=2, rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                       "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                  fullatt_block_indexes=[1], hidden_act="silu")
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **VL_TOKENS)


def qwen3_vl_vision(**extra):
    return dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16,
                deepstack_visual_indexes=[0, 1], hidden_act="gelu_pytorch_tanh", **extra)


QWEN3_VL_ROPE = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2],
                 "mrope_interleaved": True}


def qwen3_vl_config():
    from transformers import Qwen3VLConfig
    text = dict(TEXT_COMMON, intermediate_size=192, num_hidden_layers=2, num_key_value_heads=2,
                head_dim=16, rope_parameters=QWEN3_VL_ROPE)
    return Qwen3VLConfig(text_config=text, vision_config=qwen3_vl_vision(), **VL_TOKENS)


def qwen3_vl_moe_config():
    from transformers import Qwen3VLMoeConfig
    text = dict(TEXT_COMMON, intermediate_size=192, moe_intermediate_size=24, num_experts=4,
                num_experts_per_tok=2, decoder_sparse_step=1, num_hidden_layers=2,
                num_key_value_heads=2, head_dim=16, rope_parameters=QWEN3_VL_ROPE)
    return Qwen3VLMoeConfig(text_config=text, vision_config=qwen3_vl_vision(), **VL_TOKENS)


def qwen3_moe_config():
    from transformers import Qwen3MoeConfig
    return Qwen3MoeConfig(**TEXT_COMMON, intermediate_size=192, moe_intermediate_size=24, num_experts=4,
                          num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                          num_hidden_layers=2, num_key_value_heads=2, head_dim=16)


def gpt_oss_config():
    from transformers import GptOssConfig
    # YaRN's factor 32 over the original context, as gpt-oss's 131072 over 4096. The expert
    # width differs from hidden (gpt-oss has them equal) so that a transposed expert shows.
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 8}
    return GptOssConfig(**TEXT_COMMON, intermediate_size=48, num_local_experts=4, num_experts_per_tok=2,
                        num_hidden_layers=2, num_key_value_heads=2, head_dim=16, sliding_window=8,
                        layer_types=["sliding_attention", "full_attention"], attention_bias=True,
                        rope_parameters=rope)


def qwen3_next_config():
    from transformers import Qwen3NextConfig
    return Qwen3NextConfig(**TEXT_COMMON, intermediate_size=128, moe_intermediate_size=16,
                           shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                           num_hidden_layers=3, num_key_value_heads=2, head_dim=32,
                           layer_types=["linear_attention", "linear_attention", "full_attention"],
                           linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                           linear_num_key_heads=2, linear_num_value_heads=4, partial_rotary_factor=0.25)


def glm4_moe_config():
    from transformers import Glm4MoeConfig
    return Glm4MoeConfig(**TEXT_COMMON, intermediate_size=160, moe_intermediate_size=24, n_routed_experts=4,
                         num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                         num_hidden_layers=2, num_key_value_heads=2, head_dim=16, partial_rotary_factor=0.5,
                         attention_bias=True, use_qk_norm=True, n_group=1, topk_group=1,
                         norm_topk_prob=True, routed_scaling_factor=2.5, num_nextn_predict_layers=1)


def kimi_k2_config():
    from transformers import DeepseekV3Config
    rope = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 8}
    return DeepseekV3Config(**TEXT_COMMON, intermediate_size=160, moe_intermediate_size=24,
                            n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                            first_k_dense_replace=1, num_hidden_layers=2, num_key_value_heads=4,
                            q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                            v_head_dim=16, n_group=1, topk_group=1, norm_topk_prob=True,
                            routed_scaling_factor=2.827, rope_parameters=rope, num_nextn_predict_layers=0)


def mllama_config():
    from transformers import MllamaConfig
    text = dict(TEXT_COMMON, intermediate_size=176, num_hidden_layers=3, num_key_value_heads=2,
                cross_attention_layers=[1], pad_token_id=E.VOCAB - 1, rope_parameters={"rope_type": "default",
                                                                                      "rope_theta": 5e5})
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
                  image_size=28, patch_size=14, vision_output_dim=96, intermediate_layers_indices=[0],
                  max_num_tiles=2, supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]])
    return MllamaConfig(text_config=text, vision_config=vision, image_token_index=E.VOCAB - 2)


VARIANTS = {
    # name: (config builder, the Auto class that loads it)
    "qwen2_5_vl": (qwen2_5_vl_config, "image_text_to_text"),
    "qwen3_vl": (qwen3_vl_config, "image_text_to_text"),
    "qwen3_vl_moe": (qwen3_vl_moe_config, "image_text_to_text"),
    "qwen3_moe_fused": (qwen3_moe_config, "causal_lm"),
    "gpt_oss": (gpt_oss_config, "causal_lm"),
    "qwen3_next": (qwen3_next_config, "causal_lm"),
    "glm4_moe": (glm4_moe_config, "causal_lm"),
    "kimi_k2": (kimi_k2_config, "causal_lm"),
    "mllama": (mllama_config, "image_text_to_text"),
}


def wrapped_modules(model):
    """The modules verl's FSDP2 wrap policy shards one by one: those of the classes the model
    lists in _no_split_modules (decoder layers, vision blocks)."""
    classes = set(model._no_split_modules or [])
    return [m for m in model.modules() if type(m).__name__ in classes]


def save_pretrained_tensors(model, auto_class):
    """What the live model's own save_pretrained writes, read back with safetensors; checked to
    load back (transformers' from_pretrained) into exactly the live runtime state dict."""
    from safetensors.torch import load_file
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        saved = {}
        for name in files:
            saved.update(load_file(os.path.join(folder, name)))
        reloaded = E.auto_model_class(auto_class).from_pretrained(folder, dtype=model.dtype)
    live, back = model.state_dict(), reloaded.state_dict()
    assert set(live) == set(back), sorted(set(live) ^ set(back))[:8]
    for key, value in live.items():
        assert torch.equal(back[key], value), f"save_pretrained does not round-trip {key}"
    return saved


def randomize_buffers(model):
    """Router correction biases are buffers the init leaves at zero: give them values too, so a
    merge that drops or misplaces one is seen (save_pretrained writes them)."""
    torch.manual_seed(4321)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape) * 0.05)


# Planted faults: what the merge must name when it refuses.
FAULTS = {
    "_missing_block": "missing: visual.blocks.1.attn.proj.bias",
    "_missing_expert": "missing: model.layers.0.mlp.experts.4.down_proj.weight",
}


def plant_fault(fault, actor, rank, world):
    """Takes vision block 1 out of this rank's file, or (rank 0) makes config.json claim one
    expert more than the checkpoint holds."""
    if fault == "_missing_block":
        path = os.path.join(actor, f"model_world_size_{world}_rank_{rank}.pt")
        state = torch.load(path, weights_only=False)
        torch.save({k: v for k, v in state.items() if not k.startswith("model.visual.blocks.1.")}, path)
    elif fault == "_missing_expert" and rank == 0:
        path = os.path.join(actor, "huggingface", "config.json")
        with open(path) as f:
            config = json.load(f)
        key = "num_experts" if "num_experts" in config else "num_local_experts"
        config[key] += 1
        with open(path, "w") as f:
            json.dump(config, f, indent=2)


USER_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "user_table_my_moe.json")
USER_ARCHITECTURE = "MyMoeForCausalLM"


def split_variant(variant):
    """(family, layout is DCP, merged with a user's table, planted fault suffix or "")."""
    fault = next((f for f in FAULTS if variant.endswith(f)), "")
    variant = variant.removesuffix(fault)
    user_table = variant.endswith("_user_table")
    variant = variant.removesuffix("_user_table")
    return variant.removesuffix("_dcp"), variant.endswith("_dcp"), user_table, fault


def save_checkpoint(case_dir, model, cfg, rank, world, dcp):
    """verl's FSDP files, or accelerate's DCP folder; returns the checkpoint path, the backend
    and the --hf_config folder (DCP carries no config)."""
    if dcp:
        from accelerate.utils.constants import FSDP_MODEL_NAME
        gen_dcp.save_accelerate(model, os.path.join(case_dir, "ckpt", "checkpoint_0"), zstd=False)
        if rank == 0:
            E.save_hf_files(cfg, os.path.join(case_dir, "hf_config"))
        return f"ckpt/checkpoint_0/{FSDP_MODEL_NAME}_0", "dcp", "hf_config"
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    if rank == 0:
        os.makedirs(actor, exist_ok=True)
    dist.barrier()
    gen_fsdp2.write_verl_files(actor, model, rank, world, cfg)
    return "ckpt/global_step_1/actor", "fsdp", None


# PEFT LoRA cases: variant -> (family, LoraConfig targets, the error vmerge must refuse it with).
# Qwen2.5-VL: the language model's attention and MLP projections and one vision Linear (the vision
# MLP has gate/up/down_proj too, so a regex on full paths). Qwen3-MoE: attention and the router
# `mlp.gate` (a bare weight Parameter in transformers 5, which PEFT 0.21.2 wraps as a ParamWrapper
# with Linear-shaped lora_A/lora_B), the fused experts frozen; `_experts`: PEFT's target_parameters
# on the fused experts too, which vmerge refuses by name (per-expert blocks in one factor pair).
MOE_ATTENTION_AND_ROUTER = r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.gate)"
LORA_CASES = {
    "qwen2_5_vl": ("qwen2_5_vl", dict(
        target_modules=r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
                       r"|model\.visual\.blocks\.0\.attn\.qkv"), None),
    "qwen3_moe_fused": ("qwen3_moe_fused", dict(target_modules=MOE_ATTENTION_AND_ROUTER), None),
    "qwen3_moe_fused_experts": ("qwen3_moe_fused", dict(
        target_modules=MOE_ATTENTION_AND_ROUTER,
        target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]),
        "has a LoRA adapter on a parameter other than its weight (PEFT's target_parameters); it wraps "
        "'base_model.model.model.layers.0.mlp.experts.base_layer.base_layer.down_proj'"),
}


def add_lora(model, targets):
    """PEFT LoRA with random B (PEFT starts B at zero, which would make the adapter a no-op)."""
    from peft import LoraConfig, get_peft_model
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, **targets,
                                                  task_type="CAUSAL_LM", lora_dropout=0.0))
    torch.manual_seed(99)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.2)
    return peft_model.eval()


def saved_name_map(model, saved):
    """Each run-time state-dict name of `model` -> the name its save_pretrained wrote the same
    tensor under (`saved`), paired by value: every tensor of the random model is distinct. A fused
    expert tensor (3-D: [experts, out, in]) is saved split per expert, so it pairs with no one
    saved tensor and has no entry (no adapter in these cases targets one)."""
    out = {}
    for key, value in model.state_dict().items():
        same = [k for k, v in saved.items() if v.shape == value.shape and v.dtype == value.dtype and torch.equal(v, value)]
        if not same and value.dim() == 3:
            continue
        assert len(same) == 1, f"{key}: saved as {same}"
        out[key] = same[0]
    return out


def lora_main(case_dir, lora_case, rank, world):
    """A PeftModel of the family saved by verl's FSDP2 files, with PEFT's oracles."""
    family, targets, expected_error = LORA_CASES[lora_case]
    make_config, auto_class = VARIANTS[family]
    cfg = make_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = [E.auto_model_class(auto_class)._model_mapping[type(cfg)].__name__]
    model = E.build_model(cfg, auto_class=auto_class)
    base_oracle = save_pretrained_tensors(model, auto_class) if rank == 0 else None
    if rank == 0:   # the fold oracle and the base oracle carry saved names, PEFT's adapter run-time ones
        os.makedirs(os.path.join(case_dir, "oracle"), exist_ok=True)
        with open(os.path.join(case_dir, "oracle", "saved_names.json"), "w") as f:
            json.dump(saved_name_map(model, base_oracle), f, indent=2, sort_keys=True)
    peft_model = add_lora(model, targets)
    logits = E.live_logits(peft_model)
    if rank == 0:
        gen_fsdp2.lora_oracle(case_dir, peft_model, lambda folded: save_pretrained_tensors(folded, auto_class))
    dist.barrier()
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    gen_fsdp2.shard(peft_model, wrapped_modules(model), gen_fsdp2.make_mesh(world, None, ("fsdp",)))
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    if rank == 0:
        os.makedirs(actor, exist_ok=True)
    dist.barrier()
    gen_fsdp2.write_verl_files(actor, peft_model, rank, world, cfg, peft_model)
    if gathered_equals(peft_model, before, rank):
        E.write_oracle(case_dir, base_oracle, logits)
        E.write_case(case_dir, producer=f"PEFT LoRA on transformers {cfg.architectures[0]}, torch {torch.__version__} "
                     f"fully_shard ({lora_case}_lora, {world} ranks), verl file layout; oracles: save_pretrained, "
                     "PEFT's save_pretrained and merge_and_unload",
                     checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "fsdp"],
                     output_dtype="bfloat16", oracle_dtypes=True, hf_load=True, logits_exact=True,
                     hf_auto_class=auto_class, adapter=True, expected_error=expected_error)


def gathered_equals(model, before, rank):
    """The producer itself as a check: the sharded model's state gathered back (a collective, every
    rank takes part) equals, on rank 0, the state taken before sharding. True on rank 0."""
    full = E.full_tensors(model.state_dict())
    if rank != 0:
        return False
    assert set(full) == set(before), sorted(set(full) ^ set(before))[:8]
    for k, v in full.items():
        assert torch.equal(v, before[k]), k
    return True


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    if variant.endswith("_lora"):
        rank, world = E.init_gloo()
        lora_main(case_dir, variant.removesuffix("_lora"), rank, world)
        dist.barrier()
        dist.destroy_process_group()
        return
    family, dcp, user_table, fault = split_variant(variant)
    make_config, auto_class = VARIANTS[family]
    rank, world = E.init_gloo()
    cfg = make_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = [E.auto_model_class(auto_class)._model_mapping[type(cfg)].__name__]
    model = E.build_model(cfg, auto_class=auto_class)
    randomize_buffers(model)
    oracle = None
    if rank == 0:
        oracle = save_pretrained_tensors(model, auto_class)
    dist.barrier()
    logits = E.live_logits(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    gen_fsdp2.shard(model, wrapped_modules(model), gen_fsdp2.make_mesh(world, None, ("fsdp",)))
    merge_args = []
    if user_table:   # transformers loads by model_type; vmerge chooses its tables by architectures
        cfg.architectures = [USER_ARCHITECTURE]
        merge_args = ["--architecture_table", os.path.join(case_dir, os.path.basename(USER_TABLE))]
        if rank == 0:
            os.makedirs(case_dir, exist_ok=True)
            shutil.copyfile(USER_TABLE, merge_args[1])
    checkpoint, backend, hf_config = save_checkpoint(case_dir, model, cfg, rank, world, dcp)
    if fault:
        dist.barrier()
        plant_fault(fault, os.path.join(case_dir, checkpoint), rank, world)

    if gathered_equals(model, before, rank):
        E.write_oracle(case_dir, oracle, logits)
        E.write_case(case_dir, producer=f"transformers {cfg.architectures[0]}, torch {torch.__version__} "
                     f"fully_shard ({variant}, {world} ranks), "
                     f"{'accelerate save_fsdp_model (DCP)' if dcp else 'verl file layout'}; oracle: save_pretrained",
                     checkpoint=checkpoint, merge_args=["--backend", backend] + merge_args, hf_config=hf_config,
                     output_dtype="bfloat16", oracle_dtypes=True, hf_load=not fault, logits_exact=True,
                     hf_auto_class=auto_class, expected_error=FAULTS.get(fault), **quantized_fields(variant))
    dist.barrier()
    dist.destroy_process_group()


def quantized_fields(variant):
    """MoE cases merged with the 4-bit float schemes: MLA's fused q_a/kv_a, each expert's and the
    shared expert's gate/up sharing NVFP4 global scales. Checked bit for bit against
    compressed-tensors' quantizer only: transformers 5 fuses the experts into 3-D parameters, and
    its compressed-tensors load does not fill them from per-expert tensors (whoever wrote them)."""
    if variant in ("kimi_k2", "qwen3_moe_fused"):
        return dict(quantized_modes=["nvfp4", "mxfp4"], quantized_load=False)
    return {}


if __name__ == "__main__":
    main()
