#!/bin/bash
# Installs what is missing, builds, and runs every test: the unit tests under ASan/UBSan, each
# fuzzer for a short while, then ctest (unit tests, MPI integration, failure cases, bad-input
# corpus, kill/resume, Slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests
bash scripts/build.sh
echo "== unit tests under ASan/UBSan"
bash tests/run_sanitized_unit_tests.sh --gtest_brief=1
echo "== fuzzers, ${VMERGE_FUZZ_SECONDS:-20} s each"
bash tests/fuzz/run_fuzz.sh "${VMERGE_FUZZ_SECONDS:-20}"
echo "== ctest"
cd build
ctest --output-on-failure -j"$(nproc)"
