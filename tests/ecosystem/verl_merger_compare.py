"""verl's own merger and vmerge on the same real FSDP2 checkpoint: the same tensors, name for
name and value for value.

    verl_merger_compare.py CASE_DIR --vmerge BIN --mpiexec MPIEXEC --verl-python PY --work DIR

verl runs in its own environment (setup_venv.sh verl: verl caps transformers below 5.11) as
`python -m verl.model_merger merge --backend fsdp`; this script runs in the main one.
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


def run(cmd, env=None):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--vmerge", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--verl-python", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.case, "case.json")) as f:
        case = json.load(f)
    actor = os.path.join(args.case, case["checkpoint"])
    name = os.path.basename(args.case)
    verl_out = os.path.join(args.work, name + ".verl")
    vmerge_out = os.path.join(args.work, name + ".vmerge")
    for folder in (verl_out, vmerge_out):
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(args.work, exist_ok=True)
    quiet = dict(os.environ, HF_HUB_OFFLINE="1", RAY_DISABLE_IMPORT_WARNING="1", OMP_NUM_THREADS="1")
    run([args.verl_python, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
         "--local_dir", actor, "--target_dir", verl_out], env=quiet)
    mpi = dict(os.environ, TMPDIR=args.work, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    run([args.mpiexec, "--oversubscribe", "-np", "2", args.vmerge, "merge", "--backend", "fsdp",
         "--local_dir", actor, "--target_dir", vmerge_out, "--quiet"], env=mpi)
    ours, theirs = C.output_tensors(vmerge_out), C.output_tensors(verl_out)
    C.compare_key_sets(ours, theirs, "vmerge against verl's merger")
    for key, ref in theirs.items():
        if ours[key].dtype != ref.dtype or not torch.equal(ours[key], ref):
            C.fail(f"{key}: vmerge {ours[key].dtype}, verl {ref.dtype}, or values differ")
    print(f"ok: {name}: {len(ours)} tensors equal to verl's merger, name for name, value for value")
    shutil.rmtree(verl_out)
    shutil.rmtree(vmerge_out)


if __name__ == "__main__":
    main()
