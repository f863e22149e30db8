#pragma once

// VMERGE_VECTOR_CLONES on a compute loop's function: GCC and clang compile it twice on x86-64,
// for AVX2 and for the baseline (SSE2), and the loader picks the one the CPU runs (an ifunc).
// The binary stays portable to any x86-64 node while the loop gets 8 float lanes where the CPU
// has them; results are the same (no fast-math, the same IEEE operations in either clone).
// Elsewhere (aarch64: NEON is the baseline) it is empty.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#define VMERGE_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VMERGE_VECTOR_CLONES
#endif
