"""Megatron-Bridge LoRA on a megatron-core 0.16 MoE GPTModel (Qwen3-MoE shape), saved as verl saves it.

    torchrun --standalone --nproc_per_node=4 gen_megatron_lora.py CASE_DIR VARIANT

The live model: 4 gloo ranks, TP 1 x PP 2 x EP 2 (data-parallel 2), local spec, 4 layers of
grouped-query attention with q/k norms and a SequentialMLP of 4 experts (top-2, softmax over
the top-k logits as Qwen3-MoE's norm_topk_prob computes it, allgather dispatcher), bf16 through
Float16Module. LoRA (r 4, alpha 8) on every linear_qkv, linear_proj and every expert's linear_fc1
and linear_fc2, Megatron-Bridge's default target_modules.

VARIANT:
  adapter_ckpt  verl's adapter_checkpoint/ (verl/utils/megatron_peft_utils.py save_adapter_checkpoint:
                each rank torch.saves {"adapter_state_dict": named_parameters containing ".adapter."}
                as mp_rank_TT[_PPP][_EEE]_adapter.pt); the frozen base is the HF model the run
                started from (base/, --lora_base)
  torch_dist    megatron.core.dist_checkpointing.save of the whole model's sharded_state_dict (frozen
                base, adapters and their _extra_state together) in Megatron-LM's iteration layout,
                as verl saves with use_dist_checkpointing; TP 1 x PP 2 x EP 1 on 2 ranks (see below)

Megatron-Bridge itself cannot be imported here: megatron_bridge 0.3.1 imports transformer_engine
unconditionally (megatron/bridge/peft/lora_layers.py and peft/lora.py: `import
transformer_engine.pytorch as te`, reached from megatron/bridge/__init__.py through
models/conversion/peft_bridge.py -> peft/canonical_lora.py), and transformer-engine needs CUDA.
So the adapters are built from the live model as its LoRA.transform builds them on this spec,
with megatron-core's own layers: every targeted module becomes a wrapper holding `to_wrap` (the
base layer) and `adapter` with `linear_in` (ColumnParallelLinear in -> r for a column-parallel
base, RowParallelLinear for a row-parallel one) and `linear_out` (ColumnParallelLinear r -> out),
`is_expert` for expert layers (peft/utils.py ParallelLinearAdapter, is_expert_linear), bf16 like
the model. Its state dict drops `.to_wrap.` and its sharded_state_dict is to_wrap's plus
linear_in's and linear_out's under `<prefix>adapter.` with the base's offsets, linear_out of
linear_fc1 through apply_swiglu_sharded_factory, and an expert adapter's replica_id[1] set to
the expert-parallel rank (adapter_wrapper.py AdapterWrapper, utils.py
ParallelLinearAdapter.sharded_state_dict). That last rule makes expert-parallel rank 1's
expert adapters replicas, so with EP 2 their chunks of the stacked expert axis are never
written and dist_checkpointing refuses the save: the torch_dist variant runs with EP 1.
B (linear_out) is random, not the zeros Bridge initialises it with.

Oracles, from the live ranks' tensors gathered on rank 0 (never from vmerge):
  weights.safetensors   the base model under Qwen3-MoE's HF names (megatron_moe_qwen3 rules
                        written out here: q/k/v from the grouped linear_qkv rows, gate/up from
                        fc1's halves, experts numbered globally)
  adapter.safetensors   the adapter as Megatron-Bridge's PEFT export names and splits it
                        (models/conversion/peft_bridge.py: lora_A = linear_in for every HF module
                        of the base, lora_B = linear_out split like the base: q/k/v by query
                        group, gate/up halves; per-expert modules model.layers.L.mlp.experts.E.*)
  folded.safetensors    W + (alpha/r)·B·A computed in float64 from the live tensors, cast once
  logits.safetensors    PeftModel (transformers' Qwen3MoeForCausalLM on weights.safetensors plus
                        adapter.safetensors) on the fixed input, in bf16; folded_logits.safetensors:
                        the model holding folded.safetensors. The generator checks, in float32,
                        that PeftModel on the adapter gives the fold's logits (1 % of their scale;
                        bf16 rounding can switch a token's top-2 experts) and that transformers on
                        the base weights computes megatron-core's forward (1e-4).
"""
import argparse
import contextlib
import json
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402
import gen_megatron as G  # noqa: E402

PP, LAYERS, EXPERTS, TOPK = 2, 4, 4, 2
HIDDEN, MOE_FFN, HEADS, GROUPS, HEAD_DIM = 64, 32, 4, 2, 16
R, ALPHA = 4, 8
PADDED_VOCAB = 384   # 257 padded to a multiple of 128 (make_vocab_size_divisible_by x TP 1)
VARIANTS = {"adapter_ckpt": 2, "torch_dist": 1}   # variant -> expert-parallel size
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def hf_config():
    from transformers import Qwen3MoeConfig
    cfg = Qwen3MoeConfig(vocab_size=E.VOCAB, hidden_size=HIDDEN, intermediate_size=88,
                         moe_intermediate_size=MOE_FFN, num_experts=EXPERTS, num_experts_per_tok=TOPK,
                         norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=GROUPS,
                         head_dim=HEAD_DIM, max_position_embeddings=64, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, router_aux_loss_coef=0.0)
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    return cfg


def transformer_config(pp, ep, dtype=torch.bfloat16):
    from megatron.core.transformer.transformer_config import TransformerConfig
    hf = hf_config()
    return TransformerConfig(
        num_layers=LAYERS, hidden_size=HIDDEN, ffn_hidden_size=hf.intermediate_size,
        num_attention_heads=HEADS, num_query_groups=GROUPS, kv_channels=HEAD_DIM, qk_layernorm=True,
        gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
        layernorm_epsilon=hf.rms_norm_eps, add_bias_linear=False, add_qkv_bias=False,
        hidden_dropout=0.0, attention_dropout=0.0, num_moe_experts=EXPERTS, moe_router_topk=TOPK,
        moe_ffn_hidden_size=MOE_FFN, moe_router_pre_softmax=False, moe_router_score_function="softmax",
        moe_token_dispatcher_type="allgather", moe_grouped_gemm=False,
        moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0,
        use_cpu_initialization=True, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        pipeline_dtype=dtype, tensor_model_parallel_size=1, pipeline_model_parallel_size=pp,
        expert_model_parallel_size=ep)


def build_gpt(config):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    spec = get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False, qk_layernorm=True,
                                    normalization="RMSNorm")
    return GPTModel(config, transformer_layer_spec=spec, vocab_size=PADDED_VOCAB, max_sequence_length=64,
                    pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                    share_embeddings_and_output_weights=False, position_embedding_type="rope",
                    rotary_base=int(hf_config().rope_parameters["rope_theta"])).eval()


def global_name(name, layer_numbers, ep_rank, local_experts):
    """A parameter's name in the TP 1 PP 1 EP 1 model: global layer and expert numbers."""
    if name.startswith("decoder.layers."):
        local, rest = name[len("decoder.layers."):].split(".", 1)
        name = f"decoder.layers.{layer_numbers[int(local)] - 1}.{rest}"
    marker = ".mlp.experts.local_experts."
    if marker in name:
        head, tail = name.split(marker)
        expert, rest = tail.split(".", 1)
        name = f"{head}{marker}{ep_rank * local_experts + int(expert)}.{rest}"
    return name


@torch.no_grad()
def perturb(model, layer_numbers, ep_rank, local_experts, adapters):
    """Random values seeded by each parameter's global name, so replicas agree and every tensor
    differs; adapters (`adapters` True) get A and a non-zero B."""
    for name, p in model.named_parameters():
        if (".adapter." in name) != adapters:
            continue
        gname = global_name(name, layer_numbers, ep_rank, local_experts)
        g = torch.Generator().manual_seed(G.hash_name(gname) + (7 if adapters else 0))
        scale = 0.1 if adapters else 0.05
        noise = torch.randn(p.shape, generator=g) * scale + (1.0 if p.dim() == 1 else 0.0)
        p.copy_(noise.to(p.dtype))


class AdapterLayout(nn.Module):
    """Megatron-Bridge ParallelLinearAdapter's parameters and checkpoint layout (module docstring)."""

    def __init__(self, config, in_features, out_features, row_parallel, is_expert, base_name):
        super().__init__()
        from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
        init = nn.init.xavier_normal_
        if row_parallel:
            self.linear_in = RowParallelLinear(in_features, R, config=config, input_is_parallel=True,
                                               skip_bias_add=True, bias=False, init_method=init, is_expert=is_expert)
        else:
            self.linear_in = ColumnParallelLinear(in_features, R, config=config, bias=False, gather_output=True,
                                                  init_method=init, is_expert=is_expert)
        self.linear_out = ColumnParallelLinear(R, out_features, config=config, bias=False,
                                               gather_output=row_parallel, init_method=init, is_expert=is_expert)
        self.is_expert, self.base_name = is_expert, base_name
        self.bfloat16()

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        from megatron.core import parallel_state as ps
        from megatron.core.transformer.mlp import apply_swiglu_sharded_factory
        sd_in = self.linear_in.sharded_state_dict(f"{prefix}linear_in.", sharded_offsets, metadata)
        sd_out = self.linear_out.sharded_state_dict(f"{prefix}linear_out.", sharded_offsets, metadata)
        if self.is_expert:
            ep_rank, edp_rank = ps.get_expert_model_parallel_rank(), ps.get_expert_data_parallel_rank()
            rank = (ep_rank + 1) * (edp_rank + 1) - 1 if ps.get_data_parallel_world_size() == 1 else ep_rank
            for sd in (sd_in, sd_out):
                for v in sd.values():
                    if hasattr(v, "replica_id"):
                        v.replica_id = (v.replica_id[0], rank, v.replica_id[2])
        if "linear_fc1" in self.base_name:
            key = f"{prefix}linear_out.weight"
            sd_out[key] = apply_swiglu_sharded_factory(sd_out[key], sharded_offsets)
        return {**sd_in, **sd_out}


class LoRAWrapped(nn.Module):
    """Megatron-Bridge's LoRALinear (AdapterWrapper) as the checkpoint sees it: `to_wrap` and
    `adapter`; state_dict without `.to_wrap.` (the forward is never run: the oracles come from
    the gathered tensors)."""

    def __init__(self, to_wrap, adapter):
        super().__init__()
        self.to_wrap, self.adapter = to_wrap, adapter

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        destination = {} if destination is None else destination
        self.to_wrap.state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        self.adapter.state_dict(destination=destination, prefix=f"{prefix}adapter.", keep_vars=keep_vars)
        return destination

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        out = dict(self.to_wrap.sharded_state_dict(prefix, sharded_offsets, metadata))
        out.update(self.adapter.sharded_state_dict(f"{prefix}adapter.", sharded_offsets, metadata))
        return out


def add_lora(model, config):
    """Wraps every TARGETS module (Bridge's default target_modules) with its adapter."""
    from megatron.core.tensor_parallel import RowParallelLinear
    targets = [(n, m) for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in TARGETS]
    for name, module in targets:
        parent = model.get_submodule(name.rsplit(".", 1)[0])
        row_parallel = isinstance(module, RowParallelLinear)
        is_expert = ".mlp.experts." in f".{name}" and ".shared_experts." not in name
        adapter = AdapterLayout(config, module.input_size, module.output_size, row_parallel, is_expert, name)
        setattr(parent, name.rsplit(".", 1)[-1], LoRAWrapped(module, adapter))
    return len(targets)


def save_adapter_checkpoint(model, ckpt_root, pp_rank, ep_rank, ep):
    """verl's save_adapter_checkpoint on this rank (TP rank 0), given the unwrapped model (verl
    unwraps Float16Module first)."""
    folder = os.path.join(ckpt_root, "adapter_checkpoint")
    os.makedirs(folder, exist_ok=True)
    name = "mp_rank_00" + (f"_{pp_rank:03d}" if PP > 1 else "") + (f"_{ep_rank:03d}" if ep > 1 else "")
    state = {n: p.data.clone() for n, p in model.named_parameters() if ".adapter." in n.lower()}
    torch.save({"adapter_state_dict": state}, os.path.join(folder, name + "_adapter.pt"))


def save_torch_dist(model, config, ckpt_root, ep):
    """Megatron-LM's save_checkpoint for ckpt_format=torch_dist (gen_megatron.save_torch_dist with
    this model's args)."""
    from megatron.core import dist_checkpointing
    iter_dir = os.path.join(ckpt_root, f"iter_{G.ITERATION:07d}")
    if dist.get_rank() == 0:
        os.makedirs(iter_dir)
    dist.barrier()
    args = argparse.Namespace(
        num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS, num_query_groups=GROUPS,
        group_query_attention=True, kv_channels=HEAD_DIM, qk_layernorm=True, num_experts=EXPERTS,
        moe_router_topk=TOPK, moe_ffn_hidden_size=MOE_FFN, tensor_model_parallel_size=1,
        pipeline_model_parallel_size=PP, expert_model_parallel_size=ep, virtual_pipeline_model_parallel_size=None,
        padded_vocab_size=PADDED_VOCAB, vocab_size=E.VOCAB, make_vocab_size_divisible_by=128,
        params_dtype=torch.bfloat16, bf16=True, swiglu=True, normalization="RMSNorm",
        untie_embeddings_and_output_weights=True, position_embedding_type="rope", transformer_impl="local",
        ckpt_format="torch_dist", iteration=G.ITERATION)
    state = {"args": args, "checkpoint_version": 3.0, "iteration": G.ITERATION, "model": model.sharded_state_dict()}
    with G.cuda_calls_on_cpu(synchronize=True):
        dist_checkpointing.save(state, iter_dir)


def local_pieces(gpt, ep_rank, local_experts):
    """This rank's parameters under their global TP 1 PP 1 EP 1 names (`.to_wrap.` dropped)."""
    numbers = [layer.layer_number for layer in gpt.decoder.layers]
    return {global_name(n.replace(".to_wrap.", "."), numbers, ep_rank, local_experts): p.detach().clone()
            for n, p in gpt.named_parameters()}


def split_qkv(qkv):
    return G.split_qkv(qkv, HEADS, GROUPS, HEAD_DIM)


def to_hf(full, vocab):
    """megatron-core names -> Qwen3-MoE HF names for the base; every tensor used once."""
    left = {k: v for k, v in full.items() if ".adapter." not in k}
    hf = {"model.embed_tokens.weight": left.pop("embedding.word_embeddings.weight")[:vocab],
          "lm_head.weight": left.pop("output_layer.weight")[:vocab],
          "model.norm.weight": left.pop("decoder.final_layernorm.weight")}
    for i in range(LAYERS):
        mc, out = f"decoder.layers.{i}.", f"model.layers.{i}."
        q, k, v = split_qkv(left.pop(mc + "self_attention.linear_qkv.weight"))
        hf.update({out + "input_layernorm.weight": left.pop(mc + "input_layernorm.weight"),
                   out + "self_attn.q_proj.weight": q, out + "self_attn.k_proj.weight": k,
                   out + "self_attn.v_proj.weight": v,
                   out + "self_attn.q_norm.weight": left.pop(mc + "self_attention.q_layernorm.weight"),
                   out + "self_attn.k_norm.weight": left.pop(mc + "self_attention.k_layernorm.weight"),
                   out + "self_attn.o_proj.weight": left.pop(mc + "self_attention.linear_proj.weight"),
                   out + "post_attention_layernorm.weight": left.pop(mc + "pre_mlp_layernorm.weight"),
                   out + "mlp.gate.weight": left.pop(mc + "mlp.router.weight")})
        for e in range(EXPERTS):
            x = f"{mc}mlp.experts.local_experts.{e}."
            gate, up = left.pop(x + "linear_fc1.weight").chunk(2, dim=0)
            hf.update({f"{out}mlp.experts.{e}.gate_proj.weight": gate, f"{out}mlp.experts.{e}.up_proj.weight": up,
                       f"{out}mlp.experts.{e}.down_proj.weight": left.pop(x + "linear_fc2.weight")})
    assert not left, f"megatron tensors without an HF name: {sorted(left)}"
    return {k: v.contiguous().clone() for k, v in hf.items()}


def adapter_to_hf(full):
    """The adapter as Megatron-Bridge's PEFT export names and splits it (module docstring):
    HF module -> (A, B)."""
    factors = {}
    for i in range(LAYERS):
        mc, out = f"decoder.layers.{i}.", f"model.layers.{i}."

        def pair(module):
            return (full[f"{mc}{module}.adapter.linear_in.weight"], full[f"{mc}{module}.adapter.linear_out.weight"])
        a, b = pair("self_attention.linear_qkv")
        for proj, part in zip(("q_proj", "k_proj", "v_proj"), split_qkv(b)):
            factors[f"{out}self_attn.{proj}"] = (a, part)
        factors[f"{out}self_attn.o_proj"] = pair("self_attention.linear_proj")
        for e in range(EXPERTS):
            a, b = pair(f"mlp.experts.local_experts.{e}.linear_fc1")
            gate, up = b.chunk(2, dim=0)
            factors[f"{out}mlp.experts.{e}.gate_proj"] = (a, gate)
            factors[f"{out}mlp.experts.{e}.up_proj"] = (a, up)
            factors[f"{out}mlp.experts.{e}.down_proj"] = pair(f"mlp.experts.local_experts.{e}.linear_fc2")
    return {k: (a.contiguous().clone(), b.contiguous().clone()) for k, (a, b) in factors.items()}


def fold(hf, factors):
    """W + (alpha/r)·B·A in float64 from the live tensors, cast once to W's dtype."""
    out = dict(hf)
    for module, (a, b) in factors.items():
        w = hf[module + ".weight"]
        out[module + ".weight"] = (w.double() + (b.double() @ a.double()) * (ALPHA / R)).to(w.dtype)
    return out


def save_hf_model(folder, cfg, weights):
    """An HF folder as save_pretrained lays it out (per-expert names, which transformers 5 fuses
    on load): config, tokenizer, model.safetensors."""
    from safetensors.torch import save_file
    E.save_hf_files(cfg, folder)
    save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})


@torch.no_grad()
def hf_logits(folder, dtype, adapter_dir=None):
    """transformers' from_pretrained of `folder` in `dtype` (every key loaded), PeftModel on it
    when `adapter_dir` is given, on the fixed input."""
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, output_loading_info=True)
    assert not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    if adapter_dir:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter_dir)
    return model.eval()(input_ids=torch.tensor(E.FIXED_INPUT)).logits.float()


@contextlib.contextmanager
def router_gemm_without_te():
    """megatron-core 0.16.1's RouterGatingLinearFunction.forward tests `te_general_gemm is not
    None`, a name moe_utils defines only when transformer-engine imports: it is set to None (the
    torch.mm path) inside the block."""
    from megatron.core.transformer.moe import moe_utils
    had = hasattr(moe_utils, "te_general_gemm")
    saved = getattr(moe_utils, "te_general_gemm", None)
    moe_utils.te_general_gemm = saved
    try:
        yield
    finally:
        if had:
            moe_utils.te_general_gemm = saved
        else:
            del moe_utils.te_general_gemm


@torch.no_grad()
def megatron_logits(full):
    """float32 logits of a TP 1 PP 1 EP 1 GPTModel holding the gathered base weights."""
    model = build_gpt(transformer_config(1, 1, torch.float32))
    base = {k: v.float() for k, v in full.items() if ".adapter." not in k}
    missing, unexpected = model.load_state_dict(base, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    assert not missing and not unexpected, (missing, unexpected)
    ids = torch.tensor(E.FIXED_INPUT)
    seq = ids.shape[1]
    mask = torch.triu(torch.ones(1, 1, seq, seq), diagonal=1).bool()
    with G.cuda_calls_on_cpu(), G.no_cuda_rng_fork(), router_gemm_without_te():
        logits = model(input_ids=ids, position_ids=torch.arange(seq).unsqueeze(0), attention_mask=mask)
    return logits[..., :E.VOCAB].float()


def write_adapter_dir(folder, factors):
    """PEFT adapter folder of the oracle factors (for PeftModel in the generator)."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    save_file(adapter_tensors(factors), os.path.join(folder, "adapter_model.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R, "lora_alpha": ALPHA,
                   "target_modules": sorted({m.rsplit(".", 1)[-1] for m in factors}), "bias": "none",
                   "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False}, f, indent=2)


def adapter_tensors(factors):
    out = {}
    for module, (a, b) in factors.items():
        out[f"base_model.model.{module}.lora_A.weight"] = a
        out[f"base_model.model.{module}.lora_B.weight"] = b
    return out


def write_case_folder(case_dir, variant, full, ep):
    from safetensors.torch import save_file
    cfg = hf_config()
    hf = to_hf(full, cfg.vocab_size)
    factors = adapter_to_hf(full)
    base_dir = os.path.join(case_dir, "base")   # the HF model the run started from (--lora_base)
    save_hf_model(base_dir, cfg, hf)
    reference = megatron_logits(full)
    diff = (hf_logits(base_dir, torch.float32) - reference).abs().max().item()
    print(f"float32: transformers vs megatron-core logits max |diff| {diff:.3g} "
          f"(scale {reference.abs().max().item():.3g})", flush=True)
    assert diff <= 1e-4 * reference.abs().max().item(), "the HF conversion does not reproduce megatron-core"
    E.save_hf_files(cfg, os.path.join(case_dir, "hf"))
    E.write_oracle(case_dir, hf)
    oracle = os.path.join(case_dir, "oracle")
    save_file(adapter_tensors(factors), os.path.join(oracle, "adapter.safetensors"))
    folded = fold(hf, factors)
    save_file({k: v.contiguous() for k, v in folded.items()}, os.path.join(oracle, "folded.safetensors"))
    scratch = os.path.join(case_dir, "scratch")
    write_adapter_dir(os.path.join(scratch, "adapter"), factors)
    save_hf_model(os.path.join(scratch, "folded"), cfg, folded)
    # PEFT's unmerged forward against the fold, in float32: in bf16 the two round differently and
    # a token whose top-2 experts are nearly tied can switch experts.
    peft32 = hf_logits(base_dir, torch.float32, os.path.join(scratch, "adapter"))
    fold32 = hf_logits(os.path.join(scratch, "folded"), torch.float32)
    diff, scale = (peft32 - fold32).abs().max().item(), fold32.abs().max().item()
    effect = (peft32 - hf_logits(base_dir, torch.float32)).abs().max().item()
    print(f"float32: PeftModel on the exported adapter vs the fold's logits max |diff| {diff:.3g} (scale "
          f"{scale:.3g}; the adapter moves them by {effect:.3g})", flush=True)
    assert diff <= 0.01 * scale and effect > 10 * diff, "PEFT does not apply the exported adapter as the fold does"
    # The bf16 logits run_case.py compares with: PeftModel on the export (bit for bit) and the fold.
    peft_logits = hf_logits(base_dir, torch.bfloat16, os.path.join(scratch, "adapter"))
    folded_logits = hf_logits(os.path.join(scratch, "folded"), torch.bfloat16)
    shutil.rmtree(scratch)
    ids = torch.tensor(E.FIXED_INPUT)
    save_file({"input_ids": ids, "logits": peft_logits.contiguous()}, os.path.join(oracle, "logits.safetensors"))
    save_file({"input_ids": ids, "logits": folded_logits.contiguous()},
              os.path.join(oracle, "folded_logits.safetensors"))
    import megatron.core
    layout = ("verl adapter_checkpoint/ (mp_rank_*_adapter.pt), base from --lora_base" if variant == "adapter_ckpt"
              else "torch_dist (dist_checkpointing.save of base + adapters), Megatron-LM iteration layout")
    common = dict(producer=f"megatron-core {megatron.core.__version__} MoE GPTModel (SequentialMLP) with Megatron-"
                  f"Bridge 0.3.1's LoRA layout, TP 1 x PP {PP} x EP {ep} on gloo, {layout}",
                  checkpoint="ckpt", merge_args=["--backend", "megatron", "--lora_alpha", str(ALPHA)],
                  hf_config="hf", output_dtype="bfloat16", hf_load=True, adapter=True, ranks=[1, 3],
                  adapter_oracle="the live adapter as Megatron-Bridge's PEFT export names and splits it",
                  fold_oracle="W + (alpha/r)·B·A in float64 from the live tensors, cast once")
    if variant == "adapter_ckpt":
        common.update(base_model="base", error_without_base="pass --lora_base")
    E.write_case(case_dir, **common)


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {sorted(VARIANTS)}"
    ep = VARIANTS[variant]
    rank, world = E.init_gloo()
    assert world == PP * ep, f"run with --nproc_per_node={PP * ep}"
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.module import Float16Module
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=PP,
                                 expert_model_parallel_size=ep)
    pp_rank, ep_rank = ps.get_pipeline_model_parallel_rank(), ps.get_expert_model_parallel_rank()
    config = transformer_config(PP, ep)
    torch.manual_seed(1234)
    gpt = build_gpt(config)
    numbers = [layer.layer_number for layer in gpt.decoder.layers]
    local_experts = EXPERTS // ep
    perturb(gpt, numbers, ep_rank, local_experts, adapters=False)
    wrapped = add_lora(gpt, config)
    perturb(gpt, numbers, ep_rank, local_experts, adapters=True)
    model = Float16Module(config, gpt)
    print(f"rank {rank}: pp {pp_rank} ep {ep_rank}: {wrapped} modules with LoRA", flush=True)

    ckpt = os.path.join(case_dir, "ckpt")
    if rank == 0:
        os.makedirs(ckpt)
    dist.barrier()
    if variant == "adapter_ckpt":
        save_adapter_checkpoint(gpt, ckpt, pp_rank, ep_rank, ep)
    else:
        save_torch_dist(model, config, ckpt, ep)
        if rank == 0:
            G.write_tracker(ckpt)

    pieces = [None] * world if rank == 0 else None
    dist.gather_object(local_pieces(gpt, ep_rank, local_experts), pieces, dst=0)
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if rank == 0:
        full = {}
        for piece in pieces:
            for name, tensor in piece.items():
                if name in full:
                    assert torch.equal(full[name], tensor), f"{name}: replicas differ"
                full[name] = tensor
        write_case_folder(case_dir, variant, full, ep)
    print(f"rank {rank}: CUDA calls replaced: {sorted(G.CUDA_CALLS_REPLACED) or 'none'}", flush=True)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
