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
  z2_lora, z3_lora            a PEFT model (LoRA r 4 on q/k/v/o/gate/up/down, Qwen2 bf16, untied) saved
                              as HF Trainer saves one: save_checkpoint(exclude_frozen_parameters=True),
                              so the ZeRO files hold only the LoRA masters; checkpoint-N/ gets
                              PeftModel.save_pretrained's adapter files and the tokenizer, no
                              config.json; the base model the run started from is base/
  z3_lora_full                the same engine saved with a plain save_checkpoint(): the frozen base
                              in frozen_param_fragments, PEFT names (base_layer) throughout
  z2_lora_value_head          z2_lora on a value model: Qwen2ForTokenClassification (one label),
                              TOKEN_CLS, LoRA on q/k/v/o, modules_to_save=["score"]; HF Trainer's
                              flag leaves the frozen score.original_module out, the trained copy in
Every other variant: tied embeddings, decoder layer 0 frozen (requires_grad False), torch.optim.AdamW
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
# LoRA variants: (ZeRO stage, exclude_frozen_parameters as HF Trainer passes it for a PEFT model)
LORA_VARIANTS = {"z2_lora": (2, True), "z3_lora": (3, True), "z3_lora_full": (3, False),
                 "z2_lora_value_head": (2, True)}
VALUE_HEAD_VARIANTS = {"z2_lora_value_head"}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
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


def train_one_step(engine, value_head=False):
    """One forward/backward/step: the LM loss, or for a value model (one label) a squared error of
    its values against 1, as a critic's value loss regresses them."""
    ids = torch.tensor(E.FIXED_INPUT)
    if value_head:
        loss = (engine(input_ids=ids).logits.float() - 1.0).pow(2).mean()
    else:
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


def start_deepspeed():
    """deepspeed on the CPU accelerator over gloo; returns this process's rank."""
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
    return dist.get_rank()


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    if variant in LORA_VARIANTS:
        return main_lora(case_dir, variant)
    stage, family, dtype, zero_extra = VARIANTS[variant]
    rank = start_deepspeed()
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



# ---- LoRA: a PEFT model trained and saved as HF Trainer does it under DeepSpeed ----

def lora_config(value_head):
    """The LoraConfig of the run: a causal LM, or a value model whose head PEFT trains whole."""
    from peft import LoraConfig
    if value_head:
        return LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[:4], task_type="TOKEN_CLS",
                          modules_to_save=["score"], lora_dropout=0.0)
    return LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, task_type="CAUSAL_LM", lora_dropout=0.0)


def build_lora_engine(stage, cfg, value_head):
    """The PEFT model (B random: PEFT starts it at zero) under a bf16 ZeRO engine, one step taken.
    The base it starts from is returned too (its tensors, for the base folder and the oracle)."""
    import deepspeed
    from peft import get_peft_model
    model = E.build_model(cfg, auto_class=auto_class(value_head))
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    peft_model = get_peft_model(model, lora_config(value_head))
    torch.manual_seed(99)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.2)
    peft_model.train()
    optimizer = torch.optim.AdamW(hf_trainer_param_groups(peft_model))
    engine, *_ = deepspeed.initialize(model=peft_model, optimizer=optimizer,
                                      config=ds_config(stage, "bfloat16", cfg.hidden_size, {}))
    train_one_step(engine, value_head)
    return engine, base


def save_peft_export(engine, stage, case_dir):
    """PeftModel.save_pretrained of the trained module (ZeRO-3: gathered; a collective), what HF
    Trainer's save_model writes for it: oracle/peft_saved/."""
    import deepspeed
    module = engine.module.eval()
    params = list(module.parameters()) if stage == 3 else []
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=stage == 3):
        if dist.get_rank() == 0:
            module.save_pretrained(os.path.join(case_dir, "oracle", "peft_saved"))


def auto_class(value_head):
    return "token_classification" if value_head else "causal_lm"


def peft_oracles(case_dir, value_head):
    """PEFT serving HF Trainer's files: PeftModel.from_pretrained of save_pretrained's adapter onto
    the base, its logits, and its merge_and_unload() with their logits. Not the live module's
    logits: DeepSpeed's bf16 engine holds the LoRA factors in bf16, PEFT's loader upcasts an
    adapter to float32 (autocast_adapter_dtype), so the LoRA path runs in another precision. The
    live module is not copied either: a ZeRO-3 module keeps DeepSpeed's hooks through deepcopy."""
    from peft import PeftModel
    from safetensors.torch import save_file
    oracle = os.path.join(case_dir, "oracle")
    base = E.auto_model_class(auto_class(value_head)).from_pretrained(os.path.join(case_dir, "base"),
                                                                      dtype=torch.bfloat16)
    model = PeftModel.from_pretrained(base, os.path.join(oracle, "peft_saved")).eval()
    with torch_linear():
        logits = E.live_logits(model)
        folded = model.merge_and_unload()
        folded_logits = E.live_logits(folded)
    save_file({k: v.detach().contiguous() for k, v in folded.state_dict().items()},
              os.path.join(oracle, "folded.safetensors"))
    save_file({"input_ids": torch.tensor(E.FIXED_INPUT), "logits": folded_logits.contiguous()},
              os.path.join(oracle, "folded_logits.safetensors"))
    return logits


def adapter_masters(ckpt_dir, peft_export):
    """DeepSpeed's own fp32 masters of the adapter (get_fp32_state_dict_from_zero_checkpoint),
    under the names PEFT saves: the factors a fold reads (fold_error.py's exact fold). Checked
    against PEFT's export: the module's bf16 copies are the masters rounded."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    state = get_fp32_state_dict_from_zero_checkpoint(ckpt_dir)
    masters = {k.replace(".default.", "."): v.contiguous().clone() for k, v in state.items() if ".lora_" in k}
    assert set(masters) == {k for k in peft_export if ".lora_" in k}, "zero_to_fp32's LoRA names differ from PEFT's"
    for name, master in masters.items():
        assert torch.equal(master.to(peft_export[name].dtype), peft_export[name]), name
    return masters


def write_hf_trainer_files(module, ckpt_dir):
    """What HF Trainer's save_model puts beside the ZeRO files for a PeftModel: the adapter
    (PeftModel.save_pretrained: adapter_model.safetensors, adapter_config.json) and the
    tokenizer; no config.json. Written by rank 0 from the gathered oracle copy."""
    import shutil
    shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(ckpt_dir)), "oracle", "peft_saved"), ckpt_dir,
                    dirs_exist_ok=True)
    E.build_tokenizer().save_pretrained(ckpt_dir)


def main_lora(case_dir, variant):
    stage, exclude_frozen = LORA_VARIANTS[variant]
    rank = start_deepspeed()
    value_head = variant in VALUE_HEAD_VARIANTS
    cfg = E.tiny_config("qwen2", tie=False, dtype="bfloat16", value_head=value_head)
    engine, base = build_lora_engine(stage, cfg, value_head)
    ckpt_dir = os.path.join(case_dir, "ckpt", "checkpoint-1")
    engine.save_checkpoint(ckpt_dir, tag=TAG, exclude_frozen_parameters=exclude_frozen)
    if rank == 0:
        os.makedirs(os.path.join(case_dir, "oracle"), exist_ok=True)
    dist.barrier()
    save_peft_export(engine, stage, case_dir)
    if rank == 0:
        from safetensors.torch import load_file, save_file
        write_base_folder(cfg, base, os.path.join(case_dir, "base"))
        write_hf_trainer_files(engine.module, ckpt_dir)
        E.write_oracle(case_dir, base, peft_oracles(case_dir, value_head))
        export = load_file(os.path.join(case_dir, "oracle", "peft_saved", "adapter_model.safetensors"))
        save_file(export, os.path.join(case_dir, "oracle", "adapter.safetensors"))
        save_file(adapter_masters(ckpt_dir, export), os.path.join(case_dir, "oracle", "fold_factors.safetensors"))
        write_lora_case_json(case_dir, variant, stage, exclude_frozen, dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()


def write_base_folder(cfg, base, folder):
    """The Hugging Face model the run started from (what --lora_base names)."""
    from safetensors.torch import save_file
    E.save_hf_files(cfg, folder)
    save_file({k: v.contiguous() for k, v in base.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})


def write_lora_case_json(case_dir, variant, stage, exclude_frozen, world):
    import deepspeed
    E.write_case(case_dir, producer=f"deepspeed {deepspeed.__version__} ZeRO-{stage} ({variant}, {world} ranks, "
                 f"gloo), PEFT LoRA, save_checkpoint(exclude_frozen_parameters={exclude_frozen}), HF Trainer layout",
                 checkpoint="ckpt/checkpoint-1", merge_args=["--backend", "deepspeed"],
                 output_dtype="bfloat16", hf_load=True, logits_exact=True, adapter=True,
                 # HF Trainer's exclusion leaves the base out of the ZeRO files: --lora_base gives it.
                 base_model="base" if exclude_frozen else None,
                 hf_config=None if exclude_frozen else "base",
                 error_without_base="pass --lora_base" if exclude_frozen else None,
                 hf_auto_class=auto_class(variant in VALUE_HEAD_VARIANTS))


if __name__ == "__main__":
    main()
