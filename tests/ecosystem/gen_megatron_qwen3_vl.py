"""Qwen3-VL (dense) checkpoints in Megatron-Bridge 0.3.1's layout, the model built from the parts
its Qwen3VLModel is made of, on megatron-core 0.16 (local, non-TE spec).

    torchrun --standalone --nproc_per_node=4 gen_megatron_qwen3_vl.py CASE_DIR VARIANT

VARIANT (4 gloo ranks; the tiny Qwen3VLForConditionalGeneration of gen_families.qwen3_vl_config:
2 text layers, 3 vision blocks, 2 DeepStack mergers, bf16; the MoE ones the tiny
Qwen3VLMoeForConditionalGeneration of gen_families.qwen3_vl_moe_config, 4 experts per layer):
  qwen3_vl_tp2pp2_dist     TP 2 x PP 2, dist_checkpointing.save of the model's sharded_state_dict()
                           into verl's actor/dist_ckpt/, config and tokenizer in actor/huggingface/
  qwen3_vl_tp2pp2_legacy   TP 2 x PP 2, verl's legacy actor/model/mp_rank_TT_PPP/model.pt
  qwen3_vl_moe_tp2pp2_dist, qwen3_vl_moe_tp2pp2_legacy   the MoE model, TP 2 x PP 2 (experts split
                           over TP as the language layers are)
  qwen3_vl_moe_pp2ep2_dist, qwen3_vl_moe_pp2ep2_legacy   the MoE model, TP 1 x PP 2 x EP 2 (two experts
                           per expert-parallel rank; legacy folders mp_rank_00_PPP_EEE)
  qwen3_vl_moe_tp2pp2_legacy_missing_expert   the planted fault: expert 1 of layer 0 left out of
                           every rank file; the merge must name the missing key
  qwen3_vl_mcore_vision_tp2pp2_dist, qwen3_vl_mcore_vision_tp2pp2_legacy   the dense model with
                           Megatron-Bridge's later mcore vision tower (mcore_qwen3_vl_vision.py:
                           megatron-core ViT layers, tensor-parallel, loaded by the bridge's
                           mapping facts) in place of transformers' vision model

Megatron-Bridge 0.3.1 itself does not install here (it requires transformers < 5 and Transformer
Engine), so its Qwen3VLModel is rebuilt from what that class holds (megatron/bridge/models/
qwen_vl/modelling_qwen3_vl/model.py): `language_model`, a megatron-core GPTModel (Qwen3VLGPTModel
subclasses it and adds no parameter), and `vision_model`, transformers' own Qwen3VLVisionModel
built from vision_config on the first pipeline stage (the bridge maps it whole:
ReplicatedMapping vision_model.** <-> model.visual.**). The language model is loaded by mbridge
0.15.1's own Qwen3 bridge (its name mapping, QKV grouping and TP split) from the VL model's text
tensors under Qwen3ForCausalLM's names; the vision model takes the VL model's model.visual.*
tensors as they are. The MoE language model is a megatron-core MoE GPTModel (SequentialMLP local
experts, the allgather dispatcher) loaded by mbridge 0.15.1's own Qwen3-MoE bridge from the text
tensors under Qwen3MoeForCausalLM's per-expert names (transformers 5's fused gate_up_proj [E, 2F, H]
split into each expert's gate_proj / up_proj halves, down_proj [E, H, F] per expert); mbridge names
experts as TE's grouped MLP does (linear_fc1.weight<e>), so the local spec's local_experts.<j> are
asked under that name with the global expert number. The GPTModel uses plain RoPE where Qwen3VLGPTModel uses M-RoPE: no
parameter differs (the rotary tables are buffers that are not saved).

The oracle is the HF model's own save_pretrained output and its live logits. Patches as in
gen_megatron_vl.py: the local specs (with mbridge asked under the TE norm names), the bridge's
config with rope_theta lifted out of rope_parameters, sequence parallelism off, CPU
initialisation, the CUDA calls of the torch_dist save.
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
import gen_megatron_vl as VL  # noqa: E402

# variant -> (TP, PP, EP)
VARIANTS = {"qwen3_vl_tp2pp2_dist": (2, 2, 1), "qwen3_vl_tp2pp2_legacy": (2, 2, 1),
            "qwen3_vl_moe_tp2pp2_dist": (2, 2, 1), "qwen3_vl_moe_tp2pp2_legacy": (2, 2, 1),
            "qwen3_vl_moe_pp2ep2_dist": (1, 2, 2), "qwen3_vl_moe_pp2ep2_legacy": (1, 2, 2),
            "qwen3_vl_moe_tp2pp2_legacy_missing_expert": (2, 2, 1),
            "qwen3_vl_mcore_vision_tp2pp2_dist": (2, 2, 1), "qwen3_vl_mcore_vision_tp2pp2_legacy": (2, 2, 1)}
# The planted fault: expert 1 of layer 0 is missing; the merge must name its key.
MISSING_EXPERT_ERROR = "has no language_model.decoder.layers.0.mlp.experts.1.linear_fc1.weight"
AUTO_CLASS = "image_text_to_text"
TEXT_PREFIX, VISION_PREFIX = "model.language_model.", "model.visual."


def text_folder(hf_tensors, cfg, folder):
    """The VL model's text part as a Qwen3ForCausalLM folder for mbridge: the same tensors under
    Qwen3's names (model.language_model.X -> model.X, lm_head kept) and the text config."""
    from safetensors.torch import save_file
    os.makedirs(folder)
    text = {}
    for k, v in hf_tensors.items():
        if k.startswith(VISION_PREFIX):
            continue
        name = "model." + k[len(TEXT_PREFIX):] if k.startswith(TEXT_PREFIX) else k
        text.update(per_expert(name, v) if ".mlp.experts." in name else {name: v.contiguous()})
    save_file(text, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg.text_config.save_pretrained(folder)


def per_expert(name, fused):
    """transformers 5's fused experts as Qwen3MoeForCausalLM's per-expert tensors (mbridge reads
    those): gate_up_proj [E, 2F, H] -> experts.e.gate_proj / up_proj [F, H] (the [gate; up]
    halves of each expert's rows), down_proj [E, H, F] -> experts.e.down_proj [H, F]."""
    prefix, what = name.rsplit(".", 1)
    out = {}
    for e in range(fused.shape[0]):
        if what == "gate_up_proj":
            gate, up = fused[e].chunk(2, dim=0)
            out[f"{prefix}.{e}.gate_proj.weight"] = gate.contiguous()
            out[f"{prefix}.{e}.up_proj.weight"] = up.contiguous()
        else:
            assert what == "down_proj", name
            out[f"{prefix}.{e}.down_proj.weight"] = fused[e].contiguous()
    return out


def make_text_bridge(cfg, moe):
    """mbridge's Qwen3 (or Qwen3-MoE) bridge for the text model, asked under the TE names of the
    local norms and of TE's grouped experts."""
    from mbridge.models.qwen3 import Qwen3Bridge
    from mbridge.models.qwen3moe import Qwen3MoEBridge

    class LocalSpecBridge(Qwen3MoEBridge if moe else Qwen3Bridge):
        def _weight_name_mapping_mcore_to_hf(self, name):
            # A MoE layer's pre_mlp_layernorm is its own module under TE too (mbridge maps it so).
            for local, te in VL.LOCAL_TO_TE_NORMS[:1] if moe else VL.LOCAL_TO_TE_NORMS:
                if name.endswith(local):
                    name = name[:-len(local)] + te
            return super()._weight_name_mapping_mcore_to_hf(name)

        def _weight_name_mapping_mcore_local_to_global(self, model, consider_ep=True):
            # SequentialMLP's mlp.experts.local_experts.<j>.linear_fc1.weight as TEGroupedMLP's
            # mlp.experts.linear_fc1.weight<global expert>, the name mbridge maps.
            names = super()._weight_name_mapping_mcore_local_to_global(model, consider_ep=False)
            per_rank = self.config.num_moe_experts // self.mpu.ep_size if moe else 0
            marker = ".mlp.experts.local_experts."
            for local, name in names.items():
                if marker in name:
                    head, tail = name.split(marker)
                    j, rest = tail.split(".", 1)
                    names[local] = f"{head}.mlp.experts.{rest}{self.mpu.ep_rank * per_rank + int(j)}"
            return names

    text = copy.deepcopy(cfg.text_config)
    text.rope_theta = text.rope_parameters["rope_theta"]    # mbridge reads transformers 4.x's key
    text.tie_word_embeddings = cfg.tie_word_embeddings      # a VL model's is the top-level one
    bridge = LocalSpecBridge(text, dtype=torch.bfloat16)
    extra = dict(moe_grouped_gemm=False, moe_token_dispatcher_type="allgather",
                 variable_seq_lengths=False, persist_layer_norm=False, bias_activation_fusion=False,
                 bias_dropout_fusion=False) if moe else {}
    bridge.set_extra_args(sequence_parallel=False, use_cpu_initialization=True,
                          masked_softmax_fusion=False, gradient_accumulation_fusion=False, **extra)
    return bridge


def build_model(bridge, cfg, hf_tensors, moe, mcore_vision=False):
    """Megatron-Bridge's Qwen3VLModel as its parts: GPTModel language_model, HF vision_model."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.module import MegatronModule
    if moe:
        from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import Qwen3VLMoeVisionModel as VisionModel
    else:
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel as VisionModel

    class Qwen3VLParts(MegatronModule):
        def __init__(self, config, language_model, vision_model):
            super().__init__(config=config)
            self.vision_model = vision_model
            self.language_model = language_model

    first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
    language = GPTModel(config=bridge.config,
                        transformer_layer_spec=get_gpt_decoder_block_spec(
                            bridge.config, use_transformer_engine=False, normalization="RMSNorm"),
                        vocab_size=cfg.text_config.vocab_size, max_sequence_length=64,
                        pre_process=first, post_process=last, share_embeddings_and_output_weights=False,
                        position_embedding_type="rope", rotary_base=int(bridge.hf_config.rope_theta))
    vision = None
    if first and mcore_vision:
        import mcore_qwen3_vl_vision as MV
        own = {k[len(VISION_PREFIX):]: v for k, v in hf_tensors.items() if k.startswith(VISION_PREFIX)}
        vision = MV.load_from_hf(MV.McoreVisionModel(bridge.config, cfg.vision_config), own,
                                 cfg.vision_config.num_heads, ps.get_tensor_model_parallel_rank(),
                                 ps.get_tensor_model_parallel_world_size())
    elif first:
        vision = VisionModel._from_config(cfg.vision_config)
        own = {k[len(VISION_PREFIX):]: v for k, v in hf_tensors.items() if k.startswith(VISION_PREFIX)}
        missing, unexpected = vision.load_state_dict(own, strict=True)
        assert not missing and not unexpected, (missing, unexpected)
    model = Qwen3VLParts(bridge.config, language, vision)
    return model.to(torch.bfloat16).eval()


def hf_config_for(variant, tp):
    moe = "_moe_" in variant
    cfg = G.qwen3_vl_moe_config() if moe else G.qwen3_vl_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen3VLMoeForConditionalGeneration" if moe else "Qwen3VLForConditionalGeneration"]
    cfg.text_config.vocab_size = -(-E.VOCAB // tp) * tp   # VocabParallelEmbedding divides it by TP
    return cfg


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {sorted(VARIANTS)}"
    tp, pp, ep = VARIANTS[variant]
    moe, missing_expert = "_moe_" in variant, variant.endswith("_missing_expert")
    rank, world = E.init_gloo()
    assert world == 4, "run with --nproc_per_node=4"
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 expert_model_parallel_size=ep)

    cfg = hf_config_for(variant, tp)
    hf_dir, text_dir = os.path.join(case_dir, "hf_model"), os.path.join(case_dir, "hf_text")
    if rank == 0:
        os.makedirs(case_dir, exist_ok=True)
        hf_model = E.build_model(cfg, auto_class=AUTO_CLASS)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
        text_folder(VL.read_safetensors(hf_dir), cfg, text_dir)
    dist.barrier()
    hf_tensors = VL.read_safetensors(hf_dir)

    bridge = make_text_bridge(cfg, moe)
    with GM.cuda_calls_on_cpu():
        model = build_model(bridge, cfg, hf_tensors, moe, mcore_vision="_mcore_vision_" in variant)
    bridge.load_weights([model.language_model], text_dir)
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    legacy = "_legacy" in variant
    if legacy:
        VL.save_verl_legacy(model, actor, ep, drop_expert=(0, 1) if missing_expert else None,
                             gpt_model=model.language_model, prefix="language_model.")
    else:
        VL.save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    if rank == 0:
        write_case_files(case_dir, cfg, actor, hf_tensors, logits, variant, moe, legacy, missing_expert)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def write_case_files(case_dir, cfg, actor, hf_tensors, logits, variant, moe, legacy, missing_expert):
    import megatron.core
    import mbridge
    tp, pp, ep = VARIANTS[variant]
    E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
    E.write_oracle(case_dir, hf_tensors, logits)
    text = (f"megatron-core {megatron.core.__version__} MoE GPTModel (SequentialMLP experts) loaded by mbridge "
            f"{mbridge.__version__}'s Qwen3-MoE bridge" if moe else
            f"megatron-core {megatron.core.__version__} GPTModel loaded by mbridge {mbridge.__version__}'s Qwen3 bridge")
    vision = ("Megatron-Bridge's mcore vision tower rebuilt from megatron-core ViT layers (mcore_qwen3_vl_vision.py)"
              if "_mcore_vision_" in variant else "transformers' " + ("Qwen3VLMoeVisionModel" if moe else "Qwen3VLVisionModel"))
    E.write_case(case_dir, producer=f"Megatron-Bridge 0.3.1's Qwen3VLModel parts ({text}, {vision}), "
                 "local spec, " + VL.layout_text(tp, pp, ep, legacy),
                 checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "megatron"],
                 output_dtype="bfloat16", oracle_dtypes=True, hf_load=not missing_expert,
                 logits_exact=not missing_expert, hf_auto_class=AUTO_CLASS,
                 expected_error=MISSING_EXPERT_ERROR if missing_expert else None)


if __name__ == "__main__":
    main()
