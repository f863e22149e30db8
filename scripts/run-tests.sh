#!/bin/bash
# Installs what is missing, builds, and runs every test (unit, MPI integration, failure cases).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)"
