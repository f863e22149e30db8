#!/bin/bash
# pip install of the vmerge package from a clean copy of the repository's tracked files (what a
# clone holds; no build folder) into the venv setup_venv.sh python made, as a user would run it,
# with the build backend pinned there (--no-build-isolation). It is built without MPI
# (-DVMERGE_MPI=OFF: the laptop's build, and a second build of the project for the tests that
# compare it with build/vmerge-mpi); -O1 without debug info keeps the compile short, unless
# VMERGE_PIP_CXX_FLAGS gives the flags (scripts/run-tests.sh: its own build's, so that ccache
# serves this build from that one's objects).
# usage: pip_install.sh SOURCE_DIR VENV COPY_DIR
set -euo pipefail
source_dir=$1 venv=$2 copy=$(realpath -m "$3")
rm -rf "$copy"
mkdir -p "$copy"
git -C "$source_dir" ls-files -z | (cd "$source_dir" && xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$copy"
"$venv/bin/pip" uninstall -q -y vmerge >/dev/null 2>&1 || true
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
    --config-settings=cmake.define.VMERGE_MPI=OFF \
    --config-settings=cmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO="${VMERGE_PIP_CXX_FLAGS:--O1 -g0 -DNDEBUG}" \
    --config-settings=build-dir="$copy/build-pip" \
    ${VMERGE_PIP_COMPILER_LAUNCHER:+--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=$VMERGE_PIP_COMPILER_LAUNCHER} \
    "$copy"
"$venv/bin/python" -c 'import vmerge; print("ok   pip install: vmerge", vmerge.version(), "from", vmerge.__file__)'
test -x "$venv/bin/vmerge-mpi"
