"""GPT-OSS checkpoints in the layout Megatron-Bridge's GPTOSSBridge gives a megatron-core GPTModel,
written by megatron-core 0.16 itself (local, non-TE spec) on gloo.

    torchrun --standalone --nproc_per_node=4 gen_megatron_gpt_oss.py CASE_DIR VARIANT

VARIANT (4 gloo ranks; the tiny GptOssForCausalLM of gen_families.gpt_oss_config, gpt-oss-20b's
keys scaled down: 2 layers, sliding then full attention, 4 experts of width 48 over hidden 64,
attention sinks, q/k/v/o, router and expert biases, bf16):
  gpt_oss_tp2pp2_dist      TP 2 x PP 2, dist_checkpointing.save of the model's sharded_state_dict()
                           into verl's actor/dist_ckpt/, config and tokenizer in actor/huggingface/
  gpt_oss_tp2pp2_legacy    TP 2 x PP 2, verl's legacy actor/model/mp_rank_TT_PPP/model.pt
  gpt_oss_pp2ep2_dist, gpt_oss_pp2ep2_legacy   TP 1 x PP 2 x EP 2 (two experts per expert-parallel
                           rank; legacy folders mp_rank_00_PPP_EEE)
  gpt_oss_tp2pp2_legacy_missing_expert   the planted fault: expert 1 of layer 0 left out of every
                           rank file; the merge must name the missing key

Megatron-Bridge does not install here (Transformer Engine, transformers < 5), so its GPTOSSBridge
is not run: the GPTModel is built with the settings its provider_bridge gives (RMSNorm, gated
linear unit with biases, softmax_type "learnable", a sliding window on every other layer, quick
GELU clamped at 7 with the linear half offset by 1, YaRN, the router without load balancing)
and each parameter is filled from the HF model's save_pretrained tensors by the bridge's mapping
facts (mapping_registry):
  embed_tokens, norm, lm_head, the norms, o_proj, router    as they are
  q/k/v (weight and bias)        Megatron's linear_qkv, grouped per query group [q heads; k; v]
  self_attn.sinks                core_attention.softmax_offset
  experts.gate_up_proj [E, H, 2F] (columns gate0, up0, gate1, up1, ...)   expert e's
                                 linear_fc1 [2F, H] = the slice [e] transposed, its even rows (gate)
                                 then its odd rows (up); gate_up_proj_bias alike
  experts.down_proj [E, F, H]    expert e's linear_fc2 [H, F] = the slice [e] transposed;
                                 down_proj_bias[e] its bias
A TP rank holds its rows (column parallel), its columns (row parallel), its heads' sinks; an EP
rank its experts (SequentialMLP local_experts.<j>), whole: megatron-core 0.16 takes experts with
biases only at expert tensor parallel size 1 ("Bias in Moe is only supported when ETP==1"), so
every TP rank of a legacy save holds the same experts.

Independent check of that mapping: a TP 1 x PP 1 GPTModel filled the same way must give the HF
model's logits on FIXED_INPUT (megatron-core's own attention sinks, window, YaRN and clamped
SwiGLU against transformers'). The oracle of the merge is the HF model's save_pretrained output
and its live logits. Patches as in gen_megatron_qwen3_vl.py: the CUDA calls of CPU initialisation
and of the torch_dist save, the causal and sliding-window masks of the unfused softmax built on
the CPU and the router's gating in torch for the check's forward (forward_on_cpu); sequence parallelism off; no fusions.
"""
import contextlib
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_families as G  # noqa: E402
import gen_megatron as GM  # noqa: E402
import gen_megatron_vl as VL  # noqa: E402

# variant -> (TP, PP, EP)
VARIANTS = {"gpt_oss_tp2pp2_dist": (2, 2, 1), "gpt_oss_tp2pp2_legacy": (2, 2, 1),
            "gpt_oss_pp2ep2_dist": (1, 2, 2), "gpt_oss_pp2ep2_legacy": (1, 2, 2),
            "gpt_oss_tp2pp2_legacy_missing_expert": (2, 2, 1)}
MISSING_EXPERT_ERROR = "has no decoder.layers.0.mlp.experts.1.linear_fc1.weight"
# megatron-core's logits against transformers' (bf16 weights, different kernels): 0.0078 at most
# with the mapping below, 0.081 with fc1 left interleaved, on logits of magnitude ~1.
LOGITS_ATOL = 0.03


def hf_config(tp):
    cfg = G.gpt_oss_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = ["GptOssForCausalLM"]
    cfg.vocab_size = -(-E.VOCAB // tp) * tp   # VocabParallelEmbedding divides it by TP
    return cfg


def transformer_config(cfg, tp, pp, ep):
    """GPTOSSBridge.provider_bridge's settings for this config (CPU, no fusions)."""
    from megatron.core.fusions.fused_bias_geglu import quick_gelu
    from megatron.core.transformer.transformer_config import TransformerConfig
    rope = cfg.rope_parameters
    config = TransformerConfig(
        num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size, ffn_hidden_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads, num_query_groups=cfg.num_key_value_heads,
        kv_channels=cfg.head_dim, normalization="RMSNorm", layernorm_epsilon=cfg.rms_norm_eps,
        gated_linear_unit=True, add_bias_linear=True, add_qkv_bias=False, activation_func=quick_gelu,
        activation_func_clamp_value=7.0, glu_linear_offset=1.0, softmax_type="learnable",
        window_size=(cfg.sliding_window - 1, 0), window_attn_skip_freq=2,
        num_moe_experts=cfg.num_local_experts, moe_ffn_hidden_size=cfg.intermediate_size,
        moe_router_topk=cfg.num_experts_per_tok, moe_router_pre_softmax=False,
        moe_router_load_balancing_type="none", moe_grouped_gemm=False, moe_token_dispatcher_type="allgather",
        hidden_dropout=0.0, attention_dropout=0.0, bias_activation_fusion=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
        use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True, pipeline_dtype=torch.bfloat16,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, expert_model_parallel_size=ep,
        expert_tensor_parallel_size=1, sequence_parallel=False)
    # GPTModel reads YaRN's settings from the config (the bridge sets them as provider fields).
    config.yarn_rotary_scaling_factor = rope["factor"]
    config.yarn_original_max_position_embeddings = rope["original_max_position_embeddings"]
    config.yarn_beta_fast, config.yarn_beta_slow = rope["beta_fast"], rope["beta_slow"]
    config.yarn_correction_range_round_to_int = bool(rope.get("truncate", True))
    config.yarn_mscale, config.yarn_mscale_all_dim = None, None
    return config


def build_gpt(config, cfg, pre, post):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    with GM.cuda_calls_on_cpu():
        model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=cfg.vocab_size,
                         max_sequence_length=cfg.max_position_embeddings, pre_process=pre, post_process=post,
                         share_embeddings_and_output_weights=False, position_embedding_type="yarn",
                         rotary_base=int(cfg.rope_parameters["rope_theta"]))
    return model.to(torch.bfloat16).eval()


def grouped_qkv(q, k, v, heads, groups):
    """QKVMapping: rows (or bias entries) grouped per query group, [q heads of g; k_g; v_g]."""
    per = heads // groups
    d = q.shape[0] // heads
    parts = []
    for g in range(groups):
        parts += [q[g * per * d:(g + 1) * per * d], k[g * d:(g + 1) * d], v[g * d:(g + 1) * d]]
    return torch.cat(parts)


def deinterleaved(gate_up):
    """GPTOSSMLPGateUpProjMapping: HF's interleaved [..., 2F] columns (gate0, up0, gate1, ...) as
    Megatron's fc1 rows [gate; up]: the even entries, then the odd ones, along dim 0."""
    return torch.cat((gate_up[::2], gate_up[1::2]))


def megatron_tensor(name, hf, cfg):
    """The global megatron-core tensor of `name` (global layer and expert numbers) from the HF
    tensors, by Megatron-Bridge's GPT-OSS mapping."""
    plain = {"embedding.word_embeddings.weight": "model.embed_tokens.weight",
             "decoder.final_layernorm.weight": "model.norm.weight", "output_layer.weight": "lm_head.weight"}
    if name in plain:
        return hf[plain[name]]
    _, _, i, rest = name.split(".", 3)
    p = f"model.layers.{i}."
    per_layer = {"input_layernorm.weight": "input_layernorm.weight",
                 "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
                 "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
                 "self_attention.linear_proj.bias": "self_attn.o_proj.bias",
                 "self_attention.core_attention.softmax_offset": "self_attn.sinks",
                 "mlp.router.weight": "mlp.router.weight", "mlp.router.bias": "mlp.router.bias"}
    if rest in per_layer:
        return hf[p + per_layer[rest]]
    if rest.startswith("self_attention.linear_qkv."):
        what = rest.rsplit(".", 1)[1]
        return grouped_qkv(*(hf[f"{p}self_attn.{x}_proj.{what}"] for x in "qkv"),
                           cfg.num_attention_heads, cfg.num_key_value_heads)
    _, _, e, module, what = rest.split(".")   # mlp.experts.<e>.linear_fcN.<weight|bias>
    e = int(e)
    if module == "linear_fc1":
        return deinterleaved(hf[p + "mlp.experts.gate_up_proj"][e].t() if what == "weight"
                             else hf[p + "mlp.experts.gate_up_proj_bias"][e])
    return hf[p + "mlp.experts.down_proj"][e].t() if what == "weight" else hf[p + "mlp.experts.down_proj_bias"][e]


def global_name(local, layer_offset, expert_offset):
    """A local state-dict key with its global layer number and, for a SequentialMLP expert,
    `mlp.experts.<global e>.` in place of `mlp.experts.local_experts.<j>.`."""
    parts = local.split(".")
    if parts[:2] == ["decoder", "layers"]:
        parts[2] = str(int(parts[2]) + layer_offset)
        if parts[3:6] == ["mlp", "experts", "local_experts"]:
            parts[5:7] = [str(int(parts[6]) + expert_offset)]
    return ".".join(parts)


def rank_piece(full, local_shape, name, tp_rank, tp):
    """This TP rank's piece of `full`: rows or columns as megatron-core's parallel layers split
    them; a gated fc1 holds its share of the gate rows then of the up rows."""
    if tuple(full.shape) == tuple(local_shape):
        return full
    if ".linear_fc1." in name:
        gate, up = full.chunk(2)
        return torch.cat((gate.chunk(tp)[tp_rank], up.chunk(tp)[tp_rank]))
    dim = next(d for d in range(full.dim()) if full.shape[d] != local_shape[d])
    return full.chunk(tp, dim=dim)[tp_rank]


@torch.no_grad()
def load_from_hf(model, hf, cfg, layer_offset, ranks):
    """Every parameter of `model` from the HF tensors; ranks: (tp rank, tp, expert tp rank,
    expert tp, expert offset)."""
    tp_rank, tp, etp_rank, etp, expert_offset = ranks
    state = model.state_dict()
    for local, value in state.items():
        if local.endswith("_extra_state"):
            continue
        name = global_name(local, layer_offset, expert_offset)
        expert = ".mlp.experts." in name
        piece = rank_piece(megatron_tensor(name, hf, cfg), value.shape, name,
                           etp_rank if expert else tp_rank, etp if expert else tp)
        assert piece.shape == value.shape, (local, name, piece.shape, value.shape)
        value.copy_(piece.to(value.dtype))


def stage_offsets(cfg, ep):
    from megatron.core import parallel_state as ps
    layers = cfg.num_hidden_layers // ps.get_pipeline_model_parallel_world_size()
    per_rank = cfg.num_local_experts // ep
    return layers * ps.get_pipeline_model_parallel_rank(), per_rank * ps.get_expert_model_parallel_rank()


@contextlib.contextmanager
def forward_on_cpu():
    """Inside the block: megatron-core 0.16's unfused softmax builds its causal and sliding-window
    masks on the CPU, not on "cuda" (True: masked, a key after the query or more than window[0]
    before it, as megatron.core.transformer.utils defines them); the router's gating takes
    torch's addmm, its own path when Transformer Engine is absent (moe_utils leaves
    te_general_gemm undefined when the import fails, not None)."""
    from megatron.core.fusions import fused_softmax as FS
    from megatron.core.transformer.moe import moe_utils
    saved = FS.get_default_causal_mask, FS.get_sliding_window_causal_mask
    moe_utils.te_general_gemm = None

    def window_mask(sq, skv, window):
        query = torch.arange(sq).unsqueeze(1) + (skv - sq)
        key = torch.arange(skv).unsqueeze(0)
        return (key > query + window[1]) | (key < query - window[0])

    FS.get_default_causal_mask = lambda sq: window_mask(sq, sq, (sq, 0))
    FS.get_sliding_window_causal_mask = window_mask
    try:
        yield
    finally:
        FS.get_default_causal_mask, FS.get_sliding_window_causal_mask = saved


@torch.no_grad()
def mcore_logits(hf, cfg):
    """megatron-core's own forward of a TP 1 x PP 1 GPTModel loaded by the mapping (rank 0 only,
    after the model-parallel groups are remade at size 1)."""
    model = build_gpt(transformer_config(cfg, 1, 1, 1), cfg, True, True)
    load_from_hf(model, hf, cfg, 0, (0, 1, 0, 1, 0))
    ids = torch.tensor(E.FIXED_INPUT)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    with GM.cuda_calls_on_cpu(), GM.no_cuda_rng_fork(), forward_on_cpu():
        logits = model(ids, positions, attention_mask=None)
    return logits.float()


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {sorted(VARIANTS)}"
    tp, pp, ep = VARIANTS[variant]
    missing_expert = variant.endswith("_missing_expert")
    rank, world = E.init_gloo()
    assert world == 4, "run with --nproc_per_node=4"
    from megatron.core import parallel_state as ps
    cfg = hf_config(tp)
    hf_dir = os.path.join(case_dir, "hf_model")
    if rank == 0:
        os.makedirs(case_dir, exist_ok=True)
        hf_model = E.build_model(cfg)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
    dist.barrier()
    hf = VL.read_safetensors(hf_dir)

    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 expert_model_parallel_size=ep, expert_tensor_parallel_size=1)
    model = build_gpt(transformer_config(cfg, tp, pp, ep), cfg, ps.is_pipeline_first_stage(),
                      ps.is_pipeline_last_stage())
    layer_offset, expert_offset = stage_offsets(cfg, ep)
    load_from_hf(model, hf, cfg, layer_offset,
                 (ps.get_tensor_model_parallel_rank(), tp, ps.get_expert_tensor_parallel_rank(),
                  ps.get_expert_tensor_parallel_world_size(), expert_offset))
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    legacy = "_legacy" in variant
    if legacy:
        VL.save_verl_legacy(model, actor, ep, drop_expert=(0, 1) if missing_expert else None)
    else:
        VL.save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    dist.barrier()
    ps.destroy_model_parallel()
    ps.initialize_model_parallel()   # every rank a model of its own (a collective); rank 0 checks
    if rank == 0:
        check = mcore_logits(hf, cfg)
        gap = (check - logits).abs().max().item()
        print(f"megatron-core TP1 PP1 logits vs transformers: max |diff| {gap:.4g}", flush=True)
        assert gap <= LOGITS_ATOL, f"megatron-core's logits differ from transformers' by {gap}: the mapping is wrong"
        write_case_files(case_dir, cfg, actor, hf, logits, variant, legacy, missing_expert, gap)
    dist.barrier()
    dist.destroy_process_group()


def write_case_files(case_dir, cfg, actor, hf, logits, variant, legacy, missing_expert, gap):
    import megatron.core
    tp, pp, ep = VARIANTS[variant]
    E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
    E.write_oracle(case_dir, hf, logits)
    E.write_case(case_dir, producer=f"megatron-core {megatron.core.__version__} GPTModel (learnable softmax "
                 f"sinks, SequentialMLP experts with biases) loaded by Megatron-Bridge's GPT-OSS mapping facts "
                 f"(TP1 PP1 logits within {gap:.3g} of transformers'), local spec, " + VL.layout_text(tp, pp, ep, legacy),
                 checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "megatron"],
                 output_dtype="bfloat16", oracle_dtypes=True, hf_load=not missing_expert,
                 logits_exact=not missing_expert, ranks=[1, 3],
                 expected_error=MISSING_EXPERT_ERROR if missing_expert else None)


if __name__ == "__main__":
    main()
