"""verl FSDP2 checkpoints written by torch 2.13's real fully_shard, DTensor and torch.save.

    torchrun --standalone --nproc_per_node=N gen_fsdp2.py CASE_DIR VARIANT

VARIANT (N ranks):
  w2_bf16        1-D mesh ("fsdp",) of N, Qwen2 in bf16
  w2_bf16_128    the same with every Linear a multiple of 128 in both dims (block FP8 on the CPU)
  (both also checked quantized: int4/int8, FP8_DYNAMIC, block FP8, and as HDF5 archives)
  w3_fp32_tied   1-D mesh of N, Llama with tied embeddings, fp32 parameters (what verl's actor
                 keeps) under a bf16 config: the merge casts
  hsdp           2x2 mesh ("ddp", "fsdp"), Qwen2 bf16
  tp2d           2x2 mesh ("dp", "tp"), Llama bf16, Colwise/RowwiseParallel then fully_shard on
                 "dp": _StridedShard placements
  lora           PEFT LoRA (q/k/v/o/gate/up/down, r 4) on Qwen2 bf16 under FSDP2, full state dict
  lora_only      the same with verl's save_lora_only (only lora_ keys) and the base as an HF folder
  lora_only_fp8_base  lora_only on a block-FP8 base (every Linear a multiple of 128): the base
                 folder written by transformers' own Fp8Quantize (gen_quantized_sources.py), the
                 live model what transformers' from_pretrained dequantizes from it on the CPU
  lora_only_nvfp4_base  the same on an NVFP4A16 base compressed by compressed-tensors' own CPU
                 quantizer (fp4_oracle.expected_tensors), the live model what transformers'
                 from_pretrained with CompressedTensorsConfig(dequantize=True) builds from it
  lora_value_head  a value model: Qwen2ForTokenClassification (num_labels 1) with LoRA on q/k/v/o
                 and modules_to_save=["score"] (PEFT's ModulesToSaveWrapper: score.original_module
                 and score.modules_to_save.default, the trained copy changed so the two differ)

Files as verl's FSDPCheckpointManager writes them: model_/optim_/extra_state_world_size_W_rank_R.pt,
fsdp_config.json, huggingface/ (config, generation config, tokenizer), lora_train_meta.json.
"""
import copy
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_common as E  # noqa: E402

VARIANTS = {
    # name: (family, tie, param dtype, config dtype, mesh shape, mesh names)
    "w2_bf16": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "w2_bf16_128": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "w3_fp32_tied": ("llama", True, "float32", "bfloat16", None, ("fsdp",)),
    "hsdp": ("qwen2", False, "bfloat16", "bfloat16", (2, 2), ("ddp", "fsdp")),
    "tp2d": ("llama", False, "bfloat16", "bfloat16", (2, 2), ("dp", "tp")),
    "lora": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "lora_only": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "lora_only_fp8_base": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "lora_only_nvfp4_base": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
    "lora_value_head": ("qwen2", False, "bfloat16", "bfloat16", None, ("fsdp",)),
}
# The value model's head: one label, the Auto class transformers loads it with.
VALUE_HEAD_VARIANTS = {"lora_value_head"}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_mesh(world, shape, names):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", shape or (world,), mesh_dim_names=names)


def apply_tensor_parallel(model, tp_mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    plan = {}
    for i in range(len(model.model.layers)):
        for proj in ("q_proj", "k_proj", "v_proj"):
            plan[f"model.layers.{i}.self_attn.{proj}"] = ColwiseParallel()
        plan[f"model.layers.{i}.self_attn.o_proj"] = RowwiseParallel()
        for proj in ("gate_proj", "up_proj"):
            plan[f"model.layers.{i}.mlp.{proj}"] = ColwiseParallel()
        plan[f"model.layers.{i}.mlp.down_proj"] = RowwiseParallel()
    parallelize_module(model, tp_mesh, plan)


def shard(model, layers, mesh):
    """fully_shard every decoder layer, then the root, as verl's FSDP2 wrapping does."""
    from torch.distributed.fsdp import fully_shard
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def add_lora(model, value_head=False):
    """PEFT LoRA with random B (PEFT starts B at zero, which would make the adapter a no-op). The
    value head variant: TOKEN_CLS with modules_to_save=["score"]; the trained copy of the head is
    moved off the original (PEFT starts it as a copy), so a merge that writes the wrong one fails."""
    from peft import LoraConfig, get_peft_model
    if value_head:
        cfg = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS[:4], task_type="TOKEN_CLS",
                         modules_to_save=["score"], lora_dropout=0.0)
    else:
        cfg = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, task_type="CAUSAL_LM",
                         lora_dropout=0.0)
    peft_model = get_peft_model(model, cfg)
    torch.manual_seed(99)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.2)
            if ".modules_to_save." in name:
                p.add_(torch.randn_like(p) * 0.05)
    return peft_model.eval()


def lora_oracle(case_dir, peft_model, folded_tensors=None):
    """The adapter as PEFT exports it, and the fold PEFT's merge_and_unload makes, with the
    logits of both (from the live PEFT model and from the merged module). `folded_tensors`: the
    merged module's tensors as the output must name them (default its state_dict(); a model whose
    save_pretrained renames, gen_families.save_pretrained_tensors)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file
    folder = os.path.join(case_dir, "oracle")
    os.makedirs(folder, exist_ok=True)
    adapter = {k: v.detach().contiguous().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
    save_file(adapter, os.path.join(folder, "adapter.safetensors"))
    # What a user's PeftModel.save_pretrained writes (adapter_model.safetensors, adapter_config.json):
    # the adapter check compares vmerge's files with these, names, bits and config fields.
    peft_model.save_pretrained(os.path.join(folder, "peft_saved"))
    folded = copy.deepcopy(peft_model).merge_and_unload()
    tensors = folded_tensors(folded) if folded_tensors else folded.state_dict()
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, os.path.join(folder, "folded.safetensors"))
    save_file({"input_ids": torch.tensor(E.FIXED_INPUT), "logits": E.live_logits(folded).contiguous()},
              os.path.join(folder, "folded_logits.safetensors"))


def base_names(tensors):
    """PEFT state-dict names of the base weights -> HF names; adapter tensors dropped. A
    modules_to_save module: the base model is its original_module (what PEFT's
    get_base_model() holds), the trained modules_to_save copy belongs to the adapter."""
    out = {}
    for name, t in tensors.items():
        if "lora_" in name or ".modules_to_save." in name:
            continue
        hf = name.replace("base_model.model.", "", 1).replace(".base_layer.", ".")
        out[hf.replace(".original_module.", ".")] = t
    return out


def save_fp8_base(model, cfg, folder):
    """The base as a block-FP8 HF folder, made by transformers' own FP8 quantizer."""
    from safetensors.torch import save_file
    from transformers import FineGrainedFP8Config
    import gen_quantized_sources as Q
    quant_config = FineGrainedFP8Config(weight_block_size=Q.BLOCK)
    state = Q.fp8_state_dict(model, quant_config)
    base_cfg = copy.deepcopy(cfg)
    base_cfg.quantization_config = quant_config.to_dict()
    E.save_hf_files(base_cfg, folder)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def load_fp8_base(folder, dtype):
    """What transformers builds from the FP8 base on a CPU: the weights dequantized to `dtype`."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=E.torch_dtype(dtype)).eval()
    assert all(p.dtype == E.torch_dtype(dtype) for p in model.parameters())
    model.config.dtype = dtype
    assert getattr(model.config, "quantization_config", None) is None, "transformers kept the model quantized"
    return model


def save_fp4_base(model, cfg, folder, kind):
    """The base as a compressed-tensors NVFP4A16 / MXFP4A16 folder, compressed by its own quantizer."""
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors.torch import save_file
    import fp4_oracle
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    compressed = fp4_oracle.expected_tensors(weights, kind)
    quantized = {k[: -len("_packed")] for k in compressed if k.endswith(".weight_packed")}
    state = {k: v for k, v in weights.items() if k not in quantized}
    state.update({k: v.contiguous().clone() for k, v in compressed.items()})
    base_cfg = copy.deepcopy(cfg)
    qc = QuantizationConfig(config_groups={"group_0": fp4_oracle.scheme(kind)}, format=f"{kind}-pack-quantized",
                            quantization_status="compressed", ignore=["lm_head"])
    base_cfg.quantization_config = qc.model_dump(exclude_none=False)
    E.save_hf_files(base_cfg, folder)
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})


def load_fp4_base(folder, dtype):
    """What transformers builds from the 4-bit base on a CPU, dequantized by compressed-tensors, as a
    plain model of `dtype` (the decompressed weights copied into a fresh model, so PEFT sees no quantizer)."""
    from transformers import AutoConfig, AutoModelForCausalLM, CompressedTensorsConfig
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=E.torch_dtype(dtype),
                                                  quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
    cfg = AutoConfig.from_pretrained(folder)
    del cfg.quantization_config
    cfg.dtype = dtype
    model = AutoModelForCausalLM.from_config(cfg, dtype=E.torch_dtype(dtype)).eval()
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=True)
    assert not missing and not unexpected
    assert all(p.dtype == E.torch_dtype(dtype) for p in model.parameters())
    return model


def write_verl_files(actor, model, rank, world, cfg, peft_model=None, lora_only=False):
    sd = model.state_dict()
    if lora_only:
        sd = {k: v for k, v in sd.items() if "lora_" in k or ".adapter_" in k}
    torch.save(sd, os.path.join(actor, f"model_world_size_{world}_rank_{rank}.pt"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    torch.save(optimizer.state_dict(), os.path.join(actor, f"optim_world_size_{world}_rank_{rank}.pt"))
    torch.save({"lr_scheduler": None, "rng": {"cpu": torch.get_rng_state()}},
               os.path.join(actor, f"extra_state_world_size_{world}_rank_{rank}.pt"))
    if rank == 0:
        E.save_hf_files(cfg, os.path.join(actor, "huggingface"))
        with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
            json.dump({"FSDP_version": 2, "world_size": world}, f, indent=4)
        if peft_model is not None:
            pc = peft_model.peft_config["default"]
            with open(os.path.join(actor, "lora_train_meta.json"), "w") as f:
                json.dump({"r": pc.r, "lora_alpha": pc.lora_alpha, "task_type": str(pc.task_type)}, f, indent=4)


def main():
    case_dir, variant = sys.argv[1], sys.argv[2]
    family, tie, pdtype, cdtype, shape, names = VARIANTS[variant]
    rank, world = E.init_gloo()
    sizes = E.SIZES_128 if variant in ("w2_bf16_128", "lora_only_fp8_base", "lora_only_nvfp4_base") else None
    value_head = variant in VALUE_HEAD_VARIANTS
    cfg = E.tiny_config(family, tie=tie, dtype=cdtype, sizes=sizes, value_head=value_head)
    model = E.build_model(E.tiny_config(family, tie=tie, dtype=pdtype, sizes=sizes, value_head=value_head),
                          auto_class="token_classification" if value_head else "causal_lm")
    model.config.dtype = cdtype
    lora = variant.startswith("lora")
    actor = os.path.join(case_dir, "ckpt", "global_step_1", "actor")
    base = os.path.join(case_dir, "base")
    if rank == 0:
        os.makedirs(actor, exist_ok=True)
        if variant == "lora_only":
            model.save_pretrained(base)
            E.save_hf_files(cfg, base)
        if variant == "lora_only_fp8_base":
            save_fp8_base(model, cfg, base)
        if variant == "lora_only_nvfp4_base":
            save_fp4_base(model, cfg, base, "nvfp4")
    dist.barrier()
    if variant == "lora_only_fp8_base":  # trained on the base as transformers loads it
        model = load_fp8_base(base, cdtype)
    if variant == "lora_only_nvfp4_base":
        model = load_fp4_base(base, cdtype)
    peft_model = add_lora(model, value_head) if lora else None
    live = peft_model if lora else model
    # Where the merge casts, the oracle logits are the live model's cast with torch's .to().
    logits = E.live_logits(live if cdtype == pdtype else E.cast_model(live, cdtype))
    if rank == 0 and lora:
        lora_oracle(case_dir, peft_model)
    before = {k: v.clone() for k, v in live.state_dict().items()}

    mesh = make_mesh(world, shape, names)
    if variant == "tp2d":
        apply_tensor_parallel(model, mesh["tp"])
        mesh = mesh["dp"]
    hf_model = peft_model.base_model.model if lora else model
    shard(live, hf_model.model.layers, mesh)
    write_verl_files(actor, live, rank, world, cfg, peft_model, lora_only=variant.startswith("lora_only"))

    full = E.full_tensors(live.state_dict())   # collective: every rank gathers
    if rank == 0:
        for k, v in full.items():   # the producer itself: gathering gives back what was sharded
            assert torch.equal(v, before[k]), k
        if tie:
            full.pop("lm_head.weight", None)
        E.write_oracle(case_dir, base_names(full) if lora else full, logits)
        write_case_json(case_dir, variant, family, cdtype, pdtype, world, shape)
    dist.barrier()
    dist.destroy_process_group()


def write_case_json(case_dir, variant, family, cdtype, pdtype, world, shape):
    lora = variant.startswith("lora")
    E.write_case(case_dir, producer=f"torch {torch.__version__} fully_shard ({variant}, {world} ranks"
                 f"{', mesh ' + 'x'.join(map(str, shape)) if shape else ''}), verl file layout",
                 checkpoint="ckpt/global_step_1/actor", merge_args=["--backend", "fsdp"],
                 output_dtype=cdtype, hf_load=True, logits_exact=True,
                 adapter=lora, base_model="base" if variant.startswith("lora_only") else None,
                 verl_merger=variant in ("w2_bf16", "w3_fp32_tied", "hsdp"),
                 hf_auto_class="token_classification" if variant in VALUE_HEAD_VARIANTS else "causal_lm",
                 **quantized_fields(variant))


def quantized_fields(variant):
    """The bf16 Qwen2 cases also go through every quantization and the HDF5 archive (NVFP4 and MXFP4
    on the 64/88-dim model leave down_proj, input 88, unquantized: not a multiple of 16 or 32). Block FP8
    loads on the CPU only with whole 128x128 blocks: the 64/88-dim model with
    --fp8_full_blocks_only (every Linear then unquantized), the 128-dim one with and without it, and
    with UE8M0 scales. FP8_BLOCK (fp8_block_ct) quantizes inputs that are multiples of 128 only: on the
    64/88-dim model every Linear stays bf16, listed; on the 128-dim one all are quantized."""
    if variant == "w2_bf16":
        return dict(quantized_modes=["int4", "int8", "fp8_dynamic", "fp8_full_blocks", "fp8_block_ct", "nvfp4", "mxfp4"],
                    hdf5=True)
    if variant == "w2_bf16_128":
        return dict(quantized_modes=["int4", "int8", "fp8_dynamic", "fp8_block", "fp8_full_blocks", "fp8_ue8m0",
                                     "fp8_block_ct", "nvfp4", "mxfp4"],
                    hdf5=True)
    return {}


if __name__ == "__main__":
    main()
