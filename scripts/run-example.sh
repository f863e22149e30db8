#!/bin/bash
# Installs what is missing, builds vmerge-mpi and merges the example verl FSDP checkpoint
# that ships in examples/ with 2 MPI ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
example=examples/tiny-qwen2-fsdp/global_step_1
target=build/example-merged
build/vmerge-mpi inspect --local_dir "$example/actor"
mpirun --oversubscribe -np 2 build/vmerge-mpi merge --local_dir "$example/actor" --target_dir "$target" --force
build/vmerge-mpi test --local_dir "$example/actor" --test_hf_dir "$example/reference"
echo "merged Hugging Face folder: $(pwd)/$target"
ls -l "$target"
