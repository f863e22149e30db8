"""GLM-4.5 MoE (Glm4MoeForCausalLM) checkpoints as verl's Megatron engine trains them: a
megatron-core GPTModel (local, non-TE spec) loaded by mbridge 0.15.1's own GLM4MoEBridge.

    torchrun --standalone --nproc_per_node=4 gen_megatron_glm4_moe.py CASE_DIR VARIANT

VARIANT (4 gloo ranks; a GLM-4.5-Air-shaped config scaled down, glm4_moe_config below: 2 layers,
the first dense (first_k_dense_replace 1), the second MoE with 4 routed experts, 1 shared expert,
a sigmoid router with expert bias; GQA 4 heads / 2 groups of head_dim 32 (heads x head_dim !=
hidden, as in GLM-4.5-Air), q/k/v biases, q/k norms, partial rotary 0.5; bf16):
  glm4_moe_tp2pp2_dist, glm4_moe_tp2pp2_legacy   TP 2 x PP 2 (experts split over TP as the
                           dense layers are): dist_checkpointing.save of sharded_state_dict() into
                           verl's actor/dist_ckpt/, or verl's legacy actor/model/mp_rank_TT_PPP/model.pt
  glm4_moe_pp2ep2_dist, glm4_moe_pp2ep2_legacy   TP 1 x PP 2 x EP 2 (two experts per expert rank;
                           legacy folders mp_rank_00_PPP_EEE)
  glm4_moe_tp2pp2_legacy_missing_expert   the planted fault: expert 1 of layer 1 left out of every
                           rank file; the merge must name the missing key
  glm4_moe_mtp_tp2_dist    TP 2 (x DP 2), torch_dist, with one MTP layer (below)

How the model is made: transformers builds the HF model (seeded) and save_pretrained writes it;
mbridge's GLM4MoEBridge (its name mapping, QKV grouping, gate/up fusing and TP split) loads those
files into the megatron-core model on every rank through its load_weights. The oracle is the HF
model's own save_pretrained output (transformers 5.24 writes Glm4Moe's experts per expert) and
the live model's logits.

MTP layers: GLM4MoEBridge maps MTP names (enorm, hnorm, eh_proj, final_layernorm, and the inner
layer's as layer L's) but its _build_config sets no mtp_num_layers and its _get_gptmodel_args
passes no mtp_block_spec, so the model verl builds through it has none, whatever
num_nextn_predict_layers says (kept at 1, as GLM-4.5's config.json has it). Those cases merge
with --drop_mtp, as a user of such a checkpoint must (without it vmerge refuses, naming the MTP
tensors config.json implies and pointing to --drop_mtp). The _mtp_ variant adds what the bridge
leaves out: mtp_num_layers 1 and megatron-core's own MTP block (get_gpt_mtp_block_spec of the MoE
layer's local spec); the bridge's own mapping then loads it from the HF folder, to which GLM-4.5's
release layout of layer L is added (add_mtp_layer: transformers builds no MTP layer, so those
values are drawn here and are the oracle, with the embedding and head copies vmerge writes into
it by default). PP 1: megatron-core puts the MTP block on the last stage with its own embedding.

Patched, because this host has neither Transformer Engine nor a GPU, and said so:
  - the layer spec: megatron-core's local spec (get_gpt_decoder_block_spec with
    use_transformer_engine=False) where mbridge's provider asks for TE; its input_layernorm is
    asked of mbridge's mapping under TE's fused name, and SequentialMLP's local_experts.<j> under
    TEGroupedMLP's linear_fc1.weight<global expert> (gen_megatron_qwen3_vl.make_text_bridge).
  - the transformer config: no sequence parallelism (the local norm refuses it), the allgather
    dispatcher (alltoall builds a CUDA stream), no grouped GEMM, no shared-expert overlap, no
    fusions, CPU initialisation.
  - mbridge reads rope_theta and partial_rotary_factor at the top level of the HF config
    (transformers 4.x); transformers 5 keeps them in rope_parameters: the bridge gets a copy with
    them lifted up.
  - the router weight: transformers keeps it in float32; megatron-core holds it in the model's
    bf16, so the live model's router weights are drawn as bf16 values (stored in float32) and the
    round trip loses nothing.
  - the vocabulary: 258 rows (eco_common.VOCAB rounded up to a multiple of TP), as mbridge's
    provider passes vocab_size to VocabParallelEmbedding unpadded.
"""
import copy
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_megatron as GM  # noqa: E402
import gen_megatron_vl as VL  # noqa: E402

# variant -> (TP, PP, EP)
VARIANTS = {"glm4_moe_tp2pp2_dist": (2, 2, 1), "glm4_moe_tp2pp2_legacy": (2, 2, 1),
            "glm4_moe_pp2ep2_dist": (1, 2, 2), "glm4_moe_pp2ep2_legacy": (1, 2, 2),
            "glm4_moe_tp2pp2_legacy_missing_expert": (2, 2, 1), "glm4_moe_mtp_tp2_dist": (2, 1, 1)}
MISSING_EXPERT = (1, 1)   # (layer, expert) left out by the planted fault
# Glm4Moe's experts are written one by one (no stack_experts), so the config check names them.
MISSING_EXPERT_ERROR = ("missing: model.layers.1.mlp.experts.1.down_proj.weight, "
                        "model.layers.1.mlp.experts.1.gate_proj.weight, model.layers.1.mlp.experts.1.up_proj.weight")


def glm4_moe_config(tp):
    """GLM-4.5-Air's config.json shape, scaled down."""
    from transformers import Glm4MoeConfig
    cfg = Glm4MoeConfig(vocab_size=-(-E.VOCAB // tp) * tp, hidden_size=64, intermediate_size=160,
                        moe_intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=32, partial_rotary_factor=0.5,
                        attention_bias=True, use_qk_norm=True, n_routed_experts=4, n_shared_experts=1,
                        num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1,
                        norm_topk_prob=True, routed_scaling_factor=2.5, num_nextn_predict_layers=1,
                        max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
                        eos_token_id=2)
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Glm4MoeForCausalLM"]
    return cfg


def build_hf_model(cfg):
    """The live HF model, its float32 router weights drawn as bf16 values (see the docstring)."""
    model = E.build_model(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") and p.dtype == torch.float32:
                p.copy_(p.to(torch.bfloat16).float())
    return model


def add_mtp_layer(hf_dir, cfg):
    """GLM-4.5's release layout of its MTP layer L (what mbridge's _MTP_MAPPING reads): a MoE
    decoder layer as transformers names layer L-1's, plus enorm, hnorm, eh_proj [H, 2H] and
    shared_head.norm; transformers builds no MTP layer, so its values are drawn here."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(hf_dir, "model.safetensors")
    tensors = load_file(path)
    last, mtp, hidden = cfg.num_hidden_layers - 1, cfg.num_hidden_layers, cfg.hidden_size
    torch.manual_seed(4321)
    for name, value in list(tensors.items()):
        if name.startswith(f"model.layers.{last}."):
            drawn = torch.randn(value.shape) * 0.05 + (1.0 if value.dim() == 1 else 0.0)
            tensors[name.replace(f"layers.{last}.", f"layers.{mtp}.", 1)] = drawn.to(torch.bfloat16).to(value.dtype)
    for norm in ("enorm", "hnorm", "shared_head.norm"):
        tensors[f"model.layers.{mtp}.{norm}.weight"] = (torch.randn(hidden) * 0.05 + 1.0).to(torch.bfloat16)
    tensors[f"model.layers.{mtp}.eh_proj.weight"] = (torch.randn(hidden, 2 * hidden) * 0.05).to(torch.bfloat16)
    save_file(tensors, path, metadata={"format": "pt"})


def make_bridge(cfg, mtp):
    """mbridge's GLM4MoEBridge, asked under TE's names for the local spec's norm and experts."""
    from mbridge.models.glm4moe import GLM4MoEBridge

    class LocalSpecBridge(GLM4MoEBridge):
        def _weight_name_mapping_mcore_to_hf(self, name):
            # Only input_layernorm: mbridge maps pre_mlp_layernorm by that name already.
            local, te = VL.LOCAL_TO_TE_NORMS[0]
            if name.endswith(local):
                name = name[:-len(local)] + te
            return super()._weight_name_mapping_mcore_to_hf(name)

        def _weight_name_mapping_mcore_local_to_global(self, model, consider_ep=True):
            # SequentialMLP's mlp.experts.local_experts.<j>.linear_fc1.weight as TEGroupedMLP's
            # mlp.experts.linear_fc1.weight<global expert>, the name mbridge maps.
            names = super()._weight_name_mapping_mcore_local_to_global(model, consider_ep=False)
            per_rank = self.config.num_moe_experts // self.mpu.ep_size
            marker = ".mlp.experts.local_experts."
            for local, name in names.items():
                if marker in name:
                    head, tail = name.split(marker)
                    j, rest = tail.split(".", 1)
                    names[local] = f"{head}.mlp.experts.{rest}{self.mpu.ep_rank * per_rank + int(j)}"
            return names

    shim = copy.deepcopy(cfg)
    shim.rope_theta = cfg.rope_parameters["rope_theta"]
    shim.partial_rotary_factor = cfg.rope_parameters["partial_rotary_factor"]
    bridge = LocalSpecBridge(shim, dtype=torch.bfloat16)
    bridge.set_extra_args(sequence_parallel=False, use_cpu_initialization=True, masked_softmax_fusion=False,
                          gradient_accumulation_fusion=False, moe_grouped_gemm=False,
                          moe_token_dispatcher_type="allgather", moe_shared_expert_overlap=False,
                          variable_seq_lengths=False, persist_layer_norm=False,
                          bias_activation_fusion=False, bias_dropout_fusion=False,
                          **({"mtp_num_layers": 1} if mtp else {}))
    return bridge


def build_model(bridge, mtp):
    """GLM4MoEBridge's GPTModel (its _get_gptmodel_args) on megatron-core's local spec; `mtp`: with
    megatron-core's MTP block of the MoE layer's spec, which the bridge itself does not add."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    spec = get_gpt_decoder_block_spec(bridge.config, use_transformer_engine=False, normalization="RMSNorm")
    args = bridge._get_gptmodel_args()
    if mtp:
        args["mtp_block_spec"] = get_gpt_mtp_block_spec(bridge.config, spec.layer_specs[-1],
                                                        use_transformer_engine=False)
    model = GPTModel(config=bridge.config, transformer_layer_spec=spec, pre_process=ps.is_pipeline_first_stage(),
                     post_process=ps.is_pipeline_last_stage(), share_embeddings_and_output_weights=False,
                     **args)
    return model.to(torch.bfloat16).eval()


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {sorted(VARIANTS)}"
    tp, pp, ep = VARIANTS[variant]
    missing_expert, mtp = variant.endswith("_missing_expert"), "_mtp_" in variant
    rank, world = E.init_gloo()
    assert world == 4, "run with --nproc_per_node=4"
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 expert_model_parallel_size=ep)

    cfg = glm4_moe_config(tp)
    hf_dir = os.path.join(case_dir, "hf_model")
    if rank == 0:
        os.makedirs(case_dir, exist_ok=True)
        hf_model = build_hf_model(cfg)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
        if mtp:
            add_mtp_layer(hf_dir, cfg)
    dist.barrier()

    bridge = make_bridge(cfg, mtp)
    with GM.cuda_calls_on_cpu():   # the router's expert_bias buffer is made on current_device()
        model = build_model(bridge, mtp)
    bridge.load_weights([model], hf_dir)
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    legacy = "_legacy" in variant
    if legacy:
        VL.save_verl_legacy(model, actor, ep, drop_expert=MISSING_EXPERT if missing_expert else None)
    else:
        VL.save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    if rank == 0:
        write_case_files(case_dir, cfg, actor, VL.read_safetensors(hf_dir), logits, variant, legacy,
                         missing_expert, mtp)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def write_case_files(case_dir, cfg, actor, hf_tensors, logits, variant, legacy, missing_expert, mtp):
    import megatron.core
    import mbridge
    tp, pp, ep = VARIANTS[variant]
    E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
    mtp_layer = cfg.num_hidden_layers
    if mtp:   # the release's copies of the embedding and head in the MTP layer (vmerge's default)
        hf_tensors[f"model.layers.{mtp_layer}.embed_tokens.weight"] = hf_tensors["model.embed_tokens.weight"].clone()
        hf_tensors[f"model.layers.{mtp_layer}.shared_head.head.weight"] = hf_tensors["lm_head.weight"].clone()
    E.write_oracle(case_dir, hf_tensors, logits)
    model = "MoE GPTModel (SequentialMLP experts" + (", megatron-core's MTP block)" if mtp else ")")
    E.write_case(case_dir, producer=f"megatron-core {megatron.core.__version__} {model} loaded by mbridge "
                 f"{mbridge.__version__}'s GLM4MoEBridge, local spec, " + VL.layout_text(tp, pp, ep, legacy),
                 checkpoint="ckpt/global_step_1/actor",
                 merge_args=["--backend", "megatron"] + ([] if mtp else ["--drop_mtp"]),
                 output_dtype="bfloat16", oracle_dtypes=True, hf_load=not missing_expert,
                 logits_exact=not missing_expert, ranks=[1, 3],
                 **({"hf_unexpected_keys": rf"model\.layers\.{mtp_layer}\..*"} if mtp else {}),
                 expected_error=MISSING_EXPERT_ERROR if missing_expert else None)


if __name__ == "__main__":
    main()
