"""DeepSpeed ZeRO checkpoints written by the real DeepSpeedEngine.save_checkpoint (CPU accelerator,
gloo), in HF Trainer's checkpoint-N layout.

    torchrun --standalone --nproc_per_node=2 gen_deepspeed.py CASE_DIR VARIANT

VARIANT (2 ranks each):
  z1_bf16, z2_bf16, z3_bf16   ZeRO-1/2/3, Qwen2, "bf16": {"enabled": true}
  z1_fp32, z2_fp32, z3_fp32   ZeRO-1/2/3, Llama, no mixed precision (fp32 module and masters)
  z2_bf16_palign              ZeRO-2 bf16 with zero_optimization.parameter_alignment (new in
                              DeepSpeed 0.19): padding BETWEEN parameters of a flat group,
                              recorded in the optim files' param_alignment_paddings; hidden 68 so
                              sizes are not multiples of the 16-byte alignment
  z1_fp32_palign              the same at ZeRO-1, Qwen2 in fp32, with round_robin_gradients
Every variant: tied embeddings, decoder layer 0 frozen (requires_grad False), torch.optim.AdamW
with HF Trainer's two groups (decay / no decay), one forward/backward/step so the fp32 masters
differ from the initial weights.

Files: ckpt/checkpoint-1/{latest, zero_to_fp32.py, zero_to_torch.py, global_step1/...} from the
engine, config.json,
generation config and tokenizer beside them as HF Trainer's save_model writes them.
Oracles: weights.safetensors = the live engine module's full tensors after the step (ZeRO-3:
gathered with deepspeed.zero.GatheredParameters); zero_to_fp32.safetensors = DeepSpeed's own
get_fp32_state_dict_from_zero_checkpoint on the saved folder (fp32 masters; at stage 1 it omits
the frozen parameters); logits of the live engine module, run with torch's own F.linear.
"""
import contextlib
import os
import sys

# DeepSpeed picks its accelerator at import time; LOCAL_SIZE is its CPU "device count".
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402

VARIANTS = {
    # name: (ZeRO stage, family, dtype, extra zero_optimization settings)
    "z1_bf16": (1, "qwen2", "bfloat16", {}),
    "z2_bf16": (2, "qwen2", "bfloat16", {}),
    "z3_bf16": (3, "qwen2", "bfloat16", {}),
    "z1_fp32": (1, "llama", "float32", {}),
    "z2_fp32": (2, "llama", "float32", {}),
    "z3_fp32": (3, "llama", "float32", {}),
    "z2_bf16_palign": (2, "qwen2", "bfloat16", {"parameter_alignment": True}),
    "z1_fp32_palign": (1, "qwen2", "float32", {"parameter_alignment": True, "round_robin_gradients": True}),
}
TAG = "global_step1"
FROZEN_PREFIX = "model.layers.0."


def ds_config(stage, dtype, hidden_size, zero_extra):
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000000,
        # HF Trainer's "auto" persistence threshold: norms and biases stay gathered in the ZeRO-3
        # module, the matrices become 0-element placeholders, as in a real run.
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 10 * hidden_size,
                              **zero_extra},
    }
    if dtype == "bfloat16":
        config["bf16"] = {"enabled": True}
    return config


def hf_trainer_param_groups(model, lr=1e-2):
    """HF Trainer's AdamW groups: weight decay except biases and norms; frozen params in none.
    A large lr so the bf16 copies of the stepped masters differ from the initial weights."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    no_decay = [p for n, p in trainable if n.endswith(".bias") or "norm" in n]
    decay = [p for n, p in trainable if not (n.endswith(".bias") or "norm" in n)]
    return [{"params": decay, "weight_decay": 0.1, "lr": lr},
            {"params": no_decay, "weight_decay": 0.0, "lr": lr}]


def model_config(family, dtype, zero_extra):
    cfg = E.tiny_config(family, tie=True, dtype=dtype)
    if zero_extra.get("parameter_alignment"):
        # Norms (68), biases (68, 34) and the embedding (257 x 68) are no multiple of the
        # 16-byte alignment, so the flat groups get padding between parameters.
        cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 68, 2, 1, 34
    return cfg


def fresh_model(family, dtype, zero_extra):
    """The HF model in `dtype`. Built in fp32 from its own config (transformers 5's from_config
    sets the config it is given to float32), then only the parameters are cast, as DeepSpeed's
    bf16 engine and transformers' loader do: the rotary inv_freq buffer stays fp32 (a
    module-wide .to(bf16) would round it and change the logits)."""
    model = E.build_model(model_config(family, "float32", zero_extra))
    for p in model.parameters():
        p.data = p.data.to(E.torch_dtype(dtype))
    assert all(b.dtype == torch.float32 for b in model.buffers())
    return model


def build_engine(stage, family, dtype, zero_extra):
    import deepspeed
    cfg = model_config(family, dtype, zero_extra)   # what config.json says
    model = fresh_model(family, dtype, zero_extra).train()
    for name, p in model.named_parameters():
        if name.startswith(FROZEN_PREFIX):
            p.requires_grad_(False)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(hf_trainer_param_groups(model))
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer,
                                      config=ds_config(stage, dtype, cfg.hidden_size, zero_extra))
    return engine, cfg, initial


def train_one_step(engine):
    ids = torch.tensor(E.FIXED_INPUT)
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()


@contextlib.contextmanager
def torch_linear():
    """torch's own F.linear for the oracle logits. Converting the model to ZeRO-3 replaces
    torch.nn.functional.linear process-wide with DeepSpeed's zero3_linear_wrap ("memory efficient
    linear", partition_parameters.py), whose bf16 results differ from torch's by an ulp; the
    consumers run torch's."""
    from deepspeed.runtime.zero.partition_parameters import InsertPostInitMethodToModuleSubClasses as patcher
    patched = torch.nn.functional.linear
    torch.nn.functional.linear = getattr(patcher, "linear_bk", patched)
    try:
        yield
    finally:
        torch.nn.functional.linear = patched


def live_full_tensors(engine, stage):
    """The engine module's full state dict (ZeRO-3 gathers every partitioned parameter; a
    collective). A tied lm_head.weight is dropped, as save_pretrained drops it."""
    import deepspeed
    module = engine.module
    params = list(module.parameters()) if stage == 3 else []
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=stage == 3):
        full = {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
    full.pop("lm_head.weight", None)
    return full


def zero_to_fp32_tensors(ckpt_dir, live, exclude_frozen=False):
    """DeepSpeed's own consolidation of the saved folder, aliases dropped (they share memory,
    which safetensors refuses; the tied lm_head is no output tensor anyway); with
    `exclude_frozen`, its --exclude_frozen_parameters."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    state = get_fp32_state_dict_from_zero_checkpoint(ckpt_dir, exclude_frozen_parameters=exclude_frozen)
    state.pop("lm_head.weight", None)
    tensors = {k: v.detach().contiguous().clone() for k, v in state.items()}
    for name, master in tensors.items():   # the producer agrees with itself: live = cast masters
        want = live[name]
        assert torch.equal(master.to(want.dtype), want), f"zero_to_fp32 {name} != live module"
    return tensors


def check_step_was_real(initial, live):
    """The step changed the trainable tensors and left the frozen ones (else the case tests little)."""
    frozen = [k for k in live if k.startswith(FROZEN_PREFIX)]
    assert frozen, f"no parameter under {FROZEN_PREFIX}"
    assert all(torch.equal(live[k], initial[k]) for k in frozen), "a frozen parameter changed"
    changed = [k for k in live if k not in frozen and not torch.equal(live[k], initial[k])]
    assert len(changed) == len(live) - len(frozen), f"unchanged by the step: {set(live) - set(frozen) - set(changed)}"


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    stage, family, dtype, zero_extra = VARIANTS[variant]
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    if get_accelerator().device_name() != "cpu":
        raise SystemExit(f"DeepSpeed picked accelerator {get_accelerator().device_name()}, need cpu")
    torch.set_num_threads(1)
    # DeepSpeed's CPU backend compiles a shared-memory all-reduce op on first use (minutes on
    # this machine): a speed-up of its collectives that the saved files do not depend on.
    # (sys.modules: the package's attribute `torch` is torch itself, re-exported by its comm.py.)
    import deepspeed.comm.torch  # noqa: F401
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    engine, cfg, initial = build_engine(stage, family, dtype, zero_extra)
    train_one_step(engine)
    # Saved before anything gathers: GatheredParameters' exit would release ZeRO-3's persistent
    # parameters, which a real run keeps in full in the saved module.
    ckpt_dir = os.path.join(case_dir, "ckpt", "checkpoint-1")
    engine.save_checkpoint(ckpt_dir, tag=TAG)   # collective: every rank writes its files
    engine.module.eval()
    live = live_full_tensors(engine, stage)
    with torch_linear():
        logits = E.live_logits(engine.module)   # ZeRO-3: every rank runs the gathering forward
    check_step_was_real(initial, live)
    dist.barrier()
    if rank == 0:
        E.save_hf_files(cfg, ckpt_dir)
        write_oracles(case_dir, ckpt_dir, live, logits)
        write_case_json(case_dir, variant, stage, dtype, dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()


def write_oracles(case_dir, ckpt_dir, live, logits):
    from safetensors.torch import save_file
    E.write_oracle(case_dir, live, logits)
    masters = zero_to_fp32_tensors(ckpt_dir, live)
    save_file(masters, os.path.join(case_dir, "oracle", "zero_to_fp32.safetensors"))
    unfrozen = zero_to_fp32_tensors(ckpt_dir, live, exclude_frozen=True)
    assert not any(k.startswith(FROZEN_PREFIX) for k in unfrozen), "zero_to_fp32 kept a frozen parameter"
    save_file(unfrozen, os.path.join(case_dir, "oracle", "zero_to_fp32_exclude_frozen.safetensors"))


def write_case_json(case_dir, variant, stage, dtype, world):
    import deepspeed
    E.write_case(case_dir, producer=f"deepspeed {deepspeed.__version__} ZeRO-{stage} ({variant}, "
                 f"{world} ranks, gloo), HF Trainer checkpoint-N layout",
                 checkpoint="ckpt/checkpoint-1", merge_args=["--backend", "deepspeed"],
                 output_dtype=dtype, hf_load=True, logits_exact=True, adapter=False,
                 # zero_to_fp32 omits ZeRO-1's frozen parameters (it saves no fragments for them).
                 extra_oracles=[{"file": "zero_to_fp32.safetensors", "what": "zero_to_fp32",
                                 "partial": stage == 1}],
                 # merge --exclude_frozen_parameters equals zero_to_fp32's, name for name.
                 exclude_frozen_oracle="zero_to_fp32_exclude_frozen.safetensors")


if __name__ == "__main__":
    main()
