#!/bin/bash
# The FP8 and 4-bit float quantizer kernels of a base revision against the working tree's, on
# hostile weights (quantizer_outputs.cpp) in BF16, F16 and F32: every kernel's codes and scales
# (or its refusal) must be the same, byte for byte. Complements scripts/compare_outputs.sh, which
# compares whole merges of the fixtures: this one reaches values no fixture holds (float32
# subnormals, exponents over the whole range, float16's largest values, all-zero groups, ties).
#
#   bash scripts/kernel_compare/compare_quantizer_kernels.sh [BASE_REV] [BUILD_DIR]
#
# BASE_REV (default main) must have the same kernel declarations (exec/fp4_quantize.h,
# exec/fp8_quantize.h). BUILD_DIR (default build) holds libvmerge_core.a of the working tree; the
# kernel sources of both revisions are compiled here with the flags CMakeLists.txt gives them.
set -euo pipefail
base=${1:-main}
build=${2:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++20 -O3 -DNDEBUG -fopenmp-simd -pthread -Isrc)
for rev in base new; do
    mkdir -p "$work/$rev"
    for kernel in fp4_quantize fp8_quantize; do
        src=src/exec/$kernel.cpp
        if [[ $rev == base ]]; then git show "$base:$src" >"$work/$rev/$kernel.cpp"; else cp "$src" "$work/$rev/$kernel.cpp"; fi
        extra=()
        [[ $kernel == fp4_quantize ]] && extra=(-ffp-contract=off)
        c++ "${flags[@]}" "${extra[@]}" -c "$work/$rev/$kernel.cpp" -o "$work/$rev/$kernel.o"
    done
    # The kernels' objects come first, so the archive's own copies of them are not linked.
    c++ -std=c++20 -O2 -Isrc scripts/kernel_compare/quantizer_outputs.cpp "$work/$rev"/*.o "$build/libvmerge_core.a" \
        -pthread -o "$work/$rev/quantizer_outputs"
done
status=0
for dtype in bf16 f16 f32; do
    "$work/base/quantizer_outputs" "$dtype" >"$work/base.$dtype" 2>/dev/null
    "$work/new/quantizer_outputs" "$dtype" >"$work/new.$dtype" 2>/dev/null
    if diff "$work/base.$dtype" "$work/new.$dtype"; then
        echo "same   $dtype: $(wc -l <"$work/new.$dtype") kernel runs"
    else
        echo "DIFFER $dtype"; status=1
    fi
done
exit $status
