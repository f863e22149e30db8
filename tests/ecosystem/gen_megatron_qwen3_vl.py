"""Qwen3-VL (dense) checkpoints in Megatron-Bridge 0.3.1's layout, the model built from the parts
its Qwen3VLModel is made of, on megatron-core 0.16 (local, non-TE spec).

    torchrun --standalone --nproc_per_node=4 gen_megatron_qwen3_vl.py CASE_DIR VARIANT

VARIANT (4 gloo ranks, TP 2 x PP 2; the tiny Qwen3VLForConditionalGeneration of
gen_families.qwen3_vl_config: 2 text layers, 3 vision blocks, 2 DeepStack mergers, bf16):
  qwen3_vl_tp2pp2_dist     dist_checkpointing.save of the model's sharded_state_dict() into verl's
                           actor/dist_ckpt/, config and tokenizer in actor/huggingface/
  qwen3_vl_tp2pp2_legacy   verl's legacy actor/model/mp_rank_TT_PPP/model.pt

Megatron-Bridge 0.3.1 itself does not install here (it requires transformers < 5 and Transformer
Engine), so its Qwen3VLModel is rebuilt from what that class holds (megatron/bridge/models/
qwen_vl/modelling_qwen3_vl/model.py): `language_model`, a megatron-core GPTModel (Qwen3VLGPTModel
subclasses it and adds no parameter), and `vision_model`, transformers' own Qwen3VLVisionModel
built from vision_config on the first pipeline stage (the bridge maps it whole:
ReplicatedMapping vision_model.** <-> model.visual.**). The language model is loaded by mbridge
0.15.1's own Qwen3 bridge (its name mapping, QKV grouping and TP split) from the VL model's text
tensors under Qwen3ForCausalLM's names; the vision model takes the VL model's model.visual.*
tensors as they are. The GPTModel uses plain RoPE where Qwen3VLGPTModel uses M-RoPE: no
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

TP, PP = 2, 2
VARIANTS = ("qwen3_vl_tp2pp2_dist", "qwen3_vl_tp2pp2_legacy")
AUTO_CLASS = "image_text_to_text"
TEXT_PREFIX, VISION_PREFIX = "model.language_model.", "model.visual."


def text_folder(hf_tensors, cfg, folder):
    """The VL model's text part as a Qwen3ForCausalLM folder for mbridge: the same tensors under
    Qwen3's names (model.language_model.X -> model.X, lm_head kept) and the text config."""
    from safetensors.torch import save_file
    os.makedirs(folder)
    text = {("model." + k[len(TEXT_PREFIX):] if k.startswith(TEXT_PREFIX) else k): v.contiguous()
            for k, v in hf_tensors.items() if not k.startswith(VISION_PREFIX)}
    save_file(text, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg.text_config.save_pretrained(folder)


def make_text_bridge(cfg):
    """mbridge's Qwen3 bridge for the text model, asked under the TE names of the local norms."""
    from mbridge.models.qwen3 import Qwen3Bridge

    class LocalSpecBridge(Qwen3Bridge):
        def _weight_name_mapping_mcore_to_hf(self, name):
            for local, te in VL.LOCAL_TO_TE_NORMS:
                if name.endswith(local):
                    name = name[:-len(local)] + te
            return super()._weight_name_mapping_mcore_to_hf(name)

    text = copy.deepcopy(cfg.text_config)
    text.rope_theta = text.rope_parameters["rope_theta"]    # mbridge reads transformers 4.x's key
    text.tie_word_embeddings = cfg.tie_word_embeddings      # a VL model's is the top-level one
    bridge = LocalSpecBridge(text, dtype=torch.bfloat16)
    bridge.set_extra_args(sequence_parallel=False, use_cpu_initialization=True,
                          masked_softmax_fusion=False, gradient_accumulation_fusion=False)
    return bridge


def build_model(bridge, cfg, hf_tensors):
    """Megatron-Bridge's Qwen3VLModel as its parts: GPTModel language_model, HF vision_model."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.module import MegatronModule
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

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
    if first:
        vision = Qwen3VLVisionModel._from_config(cfg.vision_config)
        own = {k[len(VISION_PREFIX):]: v for k, v in hf_tensors.items() if k.startswith(VISION_PREFIX)}
        missing, unexpected = vision.load_state_dict(own, strict=True)
        assert not missing and not unexpected, (missing, unexpected)
    model = Qwen3VLParts(bridge.config, language, vision)
    return model.to(torch.bfloat16).eval()


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {VARIANTS}"
    rank, world = E.init_gloo()
    assert world == TP * PP, f"run with --nproc_per_node={TP * PP}"
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)

    cfg = G.qwen3_vl_config()
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen3VLForConditionalGeneration"]
    cfg.text_config.vocab_size = -(-E.VOCAB // TP) * TP   # VocabParallelEmbedding divides it by TP
    hf_dir, text_dir = os.path.join(case_dir, "hf_model"), os.path.join(case_dir, "hf_text")
    if rank == 0:
        os.makedirs(case_dir, exist_ok=True)
        hf_model = E.build_model(cfg, auto_class=AUTO_CLASS)
        hf_model.save_pretrained(hf_dir)
        logits = E.live_logits(hf_model)
        text_folder(VL.read_safetensors(hf_dir), cfg, text_dir)
    dist.barrier()
    hf_tensors = VL.read_safetensors(hf_dir)

    bridge = make_text_bridge(cfg)
    with GM.cuda_calls_on_cpu():
        model = build_model(bridge, cfg, hf_tensors)
    bridge.load_weights([model.language_model], text_dir)
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    legacy = variant.endswith("_legacy")
    if legacy:
        VL.save_verl_legacy(model, actor)
    else:
        VL.save_dist_ckpt(model, os.path.join(actor, "dist_ckpt"))
    if rank == 0:
        E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
        import megatron.core
        import mbridge
        E.write_oracle(case_dir, hf_tensors, logits)
        E.write_case(case_dir, producer=f"Megatron-Bridge 0.3.1's Qwen3VLModel parts (megatron-core "
                     f"{megatron.core.__version__} GPTModel loaded by mbridge {mbridge.__version__}'s Qwen3 bridge, "
                     f"transformers' Qwen3VLVisionModel), local spec, TP {TP} x PP {PP} on gloo, "
                     + ("verl legacy model/mp_rank_TT_PPP/model.pt" if legacy else
                        "torch_dist (dist_checkpointing.save), verl dist_ckpt layout"),
                     checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "megatron"],
                     output_dtype="bfloat16", oracle_dtypes=True, hf_load=True, logits_exact=True,
                     hf_auto_class=AUTO_CLASS)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
