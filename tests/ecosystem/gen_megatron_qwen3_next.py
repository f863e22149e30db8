"""Qwen3-Next checkpoints in Megatron-Bridge's layout, written by megatron-core 0.16.1 itself
(a GPTModel with experimental_attention_variant="gated_delta_net", local, non-TE spec).

    torchrun --standalone --nproc_per_node=4 gen_megatron_qwen3_next.py CASE_DIR VARIANT

VARIANT (4 gloo ranks, TP 2 x PP 2; a tiny Qwen3NextForCausalLM, the Qwen3-Next-80B-A3B config's
keys and ratios scaled down: 4 layers, three gated delta-net (linear attention) layers and one
gated full-attention layer (full_attention_interval 4), 4 experts with a gated shared expert, bf16):
  qwen3_next_tp2pp2_dist    dist_checkpointing.save of the model's sharded_state_dict() into verl's
                            actor/dist_ckpt/ (per-layer keys: hetereogenous_dist_checkpoint, as
                            Megatron-Bridge sets it for this family)
  qwen3_next_tp2pp2_legacy  verl's legacy actor/model/mp_rank_TT_PPP/model.pt
  qwen3_next_tp2pp2_legacy_missing_expert   the planted fault: expert 1 of layer 1 (a gated
                            delta-net layer) left out of every legacy rank file; the merge must stop
                            naming the three HF tensors it lacks
  qwen3_next_mtp_tp2_dist   TP 2, torch_dist (2 gloo ranks), with megatron-core's MTP block of one gated
                            full-attention MoE layer (mtp_num_layers 1, as the bridge sets it from
                            mtp_num_hidden_layers); transformers builds no MTP module, so the
                            release's mtp.* tensors are drawn here (add_mtp_tensors) and mapped as
                            the bridge maps them (eh_proj -> mtp.fc, enorm -> pre_fc_norm_embedding,
                            hnorm -> pre_fc_norm_hidden, final_layernorm -> mtp.norm, the inner
                            transformer_layer -> mtp.layers.0 with the decoder layer's names)

Where each fact comes from:
  - the model: Megatron-Bridge's Qwen3NextBridge.provider_bridge (models/qwen/qwen3_next_bridge.py)
    sets the TransformerConfig (qk_layernorm, attention_output_gate, moe_shared_expert_gate,
    linear_attention_freq = full_attention_interval, the linear_* sizes, zero-centred norms) and
    megatron-core's get_transformer_block_with_experimental_attention_variant_spec builds the
    block. That function asserts Transformer Engine; here it runs with megatron-core's own
    LocalSpecProvider: GatedDeltaNet's in_proj a ColumnParallelLinear (TE fuses the input norm into
    it: in_proj.layer_norm_weight; locally it is input_layernorm.weight), out_norm the local RMSNorm,
    out_proj a RowParallelLinear; the full-attention layer from get_gpt_layer_local_spec. The local
    norms refuse layernorm_zero_centered_gamma, so it is off: that changes the forward only, not a
    parameter name, shape or stored value (the bridge's values are zero-centred already, below).
    GatedDeltaNet imports flash-linear-attention (fla) for its forward kernels; no forward runs here,
    so those two names are bound to None (the parameters do not depend on them).
  - the values, from the HF model by Megatron-Bridge's mapping classes (conversion/param_mapping.py):
    QKVMapping with attention_output_gate (HF q_proj holds per head [q_h; gate_h]; megatron's
    linear_qkv per query group [the group's q heads; their gate heads; k; v]); GDNLinearMapping
    (HF in_proj_qkvz per key head g [q_g; k_g; v_g; z_g], in_proj_ba [b_g; a_g]; megatron's in_proj
    per tensor-parallel rank [q_r; k_r; v_r; z_r; b_r; a_r]); GDNConv1dMapping (HF conv1d [Q; K; V],
    megatron per rank [q_r; k_r; v_r]); RMSNorm2ZeroCenteredRMSNormMapping (out_norm = HF
    linear_attn.norm - 1: HF's gated norm is a plain RMSNorm, megatron's zero-centred); the rest
    AutoMapping (column/row-parallel by the module, norms, router and shared-expert gate replicated),
    GatedMLPMapping ([gate_r; up_r] per rank). Megatron-Bridge itself does not install here (it needs
    Transformer Engine and transformers < 5); none of its code is used.
The oracle is the HF model's own save_pretrained tensors and its logits.
"""
import os
import sys
import types

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_megatron as GM  # noqa: E402
import gen_megatron_vl as VL  # noqa: E402

VARIANTS = {"qwen3_next_tp2pp2_dist": (2, 2), "qwen3_next_tp2pp2_legacy": (2, 2), "qwen3_next_mtp_tp2_dist": (2, 1),
            "qwen3_next_tp2pp2_legacy_missing_expert": (2, 2)}
MISSING_EXPERT = (1, 1)   # (layer, expert) left out by the planted fault
MISSING_EXPERT_ERROR = ("missing: model.layers.1.mlp.experts.1.down_proj.weight, "
                        "model.layers.1.mlp.experts.1.gate_proj.weight, model.layers.1.mlp.experts.1.up_proj.weight")
# The MTP block's own names, Megatron-Bridge's Qwen3NextBridge mapping.
MTP_NAMES = {"enorm.weight": "mtp.pre_fc_norm_embedding.weight", "hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
             "eh_proj.weight": "mtp.fc.weight", "final_layernorm.weight": "mtp.norm.weight"}


def hf_config(tp, mtp):
    from transformers import Qwen3NextConfig
    cfg = Qwen3NextConfig(vocab_size=-(-E.VOCAB // tp) * tp, hidden_size=64, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                          tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, num_hidden_layers=4,
                          full_attention_interval=4, intermediate_size=128, moe_intermediate_size=16,
                          shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
                          linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                          linear_num_key_heads=2, linear_num_value_heads=4, partial_rotary_factor=0.25)
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen3NextForCausalLM"]
    if mtp:
        cfg.mtp_num_hidden_layers = 1  # the release's key (Qwen3-Next-80B-A3B's config.json)
    assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"], cfg.layer_types
    return cfg


def transformer_config(hf, tp, pp, mtp):
    """The TransformerConfig Megatron-Bridge's provider_bridge gives this HF config."""
    from megatron.core.transformer.transformer_config import TransformerConfig
    return TransformerConfig(
        num_layers=hf.num_hidden_layers, hidden_size=hf.hidden_size, ffn_hidden_size=hf.intermediate_size,
        num_attention_heads=hf.num_attention_heads, num_query_groups=hf.num_key_value_heads,
        kv_channels=hf.head_dim, gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
        layernorm_epsilon=hf.rms_norm_eps, add_bias_linear=False, add_qkv_bias=False, hidden_dropout=0.0,
        attention_dropout=0.0, qk_layernorm=True, attention_output_gate=True,
        layernorm_zero_centered_gamma=False,  # True in the bridge; the local norms refuse it (docstring)
        experimental_attention_variant="gated_delta_net", linear_attention_freq=[int(t == "linear_attention") for t in hf.layer_types],
        linear_conv_kernel_dim=hf.linear_conv_kernel_dim, linear_key_head_dim=hf.linear_key_head_dim,
        linear_value_head_dim=hf.linear_value_head_dim, linear_num_key_heads=hf.linear_num_key_heads,
        linear_num_value_heads=hf.linear_num_value_heads, hetereogenous_dist_checkpoint=True,
        num_moe_experts=hf.num_experts, moe_ffn_hidden_size=hf.moe_intermediate_size,
        moe_shared_expert_intermediate_size=hf.shared_expert_intermediate_size, moe_shared_expert_gate=True,
        moe_router_topk=hf.num_experts_per_tok, moe_grouped_gemm=False, moe_token_dispatcher_type="allgather",
        transformer_impl="local", use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True,
        pipeline_dtype=torch.bfloat16, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        persist_layer_norm=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        masked_softmax_fusion=False, gradient_accumulation_fusion=False, sequence_parallel=False,
        **({"mtp_num_layers": 1} if mtp else {}))


def bind_fla_to_none():
    """gated_delta_net.py imports fla's l2norm and chunk_gated_delta_rule for its forward only."""
    for name in ("fla", "fla.modules", "fla.modules.l2norm", "fla.ops", "fla.ops.gated_delta_rule"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["fla.modules.l2norm"].l2norm = None
    sys.modules["fla.ops.gated_delta_rule"].chunk_gated_delta_rule = None


def local_block_spec(config, pp_rank):
    """megatron-core's hybrid block spec with its LocalSpecProvider in place of TE (docstring)."""
    import megatron.core.models.gpt.experimental_attention_variant_module_specs as X
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec
    backend = LocalSpecProvider()

    def gated_delta_net(config, backend=backend):
        return ModuleSpec(module=GatedDeltaNet, metainfo={"fuse_input_layernorm": False},
                          submodules=GatedDeltaNetSubmodules(
                              in_proj=backend.column_parallel_linear(),
                              out_norm=backend.layer_norm(rms_norm=True, for_qk=False),
                              out_proj=backend.row_parallel_linear()))

    def full_attention(config, backend=backend):
        spec = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm").submodules.self_attention
        spec.metainfo["fuse_input_layernorm"] = False
        return spec

    X._get_backend_spec_provider = lambda config: backend
    X.get_gated_delta_net_module_spec = gated_delta_net
    X._get_self_attention_module_spec = full_attention
    return X.get_transformer_block_with_experimental_attention_variant_spec(config, pp_rank=pp_rank)


def add_mtp_tensors(hf_dir, hf):
    """Qwen3-Next's release layout of its MTP module (mtp.fc [H, 2H], three norms, mtp.layers.0: a
    gated full-attention MoE layer named as the decoder's layer 3); drawn, as transformers builds
    none. Norms are zero-centred on both sides (values near 0)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(hf_dir, "model.safetensors")
    tensors = load_file(path)
    torch.manual_seed(4321)
    full = f"model.layers.{hf.layer_types.index('full_attention')}."
    for name, value in list(tensors.items()):
        if name.startswith(full):
            tensors["mtp.layers.0." + name[len(full):]] = (torch.randn(value.shape) * 0.05).to(value.dtype)
    for norm in ("mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden", "mtp.norm"):
        tensors[norm + ".weight"] = (torch.randn(hf.hidden_size) * 0.05).to(torch.bfloat16)
    tensors["mtp.fc.weight"] = (torch.randn(hf.hidden_size, 2 * hf.hidden_size) * 0.05).to(torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})


def gated_qkv(hf, q, k, v):
    """QKVMapping with attention_output_gate: HF q_proj [nq * 2d] per head [q_h; gate_h] -> per
    query group [its q heads; their gate heads; k_g; v_g]."""
    nq, ng, d = hf.num_attention_heads, hf.num_key_value_heads, hf.head_dim
    q, gate = q.view(nq, 2 * d, -1).chunk(2, dim=1)
    k, v, per = k.view(ng, d, -1), v.view(ng, d, -1), nq // ng
    parts = []
    for g in range(ng):
        parts += [q[g * per:(g + 1) * per], gate[g * per:(g + 1) * per], k[g:g + 1], v[g:g + 1]]
    return torch.cat(parts).reshape(-1, q.shape[-1])


def gdn_sections(hf, qkvz, ba):
    """HF in_proj_qkvz (per key head [q_g; k_g; v_g; z_g]) and in_proj_ba ([b_g; a_g]) as the six
    global sections Q, K, V, Z, B, A (GDNLinearMapping)."""
    nk, dk, dv = hf.linear_num_key_heads, hf.linear_key_head_dim, hf.linear_value_head_dim
    r = hf.linear_num_value_heads // nk
    q, k, v, z = qkvz.view(nk, -1, qkvz.shape[-1]).split([dk, dk, r * dv, r * dv], dim=1)
    b, a = ba.view(nk, 2 * r, -1).split([r, r], dim=1)
    return [t.reshape(-1, qkvz.shape[-1]) for t in (q, k, v, z, b, a)]


def per_rank_sections(sections, tp, rank):
    """Megatron's column-parallel layout of a fused tensor of sections: rank r holds chunk r of each."""
    return torch.cat([s.chunk(tp, dim=0)[rank] for s in sections])


def megatron_value(name, param, hf_t, hf, tp, rank):
    """This rank's value of megatron parameter `name` (global layer numbers) from the HF tensors."""
    prefix = f"model.layers.{name.split('.')[2]}." if name.startswith("decoder.layers.") else ""
    if name.startswith("mtp.layers.0."):
        tail = name[len("mtp.layers.0."):]
        if tail in MTP_NAMES:
            full = hf_t[MTP_NAMES[tail]]
            return full.chunk(tp, dim=0)[rank] if getattr(param, "tensor_model_parallel", False) else full
        prefix = "mtp.layers.0."
        name = "decoder.layers.0." + tail[len("transformer_layer."):]

    def layer(what):
        return hf_t[prefix + what]

    def split(full):
        if getattr(param, "tensor_model_parallel", False):
            # GatedDeltaNet's A_log and dt_bias are marked tensor-parallel without a partition_dim:
            # its sharded_state_dict splits them on dim 0.
            return full.chunk(tp, dim=getattr(param, "partition_dim", 0))[rank]
        return full

    if name == "embedding.word_embeddings.weight":
        return split(hf_t["model.embed_tokens.weight"])
    if name == "output_layer.weight":
        return split(hf_t["lm_head.weight"])
    if name == "decoder.final_layernorm.weight":
        return hf_t["model.norm.weight"]
    tail = name.split(".", 3)[3]
    mlp = "mlp."
    if tail.startswith("mlp.experts.local_experts."):
        e, rest = tail[len("mlp.experts.local_experts."):].split(".", 1)
        mlp = f"mlp.experts.{e}."
        tail = "expert." + rest
    simple = {"input_layernorm.weight": "input_layernorm.weight",
              "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
              "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
              "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
              "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
              "self_attention.out_proj.weight": "linear_attn.out_proj.weight",
              "self_attention.A_log": "linear_attn.A_log", "self_attention.dt_bias": "linear_attn.dt_bias",
              "mlp.router.weight": "mlp.gate.weight",
              "mlp.shared_experts.gate_weight": "mlp.shared_expert_gate.weight",
              "mlp.shared_experts.linear_fc2.weight": "mlp.shared_expert.down_proj.weight",
              "expert.linear_fc2.weight": mlp + "down_proj.weight"}
    if tail in simple:
        return split(layer(simple[tail]))
    if tail in ("mlp.shared_experts.linear_fc1.weight", "expert.linear_fc1.weight"):
        base = "mlp.shared_expert." if tail.startswith("mlp.shared") else mlp
        return per_rank_sections([layer(base + "gate_proj.weight"), layer(base + "up_proj.weight")], tp, rank)
    if tail == "self_attention.linear_qkv.weight":
        return split(gated_qkv(hf, *(layer(f"self_attn.{p}_proj.weight") for p in "qkv")))
    if tail == "self_attention.in_proj.weight":
        sections = gdn_sections(hf, layer("linear_attn.in_proj_qkvz.weight"), layer("linear_attn.in_proj_ba.weight"))
        return per_rank_sections(sections, tp, rank)
    if tail == "self_attention.conv1d.weight":
        key_dim = hf.linear_num_key_heads * hf.linear_key_head_dim
        return per_rank_sections(layer("linear_attn.conv1d.weight").split(
            [key_dim, key_dim, hf.linear_num_value_heads * hf.linear_value_head_dim]), tp, rank)
    if tail == "self_attention.out_norm.weight":
        return layer("linear_attn.norm.weight") - 1   # RMSNorm2ZeroCenteredRMSNormMapping
    raise KeyError(f"no HF tensor known for megatron parameter {name}")


@torch.no_grad()
def load_from_hf(model, hf_t, hf, tp, rank, layer_offset):
    for local_name, param in model.named_parameters():
        name = local_name
        if local_name.startswith("decoder.layers."):
            parts = local_name.split(".")
            parts[2] = str(int(parts[2]) + layer_offset)
            name = ".".join(parts)
        value = megatron_value(name, param, hf_t, hf, tp, rank)
        assert value.shape == param.shape, (name, value.shape, param.shape)
        param.copy_(value.to(param.dtype))


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {sorted(VARIANTS)}"
    tp, pp = VARIANTS[variant]
    rank, world = E.init_gloo()
    assert world == tp * pp, f"run with --nproc_per_node={tp * pp}"
    bind_fla_to_none()
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)

    mtp = "_mtp_" in variant
    hf = hf_config(tp, mtp)
    hf_dir = os.path.join(case_dir, "hf_model")
    logits = None
    if rank == 0:
        os.makedirs(case_dir, exist_ok=True)
        hf_model = E.build_model(hf)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
        if mtp:
            add_mtp_tensors(hf_dir, hf)
    dist.barrier()
    hf_t = VL.read_safetensors(hf_dir)

    config = transformer_config(hf, tp, pp, mtp)
    pp_rank = ps.get_pipeline_model_parallel_rank()
    block = local_block_spec(config, pp_rank)
    mtp_args = {}
    if mtp:  # the MTP layer is a gated full-attention layer: the block's last one (layer_types)
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec
        mtp_args["mtp_block_spec"] = get_gpt_mtp_block_spec(config, block.layer_specs[-1], use_transformer_engine=False)
    with GM.cuda_calls_on_cpu(), GM.no_cuda_rng_fork():
        model = GPTModel(config=config, transformer_layer_spec=block, **mtp_args,
                         vocab_size=hf.vocab_size, max_sequence_length=64, pre_process=ps.is_pipeline_first_stage(),
                         post_process=ps.is_pipeline_last_stage(), share_embeddings_and_output_weights=False,
                         position_embedding_type="rope")
    load_from_hf(model, hf_t, hf, tp, ps.get_tensor_model_parallel_rank(),
                 get_transformer_layer_offset(config, pp_rank=pp_rank))
    model = model.eval()
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    legacy = "_legacy" in variant
    if legacy:
        VL.save_verl_legacy(model, actor, drop_expert=MISSING_EXPERT if variant.endswith("_missing_expert") else None)
    else:
        VL.save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    if rank == 0:
        if not legacy:
            check_saved_sections(os.path.join(actor, "dist_ckpt"), hf_t, hf)
        write_case_files(case_dir, hf, actor, hf_t, logits, variant, legacy)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def write_case_files(case_dir, hf, actor, hf_t, logits, variant, legacy):
    import megatron.core
    tp, pp = VARIANTS[variant]
    E.save_hf_files(hf, os.path.join(actor, "huggingface"))
    E.write_oracle(case_dir, hf_t, logits)
    E.write_case(case_dir, producer=f"megatron-core {megatron.core.__version__} GPTModel with gated delta-net layers "
                 f"(Megatron-Bridge's Qwen3-Next layout, local spec" + (", megatron-core's MTP block" if "_mtp_" in variant else "") +
                 "), " + VL.layout_text(tp, pp, 1, legacy),
                 checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "megatron"],
                 output_dtype="bfloat16", oracle_dtypes=True, ranks=[1, 3],
                 **({"expected_error": MISSING_EXPERT_ERROR} if variant.endswith("_missing_expert")
                    else {"hf_load": True, "logits_exact": True}))


def check_saved_sections(dist_ckpt, hf_t, hf):
    """megatron-core's own torch_dist save splits in_proj and conv1d per section (its
    _split_tensor_factory: in_proj.weight.query ... .alpha, conv1d.weight.query/key/value), each a
    global tensor: they must be HF's sections in head order, and out_norm HF's norm minus 1; a
    wrong per-rank layout in load_from_hf would show here."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    whole = os.path.join(os.path.dirname(dist_ckpt), "whole.pt")
    dcp_to_torch_save(dist_ckpt, whole)
    saved = torch.load(whole, weights_only=False)
    os.remove(whole)
    key_dim = hf.linear_num_key_heads * hf.linear_key_head_dim
    for i, kind in enumerate(hf.layer_types):
        if kind != "linear_attention":
            continue
        p, h = f"decoder.layers.{i}.self_attention.", f"model.layers.{i}.linear_attn."
        sections = gdn_sections(hf, hf_t[h + "in_proj_qkvz.weight"], hf_t[h + "in_proj_ba.weight"])
        conv = hf_t[h + "conv1d.weight"].split([key_dim, key_dim, hf.linear_num_value_heads * hf.linear_value_head_dim])
        pairs = list(zip(["in_proj.weight." + n for n in ("query", "key", "value", "z", "beta", "alpha")], sections))
        pairs += list(zip(["conv1d.weight." + n for n in ("query", "key", "value")], conv))
        pairs.append(("out_norm.weight", hf_t[h + "norm.weight"] - 1))
        for name, want in pairs:
            assert torch.equal(saved[p + name], want), f"{p + name} is not the HF tensor's section"


if __name__ == "__main__":
    main()
