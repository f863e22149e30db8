"""torch.distributed.checkpoint (DCP) folders written by torch 2.13's real dcp.save: accelerate's
FSDP2 sharded save, the same with DCP's zstd stream extension, and torchtitan steps of models built
by torchtitan's own code.

    torchrun --standalone --nproc_per_node=N gen_dcp.py CASE_DIR VARIANT

VARIANT (N ranks, 2 unless said):
  accelerate_fsdp2      Qwen2 bf16 under fully_shard, saved by accelerate's own save_fsdp_model
                        (FSDP2, SHARDED_STATE_DICT): ckpt/checkpoint_0/pytorch_model_fsdp_0/ holding
                        dcp.save({"model": get_model_state_dict(model)}) with the default writer
  accelerate_zstd       the same state dict and folder, FileSystemWriter(_extensions=[ZStandard()])
                        (an extension accelerate never passes); torch's ZStandard needs the
                        zstandard or pyzstd module, which requirements.txt does not list: without
                        it this variant stops with that message. vmerge refuses stream-transformed
                        items by design ("stored with stream transforms (e.g. zstd), not supported")
  accelerate_fp4_edges  accelerate_fsdp2's save of a Qwen2 whose weights hold the values 4-bit float
                        quantizers get wrong: all-zero groups and a zero o_proj, bf16 subnormals,
                        -0.0, tiny negatives, every E2M1 tie at an exact MXFP4 scale, and a large
                        k_proj value that drives q/k/v's shared NVFP4 global scale down until most
                        of their group scales round to zero (merged with --quantize=nvfp4/mxfp4)
  accelerate_fp8_block_edges  the same save of a Qwen2 of hidden 128 and intermediate 200 (gate/up
                        end in a partial row block, down_proj's input is not a multiple of 128)
                        whose weights hold the values FP8_BLOCK quantizers get wrong: all-zero
                        blocks and a zero o_proj, a block of bf16 subnormals whose scale underflows
                        bf16, -0.0, tiny negatives, the E4M3 ties at scale 1 (normal and subnormal),
                        a block whose largest value is 3e4 (merged with --quantize=fp8-block)
  torchtitan_llama3     torchtitan's Llama3 (the debugmodel's builder, dims shrunk), fully_shard,
                        dcp.save(ModelWrapper([model]).state_dict()) as ckpt/outputs/checkpoint/step-10
  torchtitan_qwen3_moe  the same for torchtitan's Qwen3 MoE (debugmodel_moe's builder, 4 experts)
  torchtitan_deepseek_v3  the same for torchtitan's DeepSeek-V3 (its layer builder: MLA with
                        q_lora_rank, a dense first layer, 4 sigmoid-routed experts with a shared
                        expert and a nonzero expert_bias_E, one MTP depth)
  torchtitan_gpt_oss    the same for torchtitan's GPT-OSS (its layer builder: attention sinks,
                        q/k/v/o biases, alternate sliding-window layers, YaRN, 4 experts with
                        biases stored [E, out, in]); the oracle's experts are transposed here, as
                        torchtitan 0.3.0's to_hf drops them (gpt_oss_to_hf says why)

The DCP folders carry no config: config.json and the tokenizer go to <case>/hf_config, passed
with --hf_config. torchtitan oracles are the producer's own conversion: state_dict_adapter.to_hf
of the full state dict; the logits are those of the matching transformers model loading them,
checked against torchtitan's own forward (GPT-OSS: see gpt_oss_to_hf).
"""
import copy
import os
import shutil
import sys
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402

TORCHTITAN_STEP = 10
# Shrunk torchtitan dims (the debugmodels are dim 256, 6-8 layers, vocab 2048).
TT_DIM, TT_HEADS, TT_KV_HEADS, TT_LAYERS, TT_HEAD_DIM = 64, 4, 2, 2, 16
MOE_EXPERTS, MOE_TOP_K, MOE_HIDDEN = 4, 2, 32
# DeepSeek-V3's multi-head latent attention, shrunk; every width distinct so a swapped
# projection fails by shape.
MLA = dict(q_lora_rank=24, kv_lora_rank=40, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)
DSV3_DENSE_HIDDEN, DSV3_MTP_DEPTHS = 88, 1
# How far transformers' logits (fp32 throughout) may lie from torchtitan's own forward, relative
# to the largest logit. torchtitan's GroupedExperts runs the experts' grouped matmuls in bf16
# (x.bfloat16(), w.bfloat16(), torch._grouped_mm) by design; routing is the same (checked: same
# experts, same weights), so only the MoE case needs bf16's tolerance.
# GPT-OSS's experts return bf16 into the fp32 residual's scatter_add, which refuses the mix: its
# reference forward runs on a bf16 copy of the model (its mixed-precision training dtype).
FORWARD_TOLERANCE = {"torchtitan_llama3": 1e-5, "torchtitan_qwen3_moe": 1e-2, "torchtitan_deepseek_v3": 1e-2,
                     "torchtitan_gpt_oss": 3e-2}
# torchtitan's GPT-OSS builder fixes the attention at 64 heads of 64, 8 KV heads; the experts'
# width differs from dim so that an untransposed expert fails by shape.
GPT_OSS_HIDDEN = 48


def randomize(module):
    """Every parameter distinct (torchtitan's init leaves all norms at one, so a swapped q_norm /
    k_norm would go unseen): the eco_common.build_model spread, same on every rank."""
    torch.manual_seed(1234)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.05 + (1.0 if p.dim() == 1 else 0.0))


def shard(model, parts):
    """fully_shard each part, then the root, over all ranks (1-D mesh as both producers use)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    for part in parts:
        fully_shard(part, mesh=mesh)
    fully_shard(model, mesh=mesh)


def check_gather(model, before):
    """The full tensors of the sharded model (a collective); they must be what was sharded."""
    full = E.full_tensors(model.state_dict())
    for name, value in full.items():
        assert torch.equal(value, before[name]), f"gathering {name} changed it"
    return full


# --- accelerate ---------------------------------------------------------------------------

def accelerate_plugin():
    from accelerate.utils import FullyShardedDataParallelPlugin
    return FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")


def save_accelerate(model, output_dir, zstd):
    """accelerate's save_fsdp_model itself; for zstd, its exact state dict and folder with the
    extension it cannot pass. accelerate's logging needs its process state; PartialState (over
    the gloo group already up) also serves as the accelerator, whose process_index/num_processes
    only the FULL/LOCAL branches read."""
    import torch.distributed.checkpoint as dcp
    from accelerate.utils.constants import FSDP_MODEL_NAME
    from accelerate.utils.fsdp_utils import _get_model_state_dict, _prepare_sd_options, save_fsdp_model
    plugin = accelerate_plugin()
    if not zstd:
        from accelerate import PartialState
        save_fsdp_model(plugin, PartialState(), model, output_dir)
        return
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    if not ZStandard.is_available():
        raise SystemExit("accelerate_zstd: torch's ZStandard extension needs the 'zstandard' or 'pyzstd' "
                         "module, and neither is installed")
    ckpt_dir = os.path.join(output_dir, f"{FSDP_MODEL_NAME}_0")
    os.makedirs(ckpt_dir, exist_ok=True)
    state_dict = _get_model_state_dict(model, sd_options=_prepare_sd_options(plugin))
    dcp.save({"model": state_dict}, storage_writer=dcp.FileSystemWriter(ckpt_dir, _extensions=[ZStandard()]),
             planner=DefaultSavePlanner())


# The E2M1 ties of compressed-tensors' rounding (each goes to the even code) and their negatives:
# in a group of 32 whose largest |w| is 4 the MXFP4 scale is exactly 1, so t = w.
E2M1_TIES = [4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def set_fp4_edges(model):
    """Values 4-bit float quantizers get wrong, set in the live bf16 model before it is sharded."""
    layers = model.model.layers
    with torch.no_grad():
        q = layers[0].self_attn.q_proj.weight
        q[0, 0:16] = 0.0                                                   # an all-zero group
        q[0, 16:32] = torch.tensor([2.0 ** -(126 + k % 8) for k in range(16)]) * torch.tensor(
            [(-1) ** k for k in range(16)], dtype=torch.float32)           # bf16 normals and subnormals
        q[1, ::3] = -0.0                                                   # negative zeros
        q[1, 1::3] = -1e-6                                                 # tiny negatives: code -0 (0x8)
        ties = torch.tensor(E2M1_TIES + [-t for t in E2M1_TIES])
        q[2, 0:16] = ties
        q[2, 16:32] = ties
        q[3, 32:48] = ties * 2.0 ** -10                                    # the same ties at scale 2^-10
        layers[0].self_attn.k_proj.weight[5, 7] = 3.0e4                   # shrinks q/k/v's global scale
        layers[1].self_attn.o_proj.weight.zero_()                          # NVFP4 global scale 1
        layers[1].mlp.up_proj.weight[0, :] = 2.0 ** -133                  # a row of bf16's smallest subnormal


# The float8_e4m3fn ties at scale 1 (each goes to the even code: 1.0625 -> 1, 17 -> 16, 2^-10 -> 0,
# 3 * 2^-10 -> 2^-8) beside the block's largest value 448, and their negatives.
E4M3_TIES = [448.0, 1.0625, 17.0, 2.0 ** -10, 3 * 2.0 ** -10, 1.1875, 208.0]
# Inputs 128 (whole column blocks), intermediate 200: gate/up [200, 128] end in a partial row block,
# down_proj [128, 200] stays unquantized under FP8_BLOCK.
SIZES_FP8_EDGES = dict(hidden_size=128, intermediate_size=200, head_dim=64)


def set_fp8_block_edges(model):
    """Values FP8_BLOCK quantizers get wrong, set in the live bf16 model before it is sharded."""
    layers = model.model.layers
    with torch.no_grad():
        q = layers[0].self_attn.q_proj.weight                              # [256, 128]: two blocks
        ties = torch.tensor(E4M3_TIES + [-t for t in E4M3_TIES])
        q[0, 0:14] = ties                                                  # block amax 448: scale 1
        q[1, ::3] = -0.0                                                   # negative zeros
        q[1, 1::3] = -1e-6                                                 # tiny negatives: code -0 (0x80)
        q[128:256, :] = 0.0                                                # an all-zero block: eps(bf16)
        k = layers[0].self_attn.k_proj.weight                              # [128, 128]: one block
        k.copy_(torch.tensor([2.0 ** -(126 + i % 8) * (-1) ** i for i in range(128 * 128)]).reshape(128, 128))
        layers[0].self_attn.v_proj.weight[5, 7] = 3.0e4                    # a large block maximum
        layers[0].mlp.gate_proj.weight[199, 3] = 5.0                       # the partial row block's amax
        layers[1].self_attn.o_proj.weight.zero_()                          # every block zero
        layers[1].mlp.up_proj.weight[0, :] = 2.0 ** -133                  # a row of bf16's smallest subnormal


def run_accelerate(case_dir, variant, rank, world):
    from accelerate.utils.constants import FSDP_MODEL_NAME
    sizes = SIZES_FP8_EDGES if variant == "accelerate_fp8_block_edges" else None
    cfg = E.tiny_config("qwen2", dtype="bfloat16", sizes=sizes)
    # A config of its own: from_config(dtype=float32) inside build_model rewrites the dtype of the
    # config it is given (so the model would stay fp32 and config.json would say float32).
    model = E.build_model(E.tiny_config("qwen2", dtype="bfloat16", sizes=sizes))
    if variant == "accelerate_fp4_edges":
        set_fp4_edges(model)
    if variant == "accelerate_fp8_block_edges":
        set_fp8_block_edges(model)
    logits = E.live_logits(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    shard(model, model.model.layers)
    output_dir = os.path.join(case_dir, "ckpt", "checkpoint_0")
    save_accelerate(model, output_dir, zstd=variant == "accelerate_zstd")
    full = check_gather(model, before)
    if rank == 0:
        E.save_hf_files(cfg, os.path.join(case_dir, "hf_config"))
        E.write_oracle(case_dir, full, logits)
        write_case_json(case_dir, variant, world, f"ckpt/checkpoint_0/{FSDP_MODEL_NAME}_0", "dcp", "bfloat16")


# --- torchtitan ---------------------------------------------------------------------------

def import_torchtitan_models():
    """torchtitan 0.3.0's model package imports minimal_async_ep.kernels, which imports triton at
    module top (for GPU expert-parallel kernels); there is no triton on a CPU host. That one
    module is replaced by a stand-in whose every name fails when called: nothing on this path
    calls it (no expert parallelism), and the model, adapter and checkpoint code are torchtitan's."""
    kernels = "torchtitan.distributed.minimal_async_ep.kernels"
    try:
        import triton  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType(kernels)

        def missing(name):
            if name.startswith("__"):
                raise AttributeError(name)

            def needs_triton(*args, **kwargs):
                raise RuntimeError(f"{kernels}.{name} needs triton, which is not installed")
            return needs_triton
        stand_in.__getattr__ = missing
        sys.modules.setdefault(kernels, stand_in)
    from torchtitan.models import deepseek_v3, gpt_oss, llama3, qwen3
    return {"llama3": llama3, "qwen3": qwen3, "deepseek_v3": deepseek_v3, "gpt_oss": gpt_oss}


def llama3_configs(llama3):
    """torchtitan's Llama3 debugmodel built by its own layer builder with shrunk dims, and the
    transformers LlamaConfig that describes the same network (llama3 RoPE scaling, eps 1e-5)."""
    from transformers import LlamaConfig
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm, compute_ffn_hidden_dim
    hidden = compute_ffn_hidden_dim(TT_DIM, multiple_of=8)
    rope = ComplexRoPE.Config(dim=TT_HEAD_DIM, max_seq_len=64, theta=500000, scaling="llama")
    tt = llama3.Llama3Model.Config(
        dim=TT_DIM, vocab_size=E.VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=E.VOCAB, embedding_dim=TT_DIM,
                                        param_init=llama3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=TT_DIM, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(in_features=TT_DIM, out_features=E.VOCAB, param_init=llama3._output_linear_init(TT_DIM)),
        layers=llama3._build_llama3_layers(fuse_qkv=True, n_layers=TT_LAYERS, dim=TT_DIM, n_heads=TT_HEADS,
                                           n_kv_heads=TT_KV_HEADS, hidden_dim=hidden, rope=rope, attn_backend="flex"))
    hf = LlamaConfig(vocab_size=E.VOCAB, hidden_size=TT_DIM, intermediate_size=hidden, num_hidden_layers=TT_LAYERS,
                     num_attention_heads=TT_HEADS, num_key_value_heads=TT_KV_HEADS, head_dim=TT_HEAD_DIM,
                     rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=False,
                     bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": rope.scaling_factor,
                                      "low_freq_factor": rope.low_freq_factor,
                                      "high_freq_factor": rope.high_freq_factor,
                                      "original_max_position_embeddings": rope.original_max_position_embeddings})
    hf.dtype, hf.architectures = "float32", ["LlamaForCausalLM"]
    return tt, hf, llama3.Llama3StateDictAdapter


def qwen3_moe_configs(qwen3):
    """torchtitan's Qwen3 MoE debugmodel builder with shrunk dims, and the Qwen3MoeConfig of the
    same network (softmax router, top-k renormalised, eps 1e-6, theta 1e6, every layer MoE)."""
    from transformers import Qwen3MoeConfig
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear
    tt = qwen3.Qwen3Model.Config(
        vocab_size=E.VOCAB, dim=TT_DIM, norm=qwen3._qwen3_norm(TT_DIM),
        tok_embeddings=Embedding.Config(num_embeddings=E.VOCAB, embedding_dim=TT_DIM, param_init=qwen3._EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=TT_DIM, out_features=E.VOCAB, param_init=qwen3._LINEAR_INIT),
        layers=qwen3._build_qwen3_moe_layers(
            fuse_qkv=True, n_layers=TT_LAYERS, dim=TT_DIM, n_heads=TT_HEADS, n_kv_heads=TT_KV_HEADS,
            head_dim=TT_HEAD_DIM, moe_hidden_dim=MOE_HIDDEN, num_experts=MOE_EXPERTS, top_k=MOE_TOP_K,
            attn_backend="flex", moe_comm_backend="standard",
            rope=CosSinRoPE.Config(dim=TT_HEAD_DIM, max_seq_len=64, theta=1000000.0)))
    hf = Qwen3MoeConfig(vocab_size=E.VOCAB, hidden_size=TT_DIM, head_dim=TT_HEAD_DIM, num_hidden_layers=TT_LAYERS,
                        num_attention_heads=TT_HEADS, num_key_value_heads=TT_KV_HEADS, intermediate_size=88,
                        moe_intermediate_size=MOE_HIDDEN, num_experts=MOE_EXPERTS, num_experts_per_tok=MOE_TOP_K,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-6,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                        max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    hf.dtype, hf.architectures = "float32", ["Qwen3MoeForCausalLM"]
    return tt, hf, qwen3.Qwen3StateDictAdapter


def deepseek_v3_configs(deepseek_v3):
    """torchtitan's DeepSeek-V3 layer builder with shrunk dims (layer 0 dense, then MoE; the MTP
    depth copies the last layer as torchtitan's debugmodel does), and the DeepseekV3Config of the
    same network: sigmoid router, top-k renormalised, one expert group, plain RoPE, eps 1e-5."""
    from transformers import DeepseekV3Config
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    layers = deepseek_v3._build_dsv3_layers(
        n_layers=TT_LAYERS, n_dense_layers=1, dim=TT_DIM, n_heads=TT_HEADS, mscale=1.0, **MLA,
        dense_hidden_dim=DSV3_DENSE_HIDDEN, moe_hidden_dim=MOE_HIDDEN, num_experts=MOE_EXPERTS,
        num_shared_experts=1, router_top_k=MOE_TOP_K, router_score_func="sigmoid", router_route_norm=True,
        attn_backend="flex", moe_comm_backend="standard", non_blocking_capacity_factor=None,
        rope=ComplexRoPE.Config(dim=MLA["qk_rope_head_dim"], max_seq_len=64, theta=10000.0))
    tt = deepseek_v3.DeepSeekV3Model.Config(
        vocab_size=E.VOCAB, dim=TT_DIM,
        tok_embeddings=Embedding.Config(num_embeddings=E.VOCAB, embedding_dim=TT_DIM,
                                        param_init=deepseek_v3._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=TT_DIM, param_init=deepseek_v3._NORM_INIT),
        lm_head=Linear.Config(in_features=TT_DIM, out_features=E.VOCAB,
                              param_init=deepseek_v3._output_linear_init(TT_DIM)),
        layers=layers,
        mtp_layers=deepseek_v3._build_mtp_layers(layers[-1], dim=TT_DIM, num_mtp_layers=DSV3_MTP_DEPTHS))
    hf = DeepseekV3Config(vocab_size=E.VOCAB, hidden_size=TT_DIM, intermediate_size=DSV3_DENSE_HIDDEN,
                          moe_intermediate_size=MOE_HIDDEN, num_hidden_layers=TT_LAYERS,
                          num_attention_heads=TT_HEADS, num_key_value_heads=TT_HEADS, n_shared_experts=1,
                          n_routed_experts=MOE_EXPERTS, num_experts_per_tok=MOE_TOP_K, n_group=1, topk_group=1,
                          routed_scaling_factor=1.0, norm_topk_prob=True, first_k_dense_replace=1, **MLA,
                          rope_interleave=True, rms_norm_eps=1e-5, max_position_embeddings=64,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                          num_nextn_predict_layers=DSV3_MTP_DEPTHS, tie_word_embeddings=False,
                          bos_token_id=1, eos_token_id=2)
    hf.dtype, hf.architectures = "float32", ["DeepseekV3ForCausalLM"]
    return tt, hf, deepseek_v3.DeepSeekV3StateDictAdapter


def gpt_oss_configs(gpt_oss):
    """torchtitan's GPT-OSS layer builder with shrunk dims (its attention is always 64 heads of 64
    with 8 KV heads; even layers slide over a 128-token window), and the GptOssConfig of the same
    network: YaRN as torchtitan's debugmodel sets it, softmax over the top-k router logits, eps 1e-5."""
    from transformers import GptOssConfig
    from torchtitan.models.common import CosSinRoPE, Embedding, Linear, RMSNorm
    yarn = dict(rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                original_max_position_embeddings=4096)
    rope = CosSinRoPE.Config(dim=64, max_seq_len=64, theta=yarn["rope_theta"], scaling="yarn",
                             rope_factor=yarn["factor"], beta_fast=yarn["beta_fast"], beta_slow=yarn["beta_slow"],
                             truncate=False, original_seq_len=yarn["original_max_position_embeddings"])
    tt = gpt_oss.GptOssModel.Config(
        vocab_size=E.VOCAB, dim=TT_DIM,
        tok_embeddings=Embedding.Config(num_embeddings=E.VOCAB, embedding_dim=TT_DIM, param_init=gpt_oss._EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=TT_DIM, param_init=gpt_oss._NORM_INIT),
        lm_head=Linear.Config(in_features=TT_DIM, out_features=E.VOCAB, param_init=gpt_oss._output_linear_init(TT_DIM)),
        layers=gpt_oss._build_gptoss_layers(
            fuse_qkv=True, dim=TT_DIM, n_layers=TT_LAYERS, hidden_dim=GPT_OSS_HIDDEN, num_experts=MOE_EXPERTS,
            top_k=MOE_TOP_K, load_balance_coeff=1e-3, attn_backend="flex", moe_comm_backend="standard", rope=rope))
    hf = GptOssConfig(vocab_size=E.VOCAB, hidden_size=TT_DIM, intermediate_size=GPT_OSS_HIDDEN,
                      num_hidden_layers=TT_LAYERS, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                      num_local_experts=MOE_EXPERTS, num_experts_per_tok=MOE_TOP_K, sliding_window=128,
                      layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(TT_LAYERS)],
                      attention_bias=True, rms_norm_eps=1e-5, swiglu_limit=7.0, max_position_embeddings=131072,
                      rope_parameters={"rope_type": "yarn", **yarn}, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2)
    hf.dtype, hf.architectures = "float32", ["GptOssForCausalLM"]
    return tt, hf, gpt_oss.GptOssStateDictAdapter


def gpt_oss_to_hf(adapter_cls, tt_config, full):
    """torchtitan 0.3.0's GptOssStateDictAdapter.to_hf keys the experts as ...inner_experts.mlp1_weight
    (and mlp1_bias, mlp2_weight, mlp2_bias) while the module's parameters are mlp1_weight_EGD,
    mlp1_bias_EG, mlp2_weight_EDF and mlp2_bias_ED, so to_hf drops every expert tensor (and it would
    name the bf16 weights *_blocks, the MXFP4 names). Its output is kept for everything else; the
    experts are added by GPT-OSS's definition: HF's gate_up_proj [E, H, 2F] is mlp1_weight_EGD
    [E, 2F, H] transposed (gate and up stay interleaved: both forwards take [..., ::2] and
    [..., 1::2]), down_proj [E, F, H] is mlp2_weight_EDF transposed, the biases as they are.
    transformers reproducing torchtitan's own forward from these tensors is the check."""
    hf = adapter_cls(tt_config, None).to_hf(full)
    if any(".mlp.experts." in k for k in hf):
        raise SystemExit("torchtitan's GPT-OSS to_hf now writes experts: use its output as the oracle")
    for key, value in full.items():
        if ".inner_experts." not in key:
            continue
        layer = key.split(".")[1]
        prefix = f"model.layers.{layer}.mlp.experts."
        name = key.rsplit(".", 1)[1]
        hf[prefix + {"mlp1_weight_EGD": "gate_up_proj", "mlp1_bias_EG": "gate_up_proj_bias",
                     "mlp2_weight_EDF": "down_proj", "mlp2_bias_ED": "down_proj_bias"}[name]] = \
            value.transpose(1, 2).contiguous() if name.endswith(("_EGD", "_EDF")) else value
    return hf


# variant: (torchtitan model package, config builder, whether the HF model has the router bias
# expert_bias_E becomes: Qwen3-MoE has none, so there to_hf drops it and it must stay zero).
TORCHTITAN_MODELS = {"torchtitan_llama3": ("llama3", llama3_configs, False),
                     "torchtitan_qwen3_moe": ("qwen3", qwen3_moe_configs, False),
                     "torchtitan_deepseek_v3": ("deepseek_v3", deepseek_v3_configs, True),
                     "torchtitan_gpt_oss": ("gpt_oss", gpt_oss_configs, False)}


def randomize_expert_bias(model):
    """torchtitan starts the load-balancing buffer expert_bias_E at zero; a nonzero one (same on
    every rank) makes it steer routing, so a dropped or misplaced e_score_correction_bias shows."""
    torch.manual_seed(4321)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("expert_bias_E"):
                buf.copy_(torch.randn_like(buf) * 0.05)


def build_torchtitan(tt_config, expert_bias):
    """As torchtitan's trainer does: build on the meta device, to_empty, init_weights (fp32, the
    trainer's training.dtype default); then the random spread (and a nonzero expert_bias_E where the
    HF model has that router bias)."""
    with torch.device("meta"):
        model = tt_config.build()
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("cpu"))
    randomize(model)
    if expert_bias:
        randomize_expert_bias(model)
    return model.eval()


@torch.no_grad()
def torchtitan_logits(model):
    """torchtitan's own forward on FIXED_INPUT. Its FlexAttention runs flex_attention under
    torch.compile (inductor, a C++ build on CPU); the eager flex_attention computes the same
    attention unfused, so the compiled entry point is swapped for it here."""
    from torch.nn.attention.flex_attention import flex_attention
    from torchtitan.models.common.attention import FlexAttention
    FlexAttention._compiled_flex_attn = flex_attention
    ids = torch.tensor(E.FIXED_INPUT)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)
    out = model(ids, positions, model.get_attention_masks(positions))
    return (out[0] if isinstance(out, list) else out).float()  # an MTP model: [main, depth 1, ...]


@torch.no_grad()
def transformers_logits(hf_config, hf_tensors, folder):
    """The matching transformers model loading to_hf's tensors with from_pretrained (so that its
    own conversion mapping applies, e.g. fusing Qwen3-MoE experts), and its logits."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    os.makedirs(folder, exist_ok=True)
    hf_config.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in hf_tensors.items()}, os.path.join(folder, "model.safetensors"))
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    bad = {k: list(v)[:5] for k, v in info.items() if v}
    if bad:
        raise SystemExit(f"transformers does not take torchtitan's to_hf output: {bad}")
    shutil.rmtree(folder)
    return E.live_logits(model.eval())


def main_model_tensors(hf_tensors, hf_config):
    """to_hf's tensors less the MTP layers (model.layers.{L+k}), which transformers' DeepseekV3
    does not build (its unexpected-key list names only the release's layer 61)."""
    mtp = [f"model.layers.{hf_config.num_hidden_layers + k}." for k in range(getattr(hf_config, "num_nextn_predict_layers", 0) or 0)]
    return {k: v for k, v in hf_tensors.items() if not any(k.startswith(p) for p in mtp)}


def mtp_key_pattern(hf_config):
    """The names of the MTP layers transformers leaves unloaded (None: no MTP layer)."""
    depths = getattr(hf_config, "num_nextn_predict_layers", 0) or 0
    if not depths:
        return None
    layers = "|".join(str(hf_config.num_hidden_layers + k) for k in range(depths))
    return rf"model\.layers\.({layers})\..+"


def run_torchtitan(case_dir, variant, rank, world):
    from torch.distributed.checkpoint import save as dcp_save
    from torchtitan.components.checkpointer.base import ModelWrapper
    package, configs, expert_bias = TORCHTITAN_MODELS[variant]
    tt_config, hf_config, adapter_cls = configs(import_torchtitan_models()[package])
    model = build_torchtitan(tt_config, expert_bias)
    tt_logits = torchtitan_logits(copy.deepcopy(model).to(torch.bfloat16) if package == "gpt_oss" else model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mtp_layers = list(model.mtp_layers) if getattr(model, "mtp_layers", None) is not None else []
    shard(model, [model.tok_embeddings, *model.layers.values(), *mtp_layers, model.norm, model.lm_head])
    step_dir = os.path.join(case_dir, "ckpt", "outputs", "checkpoint", f"step-{TORCHTITAN_STEP}")
    dcp_save(ModelWrapper([model]).state_dict(), checkpoint_id=step_dir)
    full = check_gather(model, before)
    if rank == 0:
        hf_tensors = (gpt_oss_to_hf(adapter_cls, tt_config, full) if package == "gpt_oss"
                      else adapter_cls(tt_config, None).to_hf(full))
        logits = transformers_logits(hf_config, main_model_tensors(hf_tensors, hf_config),
                                     os.path.join(case_dir, "hf_reference"))
        diff = (logits - tt_logits).abs().max().item()
        print(f"{variant}: transformers vs torchtitan forward: max |diff| {diff:.3g} "
              f"(scale {tt_logits.abs().max().item():.3g})", flush=True)
        if diff > FORWARD_TOLERANCE[variant] * tt_logits.abs().max().item():
            raise SystemExit(f"{variant}: to_hf weights in transformers do not reproduce torchtitan's forward")
        E.save_hf_files(hf_config, os.path.join(case_dir, "hf_config"))
        E.write_oracle(case_dir, hf_tensors, logits)
        write_case_json(case_dir, variant, world, "ckpt/outputs", "torchtitan", "float32",
                        mtp_keys=mtp_key_pattern(hf_config))


def write_case_json(case_dir, variant, world, checkpoint, backend, dtype, mtp_keys=None):
    producer = {"accelerate_fsdp2": "accelerate save_fsdp_model (FSDP2 SHARDED_STATE_DICT)",
                "accelerate_fp4_edges": "accelerate save_fsdp_model (FSDP2 SHARDED_STATE_DICT), 4-bit float edge values",
                "accelerate_fp8_block_edges": "accelerate save_fsdp_model (FSDP2 SHARDED_STATE_DICT), FP8_BLOCK edge values",
                "accelerate_zstd": "dcp.save with FileSystemWriter(_extensions=[ZStandard()])",
                "torchtitan_llama3": "torchtitan Llama3 + ModelWrapper + dcp.save",
                "torchtitan_qwen3_moe": "torchtitan Qwen3 MoE + ModelWrapper + dcp.save",
                "torchtitan_deepseek_v3": "torchtitan DeepSeek-V3 (MTP) + ModelWrapper + dcp.save",
                "torchtitan_gpt_oss": "torchtitan GPT-OSS + ModelWrapper + dcp.save"}[variant]
    # to_hf writes no embedding / head copies in an MTP layer: the merge leaves the release's out.
    mtp_args = ["--no_mtp_shared_copies"] if mtp_keys else []
    E.write_case(case_dir, producer=f"torch {torch.__version__} {producer}, fully_shard over {world} ranks",
                 checkpoint=checkpoint, output_dtype=dtype, hf_load=True, logits_exact=True,
                 **({"hf_unexpected_keys": mtp_keys} if mtp_keys else {}),
                 merge_args=["--backend", backend, *mtp_args], hf_config="hf_config",
                 # vmerge reads no zstd-compressed DCP items yet: the merge must refuse, naming it.
                 expected_error="stored with stream transforms (e.g. zstd), not supported"
                 if variant == "accelerate_zstd" else None,
                 # The edge values are for the quantizers' bits; logits of such weights say nothing.
                 **({"quantized_modes": ["nvfp4", "mxfp4"], "quantized_logits": False}
                    if variant == "accelerate_fp4_edges" else {}),
                 **({"quantized_modes": ["fp8_block_ct", "fp8_dynamic"], "quantized_logits": False}
                    if variant == "accelerate_fp8_block_edges" else {}))


VARIANTS = {"accelerate_fsdp2": run_accelerate, "accelerate_zstd": run_accelerate,
            "accelerate_fp4_edges": run_accelerate, "accelerate_fp8_block_edges": run_accelerate,
            "torchtitan_llama3": run_torchtitan, "torchtitan_qwen3_moe": run_torchtitan,
            "torchtitan_deepseek_v3": run_torchtitan, "torchtitan_gpt_oss": run_torchtitan}


if __name__ == "__main__":
    E.run_variant(VARIANTS, sys.argv)
