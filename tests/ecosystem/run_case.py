"""Merges one ecosystem case with vmerge on 1, 2 and 3 ranks and loads every output with the real
consumers: safetensors, transformers, PEFT.

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


def run_vmerge(args, case, np_, target, extra):
    """vmerge merge under mpiexec with its own Open MPI session folder (TMPDIR) per run."""
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
    subprocess.run(cmd, check=True, env=env)
    shutil.rmtree(session, ignore_errors=True)


def check_merge(args, case, np_, mode):
    """One merge (mode: plain, extract or fold) and every consumer check on its output."""
    target = os.path.join(args.work, f"{os.path.basename(args.case)}.{mode}.np{np_}")
    shutil.rmtree(target, ignore_errors=True)
    extra = {"plain": [], "extract": [], "fold": ["--merge_lora"]}[mode]
    if case.get("base_model"):
        extra += ["--lora_base", os.path.join(args.case, case["base_model"])]
    run_vmerge(args, case, np_, target, extra + case.get(f"{mode}_args", []))
    oracle = os.path.join(args.case, "oracle")
    dtype = getattr(torch, case["output_dtype"])
    if mode == "fold":
        C.check_tensors_close(target, os.path.join(oracle, "folded.safetensors"), dtype)
        C.check_hf_load(target, dtype, os.path.join(oracle, "folded_logits.safetensors"), exact=False)
    else:
        C.check_tensors_exact(target, os.path.join(oracle, "weights.safetensors"), dtype)
        for extra_oracle in case.get("extra_oracles", []):
            C.check_tensors_exact(target, os.path.join(oracle, extra_oracle["file"]), dtype,
                                  what=extra_oracle["what"], partial=extra_oracle.get("partial", False))
        if case.get("hf_load"):
            # An adapter case's logits are the PEFT model's: checked through PeftModel below.
            logits = None if mode == "extract" else os.path.join(oracle, "logits.safetensors")
            C.check_hf_load(target, dtype, logits, exact=case.get("logits_exact", False))
    if mode == "extract":
        C.check_adapter(target, oracle, dtype)
    shutil.rmtree(target)
    print(f"ok: {os.path.basename(args.case)} {mode} np{np_}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--vmerge", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--np", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(args.case, "case.json")) as f:
        case = json.load(f)
    os.makedirs(args.work, exist_ok=True)
    modes = ["extract", "fold"] if case.get("adapter") else ["plain"]
    for np_ in args.np:
        for mode in modes:
            check_merge(args, case, np_, mode)


if __name__ == "__main__":
    main()
