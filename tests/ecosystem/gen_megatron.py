"""Megatron-core GPTModel checkpoints written by the real megatron-core 0.16 (local, non-TE spec).

    torchrun --standalone --nproc_per_node=4 gen_megatron.py CASE_DIR VARIANT

VARIANT (4 gloo ranks, TP 2 x PP 2, 4 layers, Llama-like: RMSNorm, SwiGLU, GQA 4 heads / 2
groups, no bias, untied output layer, bf16 through Float16Module as Megatron-LM's get_model wraps
it, vocabulary padded from 257 to 512 rows as Megatron-LM pads it):
  tp2pp2_dist    megatron.core.dist_checkpointing.save of {"model": sharded_state_dict(), args...}
                 into ckpt/iter_0000001/ (torch_dist, Megatron-LM's layout: metadata.json, common.pt,
                 .metadata, __R_K.distcp) plus latest_checkpointed_iteration.txt
  tp2pp2_legacy  Megatron-LM's legacy per-rank files: ckpt/iter_0000001/mp_rank_TT_PPP/
                 model_optim_rng.pt = {"args", "checkpoint_version", "iteration", "model"}

The oracle is gathered from the live sharded model (every rank's parameters, TP chunks joined
along the partition dim megatron-core records on each parameter, SwiGLU fc1 halves regrouped,
pipeline layers placed by each layer's own layer_number) and renamed to HF Llama by this file's
rules. Cross-check: a TP 1 PP 1 megatron-core GPTModel holding the gathered weights gives the
logits, and transformers' LlamaForCausalLM on the HF weights must agree with them (float32:
to rounding; bf16: within 2 % of the logit scale). The bf16 megatron-core logits are the oracle's.
CUDA calls on the CPU paths are replaced only where megatron-core makes them (cuda_calls_on_cpu,
no_cuda_rng_fork); each rank prints which it hit.

No MoE variant: with TP 2 x EP 2 megatron-core requires sequence parallelism, which the local
spec's WrappedTorchNorm refuses; the alltoall dispatcher builds a torch.cuda.Stream in __init__.
TP 1 x PP 2 x EP 2 with the allgather dispatcher does build and torch_dist-save on CPU with the
same two patches: gen_megatron_lora.py builds one (with Megatron-Bridge's LoRA layout).
"""
import argparse
import contextlib
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402

TP, PP, LAYERS = 2, 2, 4
ITERATION = 1
# Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by (128) x TP.
PADDED_VOCAB = -(-E.VOCAB // (128 * TP)) * (128 * TP)
VARIANTS = ("tp2pp2_dist", "tp2pp2_legacy")


def transformer_config(tp, pp, dtype=torch.bfloat16):
    """The TransformerConfig equivalent of eco_common.tiny_config("llama", layers=LAYERS)."""
    from megatron.core.transformer.transformer_config import TransformerConfig
    hf = E.tiny_config("llama", layers=LAYERS)
    return TransformerConfig(
        num_layers=LAYERS, hidden_size=hf.hidden_size, ffn_hidden_size=hf.intermediate_size,
        num_attention_heads=hf.num_attention_heads, num_query_groups=hf.num_key_value_heads,
        kv_channels=hf.head_dim, gated_linear_unit=True, activation_func=F.silu,
        normalization="RMSNorm", layernorm_epsilon=hf.rms_norm_eps, add_bias_linear=False,
        add_qkv_bias=False, hidden_dropout=0.0, attention_dropout=0.0,
        use_cpu_initialization=True, params_dtype=dtype, bf16=dtype == torch.bfloat16,
        pipeline_dtype=dtype, tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp)


def build_gpt(config):
    """GPTModel on the local spec for this rank's pipeline stage."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    return GPTModel(config, transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                    vocab_size=PADDED_VOCAB, max_sequence_length=64,
                    pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                    share_embeddings_and_output_weights=False, position_embedding_type="rope",
                    rotary_base=int(E.tiny_config("llama").rope_parameters["rope_theta"])).eval()


@torch.no_grad()
def perturb(model, tp_rank, pp_rank):
    """Random values instead of the init's ones (norms) so every tensor is distinct; replicated
    tensors (norms) are seeded by name and stage only, so TP ranks keep identical copies."""
    for name, p in model.named_parameters():
        sharded = getattr(p, "tensor_model_parallel", False)
        seed = hash_name(name) + 1000 * pp_rank + (100 * tp_rank if sharded else 0)
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(p.shape, generator=g) * 0.05 + (1.0 if p.dim() == 1 else 0.0)
        p.copy_(noise.to(p.dtype))


def hash_name(name):
    """A stable seed from a parameter name (Python's hash() is salted per process)."""
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 100000


def megatron_args(config, ckpt_format):
    """The argparse.Namespace Megatron-LM pickles as "args" (the fields its loader and converters
    read: sizes, parallelism, vocabulary padding, dtype, architecture switches)."""
    return argparse.Namespace(
        num_layers=config.num_layers, hidden_size=config.hidden_size,
        ffn_hidden_size=config.ffn_hidden_size, num_attention_heads=config.num_attention_heads,
        group_query_attention=True, num_query_groups=config.num_query_groups,
        kv_channels=config.kv_channels, tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=PP, virtual_pipeline_model_parallel_size=None,
        expert_model_parallel_size=1, context_parallel_size=1, data_parallel_size=1,
        world_size=TP * PP, padded_vocab_size=PADDED_VOCAB, vocab_size=E.VOCAB,
        make_vocab_size_divisible_by=128, params_dtype=torch.bfloat16, bf16=True, fp16=False,
        swiglu=True, normalization="RMSNorm", norm_epsilon=config.layernorm_epsilon,
        add_qkv_bias=False, add_bias_linear=False, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", rotary_base=10000, max_position_embeddings=64,
        transformer_impl="local", use_distributed_optimizer=False, ckpt_format=ckpt_format,
        iteration=ITERATION, seed=1234, tokenizer_type="HuggingFaceTokenizer")


# Where each replaced CUDA call was made from (file:line), printed by rank 0 for the record.
CUDA_CALLS_REPLACED = set()


def _called_from(what):
    frame = traceback.extract_stack(limit=3)[0]
    CUDA_CALLS_REPLACED.add(f"{what} <- {os.path.basename(frame.filename)}:{frame.lineno} {frame.name}")


@contextlib.contextmanager
def cuda_calls_on_cpu(synchronize=False):
    """megatron-core 0.16 calls CUDA on paths this CPU-only host takes; only these calls are
    replaced, and only inside the block:
      torch.cuda.current_device -> "cpu": RotaryEmbedding.get_emb moves inv_freq to it and
        GlobalMemoryBuffer.get_tensor allocates the attention score buffer on it (reference
        forward); save_state_dict_async_finalize builds a torch.tensor on it (torch_dist save)
      torch.cuda.synchronize -> no-op (synchronize=True): FileSystemWriterAsync.preload_tensors
        (torch_dist save)"""
    saved = torch.cuda.synchronize, torch.cuda.current_device

    def current_device():
        _called_from("torch.cuda.current_device")
        return "cpu"

    if synchronize:
        torch.cuda.synchronize = lambda *a, **k: _called_from("torch.cuda.synchronize")
    torch.cuda.current_device = current_device
    try:
        yield
    finally:
        torch.cuda.synchronize, torch.cuda.current_device = saved


@contextlib.contextmanager
def no_cuda_rng_fork():
    """DotProductAttention forks the CUDA RNG tracker around its dropout (a no-op in eval mode);
    the tracker's fork reads and sets CUDA RNG states, so it becomes a plain block here."""
    from megatron.core import tensor_parallel
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.fork = lambda *a, **k: contextlib.nullcontext()
    try:
        yield
    finally:
        del tracker.fork


def save_torch_dist(model, config, ckpt_root):
    """What Megatron-LM's save_checkpoint does for ckpt_format=torch_dist (sharded model state
    plus the common args/iteration entries that land in common.pt)."""
    from megatron.core import dist_checkpointing
    iter_dir = os.path.join(ckpt_root, f"iter_{ITERATION:07d}")
    if dist.get_rank() == 0:
        os.makedirs(iter_dir)
    dist.barrier()
    state = {"args": megatron_args(config, "torch_dist"), "checkpoint_version": 3.0,
             "iteration": ITERATION, "model": model.sharded_state_dict()}
    with cuda_calls_on_cpu(synchronize=True):
        dist_checkpointing.save(state, iter_dir)


def save_legacy(model, config, ckpt_root, tp_rank, pp_rank):
    """Megatron-LM's ckpt_format=torch file of one (tp, pp) rank."""
    rank_dir = os.path.join(ckpt_root, f"iter_{ITERATION:07d}", f"mp_rank_{tp_rank:02d}_{pp_rank:03d}")
    os.makedirs(rank_dir)
    state = {"args": megatron_args(config, "torch"), "checkpoint_version": 3.0,
             "iteration": ITERATION, "model": model.state_dict_for_save_checkpoint()}
    torch.save(state, os.path.join(rank_dir, "model_optim_rng.pt"))


def write_tracker(ckpt_root):
    with open(os.path.join(ckpt_root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERATION))


def local_pieces(model, tp_rank, pp_rank):
    """This rank's parameters with how megatron-core split them: (tensor, partition_dim or None)
    per name, and the global layer number (1-based) of each local layer."""
    params = {}
    for name, p in model.named_parameters():
        dim = p.partition_dim if getattr(p, "tensor_model_parallel", False) else None
        params[name] = (p.detach().clone(), dim)
    layer_numbers = [layer.layer_number for layer in model.decoder.layers]
    return {"tp": tp_rank, "pp": pp_rank, "params": params, "layer_numbers": layer_numbers}


def join_tp(name, chunks, dim):
    """The full tensor of one parameter from its TP chunks in rank order."""
    if dim is None:
        for c in chunks[1:]:
            assert torch.equal(c, chunks[0]), f"{name}: replicated copies differ across TP"
        return chunks[0]
    if name.endswith("mlp.linear_fc1.weight"):
        # Each rank's fc1 is [gate_r; up_r] (the first half goes through the activation).
        halves = [c.chunk(2, dim=0) for c in chunks]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(chunks, dim=dim)


def gather_full_state(pieces):
    """Megatron-core key space of a TP 1 PP 1 model: TP joined, local layer indices replaced by
    the global ones the live layers carry."""
    full = {}
    for pp in range(PP):
        stage = sorted((p for p in pieces if p["pp"] == pp), key=lambda p: p["tp"])
        numbers = stage[0]["layer_numbers"]
        for name, (_, dim) in stage[0]["params"].items():
            tensor = join_tp(name, [s["params"][name][0] for s in stage], dim)
            if name.startswith("decoder.layers."):
                local, rest = name[len("decoder.layers."):].split(".", 1)
                name = f"decoder.layers.{numbers[int(local)] - 1}.{rest}"
            full[name] = tensor
    return full


def split_qkv(qkv, heads, groups, head_dim):
    """linear_qkv rows are grouped per query group: [q heads of the group; k; v] (megatron-core
    SelfAttention.get_query_key_value_tensors); HF keeps q, k and v apart."""
    per_group = heads // groups
    grouped = qkv.view(groups, per_group + 2, head_dim, qkv.shape[-1])
    q = grouped[:, :per_group].reshape(heads * head_dim, -1)
    k = grouped[:, per_group].reshape(groups * head_dim, -1)
    v = grouped[:, per_group + 1].reshape(groups * head_dim, -1)
    return q.contiguous(), k.contiguous(), v.contiguous()


def to_hf_llama(full, hf_cfg):
    """Megatron-core (local spec) names and layouts -> HF Llama; padded vocabulary rows dropped.
    Every megatron tensor must be used exactly once."""
    left = dict(full)
    vocab = hf_cfg.vocab_size
    hf = {"model.embed_tokens.weight": left.pop("embedding.word_embeddings.weight")[:vocab],
          "lm_head.weight": left.pop("output_layer.weight")[:vocab],
          "model.norm.weight": left.pop("decoder.final_layernorm.weight")}
    for i in range(hf_cfg.num_hidden_layers):
        mc, out = f"decoder.layers.{i}.", f"model.layers.{i}."
        q, k, v = split_qkv(left.pop(mc + "self_attention.linear_qkv.weight"),
                            hf_cfg.num_attention_heads, hf_cfg.num_key_value_heads, hf_cfg.head_dim)
        gate, up = left.pop(mc + "mlp.linear_fc1.weight").chunk(2, dim=0)
        hf.update({
            out + "input_layernorm.weight": left.pop(mc + "input_layernorm.weight"),
            out + "self_attn.q_proj.weight": q, out + "self_attn.k_proj.weight": k,
            out + "self_attn.v_proj.weight": v,
            out + "self_attn.o_proj.weight": left.pop(mc + "self_attention.linear_proj.weight"),
            out + "post_attention_layernorm.weight": left.pop(mc + "pre_mlp_layernorm.weight"),
            out + "mlp.gate_proj.weight": gate.contiguous(), out + "mlp.up_proj.weight": up.contiguous(),
            out + "mlp.down_proj.weight": left.pop(mc + "mlp.linear_fc2.weight")})
    assert not left, f"megatron tensors without an HF name: {sorted(left)}"
    return {k: v.contiguous().clone() for k, v in hf.items()}


@torch.no_grad()
def megatron_reference_logits(full, dtype):
    """Logits of a TP 1 PP 1 GPTModel in `dtype` holding the gathered weights (a pipeline forward
    over gloo is awkward); rank 0 only, after the model-parallel state was rebuilt as 1 x 1."""
    model = build_gpt(transformer_config(1, 1, dtype)).to(dtype)   # as Float16Module casts
    missing, unexpected = model.load_state_dict(full, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    assert not missing and not unexpected, (missing, unexpected)
    ids = torch.tensor(E.FIXED_INPUT)
    seq = ids.shape[1]
    positions = torch.arange(seq).unsqueeze(0)
    # True = masked; passed explicitly because the default causal mask is built on "cuda".
    causal_mask = torch.triu(torch.ones(1, 1, seq, seq), diagonal=1).bool()
    with cuda_calls_on_cpu(), no_cuda_rng_fork():
        logits = model(input_ids=ids, position_ids=positions, attention_mask=causal_mask)
    return logits[..., :E.VOCAB].float()


@torch.no_grad()
def transformers_logits(hf_weights, hf_cfg, dtype):
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM(hf_cfg).to(dtype).eval()
    missing, unexpected = model.load_state_dict(hf_weights, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return model(input_ids=torch.tensor(E.FIXED_INPUT)).logits.float()


def check_with_transformers(full, hf_weights, hf_cfg):
    """LlamaForCausalLM on the HF weights must compute megatron-core's function: in float32 the
    two agree to rounding (a misplaced norm or head would not); in bf16 their kernels round
    differently. Returns megatron-core's bf16 logits, the ones the live model computes."""
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 0.02)):
        reference = megatron_reference_logits(full, dtype)
        diff = (transformers_logits(hf_weights, hf_cfg, dtype) - reference).abs().max().item()
        scale = reference.abs().max().item()
        print(f"{dtype}: transformers vs megatron-core logits max |diff| {diff:.3g} "
              f"(scale {scale:.3g})", flush=True)
        assert diff <= tolerance * scale, "the HF conversion does not reproduce megatron-core's forward"
    return reference


def write_case_folder(case_dir, variant, pieces):
    """Rank 0: oracle weights (from the live ranks' pieces), logits, HF config and case.json."""
    hf_cfg = E.tiny_config("llama", layers=LAYERS)
    full = gather_full_state(pieces)
    hf_weights = to_hf_llama(full, hf_cfg)
    logits = check_with_transformers(full, hf_weights, hf_cfg)
    hf_dir = os.path.join(case_dir, "hf")
    E.save_hf_files(hf_cfg, hf_dir)
    E.write_oracle(case_dir, hf_weights, logits)
    import megatron.core
    fmt = "torch_dist (dist_checkpointing.save)" if variant.endswith("dist") else "legacy model_optim_rng.pt"
    E.write_case(case_dir, producer=f"megatron-core {megatron.core.__version__} GPTModel, local spec, "
                 f"TP {TP} x PP {PP} on gloo, {fmt}, Megatron-LM iteration layout",
                 checkpoint="ckpt", merge_args=["--backend", "megatron"], hf_config="hf",
                 output_dtype="bfloat16", hf_load=True,
                 # The logits are megatron-core's own forward: transformers' bf16 kernels differ.
                 logits_exact=False)


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    assert variant in VARIANTS, f"variant {variant!r} not in {VARIANTS}"
    rank, world = E.init_gloo()
    assert world == TP * PP, f"run with --nproc_per_node={TP * PP}"
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.module import Float16Module
    ps.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP)
    tp_rank, pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    config = transformer_config(TP, PP)
    torch.manual_seed(1234)
    gpt = build_gpt(config)
    perturb(gpt, tp_rank, pp_rank)
    # Megatron-LM's get_model wraps every bf16 model so: all parameters, norms included, become
    # bf16 (a bare GPTModel keeps its torch.nn.RMSNorm weights in float32).
    model = Float16Module(config, gpt)

    ckpt = os.path.join(case_dir, "ckpt")
    if rank == 0:
        os.makedirs(ckpt)   # fails on a stale case folder rather than mixing two runs
    dist.barrier()
    if variant == "tp2pp2_dist":
        save_torch_dist(model, config, ckpt)
    else:
        save_legacy(model, config, ckpt, tp_rank, pp_rank)
    if rank == 0:
        write_tracker(ckpt)

    pieces = [None] * world if rank == 0 else None
    dist.gather_object(local_pieces(gpt, tp_rank, pp_rank), pieces, dst=0)
    # The reference forward runs on a TP 1 PP 1 model: rebuild the parallel state (collective).
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    if rank == 0:
        write_case_folder(case_dir, variant, pieces)
    print(f"rank {rank}: CUDA calls replaced: {sorted(CUDA_CALLS_REPLACED) or 'none'}", flush=True)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
