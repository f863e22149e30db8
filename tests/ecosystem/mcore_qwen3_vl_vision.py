"""Megatron-Bridge's mcore Qwen3-VL vision tower (models/qwen_vl/modelling_qwen3_vl/vision_model.py,
utils.py) rebuilt from megatron-core 0.16 modules on the local spec, and loaded from transformers'
own Qwen3-VL vision weights by the bridge's mapping facts (reference model-families.md §3).

What comes from where:
  - module tree and names: the bridge's Qwen3VLVisionModel holds `patch_embed.proj` (Conv3d with
    bias), `pos_embed` (nn.Embedding), `decoder` (a TransformerBlock of ViT layers, no final norm)
    whose `deepstack_merger_list.{k}` are patch mergers, and `merger`; a patch merger holds
    `patch_norm` (LayerNorm), `linear_fc1` (column-parallel, gather_output False, with bias) and
    `linear_fc2` (row-parallel, input_is_parallel, with bias) [Megatron-Bridge vision_model.py, utils.py];
  - the layers: megatron-core's own ViT local spec (get_vit_layer_with_local_spec: LayerNorm with
    bias as input_layernorm / pre_mlp_layernorm, linear_qkv and linear_fc1 column-parallel with
    bias, linear_proj and linear_fc2 row-parallel) with gelu and no gating; the bridge's TE spec
    fuses the norms into linear_qkv / linear_fc1 (layer_norm_weight / layer_norm_bias), the local
    spec keeps them apart: the names differ, the values do not;
  - the mapping: HF's fused attn.qkv [Q; K; V] is regrouped per head [q_h; k_h; v_h] (the bridge's
    ConcatenatedQKVMapping), norm1 / norm2 are the layer norms, merger.norm is patch_norm; every
    tensor-parallel parameter takes its rank's chunk along the dim megatron-core records on it
    (partition_dim), the others the whole tensor.
The bridge's own class is not imported: Megatron-Bridge 0.3.1 needs transformers < 5 and
Transformer Engine.
"""
import copy

import torch
from torch import nn


def vision_transformer_config(language_config, vision):
    """A megatron-core TransformerConfig for the ViT from vision_config (gelu, biases, LayerNorm,
    no GQA), built on every pipeline stage's view as one stage (the tower lives on the first)."""
    import torch.nn.functional as F
    config = copy.deepcopy(language_config)
    config.num_layers = vision.depth
    config.hidden_size = vision.hidden_size
    config.ffn_hidden_size = vision.intermediate_size
    config.num_attention_heads = vision.num_heads
    config.num_query_groups = vision.num_heads
    config.kv_channels = vision.hidden_size // vision.num_heads
    config.add_bias_linear = True
    config.add_qkv_bias = True
    config.gated_linear_unit = False
    config.activation_func = lambda x: F.gelu(x, approximate="tanh")
    config.normalization = "LayerNorm"
    config.layernorm_epsilon = 1e-6
    config.qk_layernorm = False
    config.num_moe_experts = None
    config.pipeline_model_parallel_size = 1
    config.first_pipeline_num_layers = None
    config.num_layers_in_first_pipeline_stage = None
    config.num_layers_in_last_pipeline_stage = None
    return config


def megatron_module():
    from megatron.core.transformer.module import MegatronModule
    return MegatronModule


class PatchMerger(megatron_module()):
    """The bridge's Qwen3VLVisionPatchMerger: patch_norm, column-parallel fc1, row-parallel fc2
    (a MegatronModule, so that its sharded_state_dict keeps the tensor-parallel axes)."""

    def __init__(self, config, vision, postshuffle):
        super().__init__(config=config)
        from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
        merged = vision.hidden_size * vision.spatial_merge_size ** 2
        init = nn.init.zeros_
        self.patch_norm = nn.LayerNorm(merged if postshuffle else vision.hidden_size, eps=1e-6)
        self.linear_fc1 = ColumnParallelLinear(merged, merged, config=config, init_method=init, bias=True,
                                               gather_output=False, skip_bias_add=False)
        self.linear_fc2 = RowParallelLinear(merged, vision.out_hidden_size, config=config, init_method=init,
                                            bias=True, input_is_parallel=True, skip_bias_add=False)


class MergerList(megatron_module()):
    """decoder.deepstack_merger_list: children named 0, 1, ... (a MegatronModule, see PatchMerger)."""

    def __init__(self, config, mergers):
        super().__init__(config=config)
        for k, merger in enumerate(mergers):
            self.add_module(str(k), merger)


class McoreVisionModel(megatron_module()):
    """The bridge's Qwen3VLVisionModel's parameters (module docstring)."""

    def __init__(self, language_config, vision):
        from megatron.core.models.vision.vit_layer_specs import get_vit_layer_with_local_spec
        from megatron.core.transformer.transformer_block import TransformerBlock
        config = vision_transformer_config(language_config, vision)
        super().__init__(config=config)
        kernel = (vision.temporal_patch_size, vision.patch_size, vision.patch_size)
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv3d(getattr(vision, "in_channels", 3), vision.hidden_size, kernel, kernel, bias=True)
        self.pos_embed = nn.Embedding(vision.num_position_embeddings, vision.hidden_size)
        self.decoder = TransformerBlock(config, get_vit_layer_with_local_spec(), post_layer_norm=False)
        self.decoder.deepstack_merger_list = MergerList(
            config, [PatchMerger(config, vision, postshuffle=True) for _ in vision.deepstack_visual_indexes])
        self.merger = PatchMerger(config, vision, postshuffle=False)


def per_head_qkv(fused, heads):
    """HF's [Q; K; V] rows (or bias) regrouped per head [q_h; k_h; v_h], Megatron's layout."""
    q, k, v = fused.chunk(3, dim=0)
    parts = [t.reshape(heads, -1, *t.shape[1:]) for t in (q, k, v)]
    return torch.cat(parts, dim=1).reshape(fused.shape)


def hf_name(megatron_name):
    """The HF vision tensor (under model.visual.) a megatron parameter of this tower holds."""
    name = megatron_name
    for mg, hf in ((".input_layernorm.", ".norm1."), (".pre_mlp_layernorm.", ".norm2."),
                   (".self_attention.linear_qkv.", ".attn.qkv."), (".self_attention.linear_proj.", ".attn.proj."),
                   (".patch_norm.", ".norm.")):
        name = name.replace(mg, hf)
    name = name.replace("decoder.layers.", "blocks.").replace("decoder.deepstack_merger_list.", "deepstack_merger_list.")
    return name


@torch.no_grad()
def load_from_hf(model, hf_visual, heads, tp_rank, tp_size):
    """Each parameter from HF's vision tensors (`hf_visual`, names under model.visual.): qkv
    regrouped per head, then this rank's chunk along partition_dim for a tensor-parallel one."""
    for name, param in model.named_parameters():
        full = hf_visual[hf_name(name)]
        if ".linear_qkv." in name:
            full = per_head_qkv(full, heads)
        if getattr(param, "tensor_model_parallel", False):
            full = full.chunk(tp_size, dim=param.partition_dim)[tp_rank]
        assert full.shape == param.shape, (name, full.shape, param.shape)
        param.copy_(full.to(param.dtype))
    return model
