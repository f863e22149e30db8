"""Merges one ecosystem case with vmerge on 1, 2 and 3 ranks (quantized and archive outputs on 3)
and loads every output with the real consumers: safetensors, transformers, PEFT; quantized outputs with transformers' compressed-tensors
and FineGrainedFP8 paths, HDF5 archives with h5py and hdf5plugin.

    run_case.py CASE_DIR --vmerge BIN --mpiexec MPIEXEC --work DIR [--np 1 2 3]

The case folder is a generator's (eco_common.py describes it). Every check compares with the
oracle the generator took from the live model; nothing here is computed by vmerge.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import eco_checks as C  # noqa: E402
import fold_error  # noqa: E402


def run_vmerge(args, case, np_, target, extra):
    """vmerge merge under mpiexec with its own Open MPI session folder (TMPDIR) per run. A case
    with `expected_error` must fail with that text on stderr and leave no target folder."""
    session = target + ".ompi"
    os.makedirs(session, exist_ok=True)
    env = dict(os.environ, TMPDIR=session, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [args.mpiexec, "--oversubscribe", "-np", str(np_), args.vmerge, "merge",
           "--local_dir", os.path.join(args.case, case["checkpoint"]), "--target_dir", target,
           "--max-shard-size", "60KB", "--quiet"] + case["merge_args"] + extra
    if case.get("hf_config"):
        cmd += ["--hf_config", os.path.join(args.case, case["hf_config"])]
    print("+", " ".join(cmd), flush=True)
    expected = case.get("expected_error")
    result = subprocess.run(cmd, env=env, stderr=subprocess.PIPE if expected else None, text=True)
    shutil.rmtree(session, ignore_errors=True)
    if not expected:
        if result.returncode:
            raise subprocess.CalledProcessError(result.returncode, cmd)
        return True
    if result.returncode == 0 or expected not in result.stderr or os.path.exists(target):
        raise C.CheckFailed(f"expected the merge to fail with '{expected}' and leave no {target}; exit "
                            f"{result.returncode}, stderr: {result.stderr[-2000:]}")
    print(f"  refused as expected: {expected}", flush=True)
    return False


# case.json `quantized_modes`: the vmerge flags of each, and the logits tolerance (max |diff| from
# the bf16 model's logits over their max |value|). The tolerances are a few times what these tiny
# random models show (README: measured), loose enough for rounding-order changes in a consumer,
# tight enough that a wrong scale, code or transposed block fails by far: int4 in groups of 32
# (step amax/7.5) and the 4-bit floats move the logits most, int8 per channel and both FP8s (2^-4
# relative) least.
QUANT_MODES = {
    "int4": (["--quantize", "--bits", "4", "--group_size", "32"], 0.25),
    "int8": (["--quantize", "--bits", "8", "--group_size", "0"], 0.03),
    "fp8_dynamic": (["--quantize=fp8-dynamic"], 0.08),
    "fp8_block": (["--quantize=fp8"], 0.08),
    "fp8_full_blocks": (["--quantize=fp8", "--fp8_full_blocks_only"], 0.08),
    "fp8_block_ct": (["--quantize=fp8-block"], 0.08),
    "fp8_ue8m0": (["--quantize=fp8", "--scale_format", "ue8m0"], 0.08),
    "nvfp4": (["--quantize=nvfp4"], 0.3),
    "mxfp4": (["--quantize=mxfp4"], 0.3),
}
ARCHIVE_MODES = {"hdf5": ["--format", "hdf5"], "hdf5_zstd": ["--format", "hdf5", "--compress", "zstd"]}


def check_quantized(args, case, np_, mode):
    """One quantized merge, loaded by transformers (compressed-tensors or FineGrainedFP8)."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.{mode}.np{np_}")
    shutil.rmtree(target, ignore_errors=True)
    flags, tol = QUANT_MODES[mode]
    run_vmerge(args, case, np_, target, flags)
    kind = "fp8_block" if mode in ("fp8_full_blocks", "fp8_ue8m0") else mode
    if case.get("quantized_load", True):
        C.check_quantized_load(target, kind, os.path.join(args.case, "oracle"),
                               tol if case.get("quantized_logits", True) else None,
                               requantized=mode not in case.get("passthrough_modes", {}))
    else:
        C.check_bit_exact_to_compressed_tensors(C.output_tensors(target), C.load_file(
            os.path.join(args.case, "oracle", "weights.safetensors")), kind)
    shutil.rmtree(target)
    print(f"ok: {os.path.basename(args.case)} {mode} np{np_}", flush=True)


def check_passthrough(args, case, np_, mode, source):
    """A quantized source merged into its own scheme: every output tensor must be the source
    file's, bit for bit (codes and scales as the producer wrote them)."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.{mode}.passthrough.np{np_}")
    shutil.rmtree(target, ignore_errors=True)
    run_vmerge(args, case, np_, target, QUANT_MODES[mode][0])
    C.check_tensors_exact(target, os.path.join(args.case, source), None, what="the quantized source " + source)
    shutil.rmtree(target)
    print(f"ok: {os.path.basename(args.case)} {mode} pass-through np{np_}", flush=True)


def check_archive(args, case, np_, mode):
    """One HDF5 archive, read with h5py."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.{mode}.np{np_}")
    shutil.rmtree(target, ignore_errors=True)
    run_vmerge(args, case, np_, target, ARCHIVE_MODES[mode])
    C.check_hdf5_archive(target, os.path.join(args.case, "oracle", "weights.safetensors"),
                         getattr(torch, case["output_dtype"]))
    shutil.rmtree(target)
    print(f"ok: {os.path.basename(args.case)} {mode} np{np_}", flush=True)


def check_merge(args, case, np_, mode):
    """One merge (mode: plain, extract or fold) and every consumer check on its output."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.{mode}.np{np_}")
    shutil.rmtree(target, ignore_errors=True)
    extra = {"plain": [], "extract": [], "fold": ["--merge_lora"],
             "exclude_frozen": ["--exclude_frozen_parameters"]}[mode]
    if case.get("base_model"):
        extra += ["--lora_base", os.path.join(args.case, case["base_model"])]
    if not run_vmerge(args, case, np_, target, extra + case.get(f"{mode}_args", [])):
        return
    oracle = os.path.join(args.case, "oracle")
    dtype = getattr(torch, case["output_dtype"])
    auto_class = case.get("hf_auto_class", "causal_lm")
    if mode == "exclude_frozen":  # the producer's own tool with the same flag is the oracle
        C.check_tensors_exact(target, os.path.join(oracle, case["exclude_frozen_oracle"]), dtype,
                              what="zero_to_fp32 --exclude_frozen_parameters")
    elif mode == "fold":
        C.check_tensors_close(target, os.path.join(oracle, "folded.safetensors"), dtype,
                              C.adapted_weights(os.path.join(oracle, "adapter.safetensors"), C.saved_names(oracle)),
                              what=case.get("fold_oracle", "PEFT's merge_and_unload"))
        if os.path.isdir(os.path.join(oracle, "peft_saved")):
            fold_error.check_fold_error(args.case, target)
        C.check_hf_load(target, dtype, os.path.join(oracle, "folded_logits.safetensors"), exact=False,
                        auto_class=auto_class)
    else:
        # save_pretrained's own oracle keeps the dtypes the model keeps (fp32 MoE routers in a
        # bf16 model): the output must carry them, not the config's dtype.
        C.check_tensors_exact(target, os.path.join(oracle, "weights.safetensors"),
                              None if case.get("oracle_dtypes") else dtype)
        for extra_oracle in case.get("extra_oracles", []):
            C.check_tensors_exact(target, os.path.join(oracle, extra_oracle["file"]), dtype,
                                  what=extra_oracle["what"], partial=extra_oracle.get("partial", False))
        if case.get("hf_load"):
            # An adapter case's logits are the PEFT model's: checked through PeftModel below.
            logits = None if mode == "extract" else os.path.join(oracle, "logits.safetensors")
            C.check_hf_load(target, dtype, logits, exact=case.get("logits_exact", False),
                            auto_class=auto_class, unexpected_ok=case.get("hf_unexpected_keys"))
    if mode == "extract":
        C.check_adapter(target, oracle, dtype, auto_class, what=case.get("adapter_oracle"))
    shutil.rmtree(target)
    print(f"ok: {os.path.basename(args.case)} {mode} np{np_}", flush=True)


def check_refused_without_base(args, case):
    """An adapter-only checkpoint merged without --lora_base: refused with the case's text."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.nobase")
    shutil.rmtree(target, ignore_errors=True)
    run_vmerge(args, dict(case, base_model=None, expected_error=case["error_without_base"]), 1, target, [])
    print(f"ok: {os.path.basename(args.case)} refused without --lora_base", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--vmerge", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--np", type=int, nargs="+", help="rank counts (default: the case's `ranks`, else 1 2 3)")
    ap.add_argument("--modes", nargs="+", help="only these modes (plain, int4, ..., hdf5_zstd)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.case, "case.json")) as f:
        case = json.load(f)
    os.makedirs(args.work, exist_ok=True)
    if case.get("error_without_base") and not args.modes:
        check_refused_without_base(args, case)
    modes = ["extract", "fold"] if case.get("adapter") else ["plain"]
    if case.get("exclude_frozen_oracle"):
        modes.append("exclude_frozen")
    wanted = (lambda m: not args.modes or m in args.modes)
    args.np = args.np or case.get("ranks", [1, 2, 3])
    for np_ in args.np:
        for mode in filter(wanted, modes):
            check_merge(args, case, np_, mode)
    # Quantized and archive outputs on the most ranks only: their rank splits (blocks, chunks)
    # are what more ranks exercise; one rank runs the same kernels (CI time, README).
    most = max(args.np)
    for mode in filter(wanted, case.get("quantized_modes", [])):
        check_quantized(args, case, most, mode)
    for mode, source in case.get("passthrough_modes", {}).items():
        if wanted(mode):
            check_passthrough(args, case, most, mode, source)
    for mode in filter(wanted, ARCHIVE_MODES if case.get("hdf5") else []):
        check_archive(args, case, most, mode)


if __name__ == "__main__":
    main()
