#pragma once
// libvmerge's C++ interface: the five commands of vmerge-mpi as calls. Each takes the command's
// flags by name, with the meanings docs/usage.md gives them (the same option table parses both),
// and returns what the command's JSON says. The plain C interface is vmerge.h.
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace vmerge::api {

// The flags of one call, in order: {"local_dir", "ckpt/actor"}, {"max_shard_size", "5GB"}.
// Names as on the command line without the dashes (dashes or underscores); a switch takes
// "true" (given) or "false" (left out); a flag given twice is two entries.
using Options = std::vector<std::pair<std::string, std::string>>;

// This process's (rank's) bytes written so far, of the merge's total. Return false to cancel:
// the merge then fails as an interrupted one does (MergeError "cancelled by the progress
// callback", no target, the staging folder kept for --resume).
using ProgressCallback = std::function<bool(uint64_t done, uint64_t total)>;

struct Result {
    int exit_code = 0;   // 0, or 1 when test found differences or verify a mismatch
    std::string json;    // merge: the --log_json document; inspect: the inspect --json one; else "{}"
    std::string output;  // what the command prints on stdout
};

// A usage error (exit_code 2) or a failure (1): what() is the message the command prints on
// stderr, "vmerge-mpi: error: ..." or "vmerge-mpi: usage error: ... (see --help)", without the
// trailing newline.
class MergeError : public std::runtime_error {
public:
    MergeError(const std::string& message, int exit_code) : std::runtime_error(message), exit_code_(exit_code) {}
    int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

Result merge(const Options& options, const ProgressCallback& progress = {});
Result test(const Options& options);
Result inspect(const Options& options);
Result verify(const Options& options);
Result watch(const Options& options, const ProgressCallback& progress = {});
// Any of them by name ("merge", "test", ...).
Result run(const std::string& command, const Options& options, const ProgressCallback& progress = {});

// The vmerge-mpi command itself, which mpi/main.cpp is: `argv` as the shell gives it, printed
// to stdout and stderr, the exit code returned. It starts and ends MPI when a launcher started the
// process: once per process, as a main.
int command_line_main(int argc, char** argv);

// The project version, as vmerge-mpi --version prints it.
const char* version();

}  // namespace vmerge::api
