"""Corpus cases of metadata that would contradict the weights: tying an untied trained head,
a config.json dtype other than the weights', quantization no vLLM kernel runs, MoE experts
quantized unlike each other, a value model's head left out of `ignore`, and `test` against a
reference stored in another dtype. Failures must name both tensors or the rule; exit-0 cases
must print what config.json now states (tests/integration/metadata_outputs.py reads the files)."""
import json
import os
import struct

from corpus_lib import case, copy_case

DTYPE_NAMES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
ELEMENT = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4}


def safetensors_tensors(path):
    """{name: (dtype, shape, bytes)} of one safetensors file (standard library only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}


def first_differing_row(tensors, a, b):
    """The first row where tensors a and b differ, from a reference folder's bytes."""
    (_, shape, x), (_, _, y) = tensors[a], tensors[b]
    row = len(x) // shape[0]
    return next(r for r in range(shape[0]) if x[r * row:(r + 1) * row] != y[r * row:(r + 1) * row])


def edit_config(folder, change):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    change(config)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return config


def add_cases(good_fsdp, good_megatron, out):
    tie_cases(good_fsdp, good_megatron, out)
    dtype_cases(good_fsdp, out)
    quantize_cases(good_fsdp, good_megatron, out)
    test_cases(good_fsdp, out)


def tie_cases(good_fsdp, good_megatron, out):
    head, emb = "lm_head.weight", "model.embed_tokens.weight"
    ref = safetensors_tensors(os.path.join(good_fsdp, "w2_bf16.reference", "model.safetensors"))
    row = first_differing_row(ref, head, emb)

    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "tie_flag_trained_head_differs"))
    case("tie_flag_trained_head_differs", d,
         [f"--tie_word_embedding, but {head} differs from {emb} (first at row {row})",
          "merge without --tie_word_embedding"],
         "untied model (its own trained lm_head) merged with --tie_word_embedding: refused, never dropped",
         args=["--tie_word_embedding"])

    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "tie_config_true_head_differs"))
    edit_config(os.path.join(d, "huggingface"), lambda c: c.update(tie_word_embeddings=True))
    case("tie_config_true_head_differs", d,
         [f"huggingface/config.json has tie_word_embeddings true, but {head} differs from {emb} (first at row {row})",
          "tie_word_embeddings: false"],
         "config.json says tied, but the checkpoint's lm_head was trained apart from the embedding")

    d = copy_case(os.path.join(good_fsdp, "tied_w2"), os.path.join(out, "tie_flag_identical_head_ok"))
    edit_config(os.path.join(d, "huggingface"), lambda c: c.update(tie_word_embeddings=False))
    case("tie_flag_identical_head_ok", d, [],
         "config.json says untied, the checkpoint's lm_head is the embedding itself: with "
         "--tie_word_embedding no lm_head is written and config.json must say tied",
         args=["--tie_word_embedding"], exit=0,
         output=["config.json: tie_word_embeddings -> true",
                 f"tied word embeddings: {head} is not written"])

    meg = os.path.join(good_megatron, "verl_llama_tp2_pp1")
    mref = safetensors_tensors(os.path.join(meg, "reference", "model.safetensors"))
    mrow = first_differing_row(mref, head, emb)
    d = copy_case(meg, os.path.join(out, "tie_flag_megatron_output_layer"))
    case("tie_flag_megatron_output_layer", os.path.join(d, "actor"),
         f"--tie_word_embedding, but {head} differs from {emb} (first at row {mrow})",
         "Megatron (tp 2) untied output_layer with --tie_word_embedding: mapped to lm_head.weight, "
         "compared with the embedding, refused", args=["--tie_word_embedding"])

    # Plain DCP keeps model.lm_head.weight as it is.
    dcp = os.path.join(good_megatron, "dcp_qwen2_uneven")
    dref = safetensors_tensors(os.path.join(dcp, "reference", "model.safetensors"))
    drow = first_differing_row(dref, head, emb)
    d = copy_case(dcp, os.path.join(out, "tie_flag_dcp_trained_head"))
    case("tie_flag_dcp_trained_head", os.path.join(d, "dcp"),
         f"--tie_word_embedding, but {head} differs from {emb} (first at row {drow})",
         "plain DCP state dict with its own lm_head, --tie_word_embedding, 3 ranks comparing a third each",
         args=["--tie_word_embedding", "--hf_config", os.path.join(d, "hf")], np=3)


def dtype_cases(good_fsdp, out):
    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "dtype_fp32_config_rewritten"))
    case("dtype_fp32_config_rewritten", d, [],
         "bf16 checkpoint and config, --dtype fp32: config.json must say float32",
         args=["--dtype", "fp32"], exit=0,
         output=["config.json: torch_dtype 'bfloat16' -> 'float32', the dtype the weights are written in"])

    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "dtype_v5_key_and_text_config"))

    def v5(c):
        c["dtype"] = c.pop("torch_dtype")
        c["text_config"] = {"torch_dtype": "bfloat16", "hidden_size": c["hidden_size"]}
    edit_config(os.path.join(d, "huggingface"), v5)
    case("dtype_v5_key_and_text_config", d, [],
         "transformers 5 `dtype` key plus a nested text_config.torch_dtype, --dtype fp16: both rewritten",
         args=["--dtype", "fp16"], exit=0,
         output=["config.json: dtype 'bfloat16' -> 'float16'",
                 "config.json: text_config.torch_dtype 'bfloat16' -> 'float16'"])


def quantize_cases(good_fsdp, good_megatron, out):
    rule = "no vLLM kernel runs it (compressed-tensors WNA16: Marlin takes group sizes -1"
    for group in (16, 96):
        name = f"quantize_group_{group}_no_kernel"
        d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, name))
        case(name, d, [f"--group_size {group}: {rule}", "--allow_unsupported_quantization"],
             f"--group_size {group} divides the fixture's inputs (32, 48) but no vLLM WNA16 kernel takes it",
             args=["--quantize", "--group_size", str(group)])

    d = copy_case(os.path.join(good_fsdp, "w2_bf16"), os.path.join(out, "quantize_group_16_override"))
    case("quantize_group_16_override", d, [],
         "--group_size 16 with the override: written, with a note saying vLLM will not load it",
         args=["--quantize", "--group_size", "16", "--allow_unsupported_quantization"], exit=0,
         output=["written anyway (--allow_unsupported_quantization): vLLM will not load it"])

    moe = os.path.join(good_megatron, "verl_qwen2moe_tp2_ep2")
    if os.path.isdir(moe):  # ctest passes the full Megatron fixture folder
        ref = safetensors_tensors(os.path.join(moe, "reference", "model.safetensors"))
        layer = "model.layers.0.mlp.experts"
        projections = sorted({k[len(layer) + 1:].split(".", 1)[1][:-len(".weight")]
                              for k in ref if k.startswith(layer + ".") and k.endswith(".weight")})
        p = projections[0]
        d = copy_case(moe, os.path.join(out, "quantize_ignore_some_experts"))
        case("quantize_ignore_some_experts", os.path.join(d, "actor"),
             [f"MoE layer {layer}: expert {layer}.0.{p} is quantized but {layer}.1.{p} is not",
              f"ignore all experts of {layer} or none"],
             "an ignore pattern that matches expert 1 of layer 0 only", np=3,
             args=["--quantize", "--group_size", "0", "--quantize_ignore", r"re:model\.layers\.0\.mlp\.experts\.1\..*"])

    value = os.path.join(good_megatron, "verl_qwen2_tp2_pp2_value")
    if os.path.isdir(value):
        d = copy_case(value, os.path.join(out, "quantize_value_model_score_ignored"))
        case("quantize_value_model_score_ignored", os.path.join(d, "actor"), [],
             "a quantized value model: its score head is a Linear left unquantized, so `ignore` names it",
             command="inspect", args=["--quantize", "--group_size", "32", "--json"], exit=0,
             output=['"ignored": [', '"score"'])


def test_cases(good_fsdp, out):
    # fp32 shards merged as stored (fp32) against the bf16 reference: compared after casting.
    d = copy_case(os.path.join(good_fsdp, "fp32_to_bf16_w2"), os.path.join(out, "test_reference_in_bf16"))
    ref_dir = os.path.join(good_fsdp, "fp32_to_bf16_w2.reference")
    ref = safetensors_tensors(os.path.join(ref_dir, "model.safetensors"))
    n = sum(1 for v in ref.values() if v[0] == "BF16")
    case("test_reference_in_bf16", d, [],
         "`test --dtype keep` (fp32 merge) against a bf16 reference: a note per dtype pair, values "
         "compared after rounding the merge to bf16",
         command="test", args=["--dtype", "keep", "--test_hf_dir", ref_dir], exit=0,
         output=[f"vmerge test: note: {n} tensors dtype float32, reference bfloat16: compared after casting to bfloat16",
                 "vmerge test: OK"])

    # bf16 merge (config bfloat16, --dtype auto) of fp32 shards against the fp32 reference.
    d = copy_case(os.path.join(good_fsdp, "keep_fp32_w2"), os.path.join(out, "test_reference_in_fp32"))
    ref_dir = os.path.join(good_fsdp, "keep_fp32_w2.reference")
    ref = safetensors_tensors(os.path.join(ref_dir, "model.safetensors"))
    n = sum(1 for v in ref.values() if v[0] == "F32")
    case("test_reference_in_fp32", d, [],
         "`test` of a bf16 merge against an fp32 reference: the reference is rounded to bf16 first",
         command="test", args=["--test_hf_dir", ref_dir], exit=0,
         output=[f"vmerge test: note: {n} tensors dtype bfloat16, reference float32: compared after casting to bfloat16",
                 "vmerge test: OK"])
