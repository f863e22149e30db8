"""What every ecosystem generator shares: the tiny model configs, a local tokenizer, the fixed
input, the live model's logits, and the case folder (checkpoint + oracle + case.json).

A case folder, written by a generator and read by run_case.py:
  <case>/ckpt/...                 the checkpoint exactly as the real library saved it
  <case>/oracle/weights.safetensors  full tensors of the live model under their HF names,
                                  written here with safetensors (never by vmerge)
  <case>/oracle/logits.safetensors   input_ids and the live model's logits on them
  <case>/case.json                how to merge it and what to check (see write_case)
"""
import copy
import json
import os

import torch

# Odd sizes force uneven shards (257 rows over 2 or 3 ranks); head_dim 16 keeps it tiny.
VOCAB = 257
FIXED_INPUT = [[5, 17, 42, 99, 3, 250, 7, 128, 64, 11, 200, 31]]


# Every Linear a multiple of 128 in both dims (block FP8 loads on the CPU only then): hidden 128,
# intermediate 256, 4 heads of 64 (q [256, 128], k/v [128, 128], o [128, 256]).
SIZES_128 = dict(hidden_size=128, intermediate_size=256, head_dim=64)


def tiny_config(family="qwen2", tie=False, dtype="bfloat16", layers=2, sizes=None, value_head=False):
    """A two-layer HF config of the given family (Qwen2 with QKV bias, or Llama); `sizes`
    overrides hidden/intermediate/head_dim (SIZES_128); `value_head`: the token-classification
    model of one label a value or reward model is (its `score` head instead of lm_head)."""
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=88, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    common.update(sizes or {})
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[family]
    cfg = cls(**common)
    cfg.dtype = dtype
    cfg.architectures = [{"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[family]]
    if value_head:
        cfg.num_labels = 1
        cfg.architectures = [cfg.architectures[0].replace("ForCausalLM", "ForTokenClassification")]
    return cfg


def auto_model_class(name="causal_lm"):
    """The transformers Auto class a case's model loads with (case.json `hf_auto_class`): VL
    models are not causal LMs to transformers 5; value models are token classifiers."""
    import transformers
    return getattr(transformers, {"causal_lm": "AutoModelForCausalLM",
                                  "image_text_to_text": "AutoModelForImageTextToText",
                                  "token_classification": "AutoModelForTokenClassification"}[name])


def build_model(cfg, seed=1234, auto_class="causal_lm"):
    """The live model: identical on every rank (same seed), in the config's dtype, eval mode.
    Parameters get a random spread (not the init's zeros/ones) so every tensor is distinct."""
    torch.manual_seed(seed)
    # Built in its dtype, as from_pretrained builds it (a .to() would also cast the fp32 rotary
    # buffers, and the live logits would then differ from any loaded model's).
    model = auto_model_class(auto_class).from_config(cfg, dtype=torch_dtype(cfg.dtype))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.05 + (1.0 if p.dim() == 1 else 0.0))
    return model.eval()


def cast_model(model, dtype):
    """The model as a loader builds it in `dtype` from the model's weights cast with torch's
    .to(): the reference for a merge that casts."""
    from transformers import AutoModelForCausalLM
    cfg = copy.deepcopy(model.config)
    cfg.dtype = dtype
    cast = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype))
    cast.load_state_dict({k: v.to(torch_dtype(dtype)) for k, v in model.state_dict().items()})
    return cast.eval()


def torch_dtype(value):
    """A torch.dtype from a config's dtype (transformers 5 keeps a torch.dtype, a JSON a string)."""
    return value if isinstance(value, torch.dtype) else getattr(torch, value)


def build_tokenizer():
    """A word-level tokenizer with exactly VOCAB entries, built locally (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, VOCAB):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


def save_hf_files(cfg, folder):
    """config.json, generation_config.json and the tokenizer, as save_pretrained writes them."""
    from transformers import GenerationConfig
    os.makedirs(folder, exist_ok=True)
    cfg.save_pretrained(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)


@torch.no_grad()
def live_logits(model):
    """Logits of the live model on FIXED_INPUT, in float32 (computed in the model's dtype)."""
    ids = torch.tensor(FIXED_INPUT)
    return model(input_ids=ids).logits.float()


def full_tensors(state_dict):
    """The full tensor of every state-dict value (DTensors gathered with full_tensor(); a
    collective, so every rank calls it), detached, contiguous, on the CPU."""
    from torch.distributed.tensor import DTensor
    out = {}
    for name, value in state_dict.items():
        if isinstance(value, DTensor):
            value = value.full_tensor()
        out[name] = value.detach().cpu().contiguous().clone()
    return out


def write_oracle(case_dir, tensors, logits=None):
    """The oracle: full tensors and logits, written with safetensors by the generator."""
    from safetensors.torch import save_file
    folder = os.path.join(case_dir, "oracle")
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "weights.safetensors"))
    if logits is not None:
        save_file({"input_ids": torch.tensor(FIXED_INPUT), "logits": logits.contiguous()},
                  os.path.join(folder, "logits.safetensors"))


def write_case(case_dir, **fields):
    """case.json: what run_case.py does with the case. Fields:
      producer       which real library saved it (text for the report)
      checkpoint     the folder vmerge merges, relative to the case folder
      merge_args     extra vmerge arguments (e.g. ["--backend", "fsdp"])
      hf_config      folder of config.json and tokenizer, relative to the case (--hf_config)
      output_dtype   dtype of the merged weights ("bfloat16", "float32", ...); oracle tensors are
                     cast with torch's .to() when they differ
      oracle_dtypes  true: every output tensor in its oracle tensor's dtype (save_pretrained keeps
                     some in float32 in a bf16 model), not cast to output_dtype
      hf_load        true: transformers' from_pretrained must load the output
      hf_auto_class  the Auto class of that load: "causal_lm" (AutoModelForCausalLM, the default),
                     "image_text_to_text" (VL models; logits on the same text-only input_ids) or
                     "token_classification" (value models: AutoModelForTokenClassification)
      hf_unexpected_keys  a regex: output keys transformers' load may leave unloaded (layers it
                     does not build: DeepSeek-V3's MTP layers); at least one must be there
      logits_exact   true: the loaded model's logits must equal the live ones bit for bit
      adapter        true: the output has a PEFT adapter (checked with PeftModel)
      base_model     folder of the base model for the adapter check (relative to the case)
      expected_error text the merge must fail with (a layout vmerge refuses by design)
      error_without_base  an adapter-only case: text the merge without --lora_base must fail with
      quantized_modes  also merge with these quantizations and load each with its consumer
                     (run_case.py QUANT_MODES: int4, int8, fp8_dynamic, fp8_block, fp8_full_blocks,
                     fp8_ue8m0, fp8_block_ct, nvfp4, mxfp4)
      quantized_logits  false: the quantized loads skip the logits check (weights of edge values)
      quantized_load  false: the quantized outputs are only checked against compressed-tensors'
                     quantizer (fp4_oracle, fp8_ct_oracle), not loaded (MoE models transformers fuses)
      passthrough_modes  {mode: source file}: a quantized source merged with that mode's flags
                     (run_case.py QUANT_MODES) must write every tensor of the source file bit for
                     bit (block FP8 read and written in the same scheme)
      hdf5           true: also merge with --format hdf5 (plain and zstd) and read it with h5py
      extra_oracles  more tensor oracles the plain/extract output must equal, e.g. the producer's
                     own consolidation tool: [{"file": name in oracle/, "what": text for the
                     report, "partial": true if it may lack some output tensors}]
      ranks          the rank counts run_case.py merges with (default [1, 2, 3])
      adapter_oracle, fold_oracle  what oracle/adapter.safetensors and folded.safetensors are,
                     for the report (default: PEFT's export and merge_and_unload)
      exclude_frozen_oracle  a DeepSpeed case: oracle/ file of zero_to_fp32's
                     --exclude_frozen_parameters, which merge with the same flag must equal
    """
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(fields, f, indent=2, sort_keys=True)


def init_gloo():
    """torch.distributed over gloo on loopback (torchrun sets the rank variables)."""
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def run_variant(variants, argv):
    """A generator's main under torchrun: argv is CASE_DIR VARIANT; runs variants[VARIANT](case_dir,
    variant, rank, world) on every gloo rank, then waits for all of them before leaving."""
    import torch.distributed as dist
    case_dir, variant = argv[1], argv[2]
    if variant not in variants:
        raise SystemExit(f"unknown variant {variant!r}; one of {sorted(variants)}")
    rank, world = init_gloo()
    variants[variant](case_dir, variant, rank, world)
    dist.barrier()
    dist.destroy_process_group()
