#!/bin/bash
# Installs what is missing, builds, and runs every test: the unit tests under ASan/UBSan, each
# fuzzer for a short while, then ctest (unit tests, MPI integration, failure cases, bad-input
# corpus, kill/resume, Slurm, the ecosystem round trip). Each phase prints its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
phase_start=$SECONDS
phase() {
    echo "== $1 (previous phase $((SECONDS - phase_start)) s, total $SECONDS s)"
    phase_start=$SECONDS
}
phase "install dependencies"
bash scripts/install-deps.sh --tests
# The ecosystem's Python environments are mostly downloads and unpacking: made while the C++
# compiles, so that ctest finds them ready (their own tests then only check the stamp).
mkdir -p build
bash tests/ecosystem/setup_venv.sh main >build/eco-venv.log 2>&1 &
main_venv=$!
bash tests/ecosystem/setup_venv.sh verl >build/eco-verl-venv.log 2>&1 &
verl_venv=$!
phase "build"
# Line tables only (-g1): backtraces keep their lines, the compile takes a quarter less. The unit
# tests are compiled and run once, in the sanitized build below.
bash scripts/build.sh -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DVMERGE_UNIT_TESTS=OFF
phase "unit tests under ASan/UBSan"
bash tests/run_sanitized_unit_tests.sh --gtest_brief=1
phase "fuzzers, ${VMERGE_FUZZ_SECONDS:-20} s each"
bash tests/fuzz/run_fuzz.sh "${VMERGE_FUZZ_SECONDS:-20}"
phase "ecosystem environments"
# A failure here is shown by ctest's ecosystem_venv tests, which run the same script again.
wait "$main_venv" || tail -20 build/eco-venv.log
wait "$verl_venv" || tail -20 build/eco-verl-venv.log
phase "ctest"
cd build
ctest --output-on-failure -j"$(nproc)"
cd ..
phase "done"
