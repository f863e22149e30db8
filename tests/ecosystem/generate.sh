#!/bin/bash
# Runs one ecosystem generator under torchrun on loopback gloo, into a fresh case folder.
# usage: generate.sh PYTHON GENERATOR NPROC CASE_DIR VARIANT
# A generator whose worker dies on a signal (gloo's threads abort now and then on a loaded
# machine: "terminate called without an active exception") runs once more from scratch; a
# generator that fails the same way twice, or exits with an error of its own, fails the test.
set -euo pipefail
python=$1 generator=$2 nproc=$3 case_dir=$4 variant=$5
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in 1 2; do
  rm -rf "$case_dir"
  mkdir -p "$(dirname "$case_dir")"
  if "$python" -m torch.distributed.run --standalone --nproc_per_node="$nproc" \
       "$generator" "$case_dir" "$variant" 2>&1 | tee "$log"; then
    test -f "$case_dir/case.json"
    exit 0
  fi
  if [ "$attempt" = 1 ] && grep -qE "exitcode *: -[0-9]+ " "$log"; then
    echo "generate.sh: a worker died on a signal; running the generator once more" >&2
    continue
  fi
  exit 1
done
exit 1
