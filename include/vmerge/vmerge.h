#ifndef VMERGE_VMERGE_H
#define VMERGE_VMERGE_H
/* libvmerge's C interface: a stable ABI over vmerge.hpp for other languages (Python's ctypes).
 * Nothing of C++ crosses it: options go in and results come out as JSON text, a call's outcome
 * is an opaque handle read through the accessors below and released with vmerge_result_free. */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMERGE_C_API_VERSION 1

typedef struct vmerge_result vmerge_result;

/* This process's bytes written so far of the merge's total; return nonzero to cancel the merge
 * (it fails as an interrupted one: no target, the staging folder kept for --resume). `user` is
 * the pointer given to vmerge_run. */
typedef int (*vmerge_progress_fn)(uint64_t done, uint64_t total, void* user);

/* Runs `command` (merge, test, inspect, verify or watch) with `options_json`, a JSON object of the
 * command's flags by name ({"local_dir": "ckpt", "max_shard_size": "5GB", "resume": true}; a number
 * is its text, true gives a switch, false leaves it out, a list gives the flag once per element).
 * Returns the exit code the command would (0, 1, 2) and stores a result in *result (NULL when
 * out of memory), which the caller frees. `progress` may be NULL. */
int vmerge_run(const char* command, const char* options_json, vmerge_progress_fn progress, void* user,
               vmerge_result** result);

int vmerge_result_exit_code(const vmerge_result* result);
/* The error the command prints on stderr, "" when none (exit code 0, or 1 of test/verify). */
const char* vmerge_result_error(const vmerge_result* result);
/* merge: the --log_json document; inspect: the inspect --json one; otherwise "{}". */
const char* vmerge_result_json(const vmerge_result* result);
/* What the command prints on stdout. */
const char* vmerge_result_output(const vmerge_result* result);
void vmerge_result_free(vmerge_result* result);

const char* vmerge_version(void);
int vmerge_c_api_version(void);

#ifdef __cplusplus
}
#endif
#endif
