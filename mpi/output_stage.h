#pragma once
#include <functional>
#include <ostream>
#include <vector>

#include "command_line.h"
#include "comm.h"
#include "exec/copy_executor.h"
#include "mapping/quantization.h"
#include "output/output_format.h"

namespace vmerge {

// The output options every format gets from the command line (hf_dir, generated and
// resumable are the caller's).
OutputOptions output_options(const Options& o, const Comm& comm, uint64_t max_memory);

// What the write stage needs besides the format: how the executor reads and computes, and what
// identifies the merge for --resume.
struct OutputRun {
    const QuantizeSpec* quantize = nullptr;
    int threads = 1;
    SourceOpener sources;  // empty: files read with pread
    std::function<ResumeIdentity(const OutputLayout&)> identity;
    std::vector<InputFolder> inputs;
    // A library call's progress (CallHooks::progress): this rank's bytes written, of the total;
    // false cancels the copy. Empty for the command.
    std::function<bool(uint64_t done, uint64_t total)> progress;
    int progress_interval_ms = 100;
};

struct OutputResult {
    double plan_seconds = 0;
    double copy_seconds = 0;
    double commit_seconds = 0;
    bool resumed = false;
    CopyStats stats;
};

// The write stage, the same for every output format: plan, staging (rank 0), the copy
// executor over the format's tasks on every rank, commit (rank 0). `mapping` is the executor's
// (the format may realign its rows).
OutputResult write_output(OutputFormat& output, TensorMapping& mapping, const OutputRun& run, const Options& o,
                          Comm& comm, std::ostream& out, std::ostream& err);

}  // namespace vmerge
