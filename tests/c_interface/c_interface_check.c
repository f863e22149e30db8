/* libvmerge.so from a C program, as another language's binding sees it (vmerge.h compiled as C,
 * nothing else of the project): inspect of a checkpoint returns its JSON, a merge writes the
 * folder and reports progress up to its total, a cancelled merge leaves no target, and an error
 * comes back as the command's message.
 * usage: c_interface_check CHECKPOINT WORK_DIR (made if missing; targets named by the process id) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmerge/vmerge.h"

static int failures = 0;
#define CHECK(condition, ...)                  \
    do {                                       \
        if (!(condition)) {                    \
            fprintf(stderr, "FAIL: " __VA_ARGS__); \
            fprintf(stderr, "\n");             \
            ++failures;                        \
        }                                      \
    } while (0)

struct seen {
    unsigned long long done, total;
    int calls, cancel;
};

static int on_progress(uint64_t done, uint64_t total, void* user) {
    struct seen* s = (struct seen*)user;
    s->done = done;
    s->total = total;
    ++s->calls;
    return s->cancel;
}

static int exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int main(int argc, char** argv) {
    char options[4096], target[2048];
    vmerge_result* r = NULL;
    struct seen progress = {0, 0, 0, 0};
    int code;
    if (argc != 3) {
        fprintf(stderr, "usage: c_interface_check CHECKPOINT WORK_DIR\n");
        return 2;
    }
    mkdir(argv[2], 0777);
    CHECK(vmerge_c_api_version() == VMERGE_C_API_VERSION, "C API version %d", vmerge_c_api_version());
    CHECK(strlen(vmerge_version()) > 0, "no version");

    snprintf(options, sizeof options, "{\"local_dir\": \"%s\", \"json\": true}", argv[1]);
    code = vmerge_run("inspect", options, NULL, NULL, &r);
    CHECK(code == 0, "inspect: exit %d: %s", code, vmerge_result_error(r));
    CHECK(strstr(vmerge_result_json(r), "\"backend\": \"fsdp\"") != NULL, "inspect JSON: %s", vmerge_result_json(r));
    vmerge_result_free(r);

    snprintf(target, sizeof target, "%s/merged-%d", argv[2], (int)getpid());
    snprintf(options, sizeof options, "{\"local_dir\": \"%s\", \"target_dir\": \"%s\", \"quiet\": true}", argv[1], target);
    code = vmerge_run("merge", options, on_progress, &progress, &r);
    CHECK(code == 0, "merge: exit %d: %s", code, vmerge_result_error(r));
    CHECK(progress.calls >= 1 && progress.total > 0 && progress.done == progress.total, "progress %llu of %llu",
          progress.done, progress.total);
    CHECK(strstr(vmerge_result_json(r), "\"command\": \"merge\"") != NULL, "merge JSON: %s", vmerge_result_json(r));
    vmerge_result_free(r);

    snprintf(target, sizeof target, "%s/cancelled-%d", argv[2], (int)getpid());
    snprintf(options, sizeof options, "{\"local_dir\": \"%s\", \"target_dir\": \"%s\", \"quiet\": true}", argv[1], target);
    progress.cancel = 1;
    code = vmerge_run("merge", options, on_progress, &progress, &r);
    CHECK(code == 1, "cancelled merge: exit %d", code);
    CHECK(strstr(vmerge_result_error(r), "cancelled by the progress callback") != NULL, "cancel: %s", vmerge_result_error(r));
    CHECK(!exists(target), "a cancelled merge left %s", target);
    vmerge_result_free(r);

    code = vmerge_run("merge", "{\"local_dir\": \"/nonexistent/ckpt\", \"target_dir\": \"/nonexistent/out\"}", NULL, NULL, &r);
    CHECK(code == 1, "missing checkpoint: exit %d", code);
    CHECK(strncmp(vmerge_result_error(r), "vmerge-mpi: error: ", 19) == 0, "error: %s", vmerge_result_error(r));
    vmerge_result_free(r);

    if (failures == 0) printf("ok   libvmerge.so from C: inspect, merge with progress, cancel, error\n");
    return failures == 0 ? 0 : 1;
}
