#!/bin/bash
# Builds vmerge with -fsanitize=address,undefined (or $VMERGE_SANITIZERS; g++, VMERGE_SANITIZE=ON) in build-asan/ and
# runs the unit tests there (no ctest, no fixtures, no MPI runs). Any sanitizer report fails.
# usage: tests/run_sanitized_unit_tests.sh [gtest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
# -O1 and line tables only: the sanitizers' own advice, and less than half the compile time -O2 -g
# takes with them (the sanitized build was the longest step of CI).
# VMERGE_SANITIZERS (environment): the -fsanitize list, address,undefined unless set.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMERGE_SANITIZE=ON \
    -DVMERGE_SANITIZERS="${VMERGE_SANITIZERS:-address,undefined}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-asan -j"$(nproc)" --target vmerge_unit_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
build-asan/tests/vmerge_unit_tests "$@"
