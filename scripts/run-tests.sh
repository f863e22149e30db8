#!/bin/bash
# Installs what is missing, builds, and runs every test: the unit tests under ASan, each fuzzer
# (ASan + UBSan) for a short while, then ctest (MPI integration, failure cases, bad-input corpus,
# kill/resume, Slurm, docs, the ecosystem round trip). Each phase prints its wall time.
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
bash tests/ecosystem/setup_venv.sh s3 >build/s3-venv.log 2>&1 &
s3_venv=$!
bash tests/ecosystem/setup_venv.sh python >build/python-venv.log 2>&1 &
python_venv=$!
phase "build"
# ccache under every CMake build here (CMake reads the launcher from the environment): the
# Python package test's `pip install .` compiles the same sources with the same flags in a copy
# of the tree (tests/python/pip_install.sh), so with the paths taken relative to the tree
# (CCACHE_BASEDIR, and no working directory in the hash) it reuses this build's objects instead
# of compiling the project a second time. A later run on the same machine reuses all of them.
# ccache hashes the compiler's name too: both builds name g++ (scikit-build-core picks g++,
# CMake alone c++).
if command -v ccache >/dev/null; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CC=gcc CXX=g++
fi
# Line tables only (-g1): backtraces keep their lines, the compile takes a quarter less. The unit
# tests are compiled and run once, in the sanitized build below. libvmerge.so too (position
# independent objects, as the package's), for the C and Python interface tests.
export VMERGE_PIP_CXX_FLAGS="-O2 -g1 -DNDEBUG"
bash scripts/build.sh -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$VMERGE_PIP_CXX_FLAGS" -DVMERGE_UNIT_TESTS=OFF \
    -DVMERGE_SHARED_LIBRARY=ON
phase "unit tests under ASan"
# ASan only here: UBSan doubles this build's compile (checkpoint.cpp at -O1 -g1: 18.9 s of CPU
# with both, 9.0 s with ASan alone), which CI's 45 minutes cannot spare; the fuzzers below run
# every parser under ASan and UBSan. VMERGE_SANITIZERS=address,undefined runs both here.
VMERGE_SANITIZERS=${VMERGE_SANITIZERS:-address} bash tests/run_sanitized_unit_tests.sh --gtest_brief=1
phase "fuzzers, ${VMERGE_FUZZ_SECONDS:-20} s each"
bash tests/fuzz/run_fuzz.sh "${VMERGE_FUZZ_SECONDS:-20}"
phase "ecosystem environments"
# A failure here is shown by ctest's ecosystem_venv tests, which run the same script again.
wait "$main_venv" || tail -20 build/eco-venv.log
wait "$verl_venv" || tail -20 build/eco-verl-venv.log
wait "$s3_venv" || tail -20 build/s3-venv.log
wait "$python_venv" || tail -20 build/python-venv.log
phase "ctest"
cd build
ctest --output-on-failure -j"$(nproc)"
cd ..
phase "done"
