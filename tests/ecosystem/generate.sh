#!/bin/bash
# Runs one ecosystem generator under torchrun on loopback gloo, into a fresh case folder.
# usage: generate.sh PYTHON GENERATOR NPROC CASE_DIR VARIANT
set -euo pipefail
python=$1 generator=$2 nproc=$3 case_dir=$4 variant=$5
rm -rf "$case_dir"
mkdir -p "$(dirname "$case_dir")"
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$python" -m torch.distributed.run --standalone --nproc_per_node="$nproc" "$generator" "$case_dir" "$variant"
test -f "$case_dir/case.json"
