#include "output_stage.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include <unistd.h>

#include "call_hooks.h"
#include "collective_step.h"
#include "core/error.h"
#include "core/stopwatch.h"
#include "exec/finite_weights.h"
#include "input_agreement.h"
#include "io/free_space.h"
#include "io/record_crc.h"
#include "output/output_folder.h"
#include "output/target_guard.h"
#include "report/progress_monitor.h"

namespace vmerge {
namespace {

// This rank's share: the executor over the format's tasks, into the format's sink. `debug`: the
// tests' pause after each block (so they can kill a rank while it writes), the benchmarks' CRC off.
// A library call's progress (OutputRun::progress) over this rank's writes: the callback at most
// every `interval_ms` and once at the end; its false cancels the copy with an Error, which fails
// the merge as an interrupted one does (the staging folder kept for --resume).
class CallProgress {
public:
    CallProgress(std::function<bool(uint64_t, uint64_t)> callback, uint64_t total, int interval_ms)
        : callback_(std::move(callback)), total_(total), interval_(std::chrono::milliseconds(interval_ms)) {}
    void written(uint64_t bytes) {
        done_ += bytes;
        if (!callback_) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_ < interval_) return;
        last_ = now;
        report();
    }
    void finished() {
        if (callback_) report();
    }

private:
    void report() {
        if (!callback_(done_, total_)) throw Error(kCancelledMessage);
    }
    std::function<bool(uint64_t, uint64_t)> callback_;
    uint64_t total_;
    uint64_t done_ = 0;
    std::chrono::steady_clock::duration interval_;
    std::chrono::steady_clock::time_point last_{};
};

void copy_rank_share(OutputFormat& output, const TensorMapping& mapping, const OutputRun& run, const DebugKnobs& debug,
                     Comm& comm, std::ostream& err, OutputResult& result, std::string& crc_partials,
                     std::string& not_resumable) {
    const std::string staging = staging_path(output.options().target);
    const bool resumable = output.options().resumable;
    // A resumable output opens outside the failure handling below: a staging folder it cannot
    // open is left as it is, and reported by every rank together.
    if (resumable) output.open();
    try {
        if (!resumable) output.open();
        CopyExecutor executor(mapping, output.executor_memory(), run.quantize, run.threads);
        if (run.sources) executor.read_sources_with(run.sources);
        if (resumable) executor.defer_crc_mismatches();
        executor.evict_reads(output.options().page_cache == PageCachePolicy::Evict);
        executor.hash_blocks(output.takes_block_hashes());
        executor.skip_crc(debug.skip_crc);
        const int delay = debug.block_delay_ms;
        CallProgress progress(run.progress, output.layout().total_size, run.progress_interval_ms);
        executor.run(
            output.tasks(),
            [&](const RowBlock& b) {
                output.write(b);
                progress.written(b.size);
                if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
            },
            [&](size_t t, int64_t row, int64_t row_end) { return output.holds(t, row, row_end); },
            [&](const WriteTask& task) { output.task_done(task); });
        progress.finished();
        output.finish();
        if (resumable) mark_rank_done(staging, comm.rank());
        result.stats = executor.stats();
        crc_partials = executor.crcs().partial_records();
        not_resumable = executor.crcs().mismatch();
    } catch (const InputValueError& e) {
        // A refused value (a NaN weight to quantize or fold) fails a --resume alike: like a CRC
        // mismatch it is reported after the copy, by every rank together, and the staging folder
        // discarded; the other ranks finish their shares first, nobody is killed (no lock left).
        if (!resumable || output.collective()) {
            if (output.collective()) abort_all_ranks(comm, err, e.what(), "");
            output.abandon();
            throw;
        }
        output.abandon();
        not_resumable = e.what();
    } catch (const std::exception& e) {
        // The others may wait in a collective call this rank will never join, or copy on for
        // nothing; a resumable staging folder stays for --resume.
        if (resumable || output.collective()) abort_all_ranks(comm, err, e.what(), resumable ? staging : "");
        output.abandon();
        throw;
    }
}

// Rank 0, before the staging folder is made or taken up: the planned bytes, less what an
// earlier staging folder holds on disk (resumed, or discarded to make room), must fit the file
// system it goes on, or nothing is written. `pretend_free` (a test's): stands in for what the file
// system reports.
void refuse_if_no_room(const std::string& staging, uint64_t planned, std::optional<uint64_t> pretend_free) {
    std::optional<uint64_t> free = free_bytes(nearest_existing_folder(staging));
    if (pretend_free) free = pretend_free;
    if (!free) return;
    const std::string shortfall = free_space_shortfall(staging, planned, allocated_bytes_under(staging), *free);
    if (!shortfall.empty()) throw Error(shortfall);
}

}  // namespace

OutputOptions output_options(const Options& o, const Comm& comm, uint64_t max_memory) {
    OutputOptions options = o.output;
    options.max_memory = max_memory;
    options.rank = comm.rank();
    options.ranks = comm.size();
    options.parallel = comm.parallel_context();
    options.upload_part_size = o.debug.s3_part_size;
    return options;
}

OutputResult write_output(OutputFormat& output, TensorMapping& mapping, const OutputRun& run, const Options& o,
                          Comm& comm, std::ostream& out, std::ostream& err) {
    OutputResult result;
    const std::string staging = staging_path(o.output.target);
    const std::string hint = output.options().resumable ? staging : "";
    const auto plan_start = Clock::now();
    collective_step(comm, "plan", [&] {
        output.check(mapping);
        output.plan(mapping);
        check_blocks_fit(mapping, output.options().max_memory, run.quantize != nullptr);
    });
    const OutputLayout& layout = output.layout();
    if (!run.sources) check_input_files(mapping, output.tasks(), comm);  // (a test's bytes are no files)
    result.plan_seconds = seconds_since(plan_start);
    collective_step(comm, "prepare staging", [&] {
        if (comm.rank() != 0) return;
        if (output.options().check_free_space) refuse_if_no_room(staging, layout.total_size, o.debug.free_bytes);
        const StagingState state = output.prepare(run.identity(layout), run.inputs);
        if (output.options().resumable)
            say_on_interrupt("\nvmerge-mpi: interrupted; the unfinished output is kept in " + staging +
                             "; rerun the same command with --resume to continue it\n");
        result.resumed = state.resumed;
        if (!state.note.empty() && !o.quiet) out << "vmerge: " << state.note << "\n";
    });
    collective_step(comm, "gather files", [&] {
        const auto notes = output.gather_files();
        if (comm.rank() == 0 && !o.quiet)
            for (const auto& note : notes) out << "vmerge: " << note << "\n";
    });
    const OutputExchange exchange{[&](const std::string& mine) { return comm.allgather(mine); },
                                  [&](std::vector<std::string> outgoing) { return comm.alltoall(std::move(outgoing)); }};
    collective_step(comm, "share the prepared output", [&] { output.share_prepared(exchange); });
    std::string crc_partials, not_resumable;  // a CRC mismatch or a refused input value
    const auto copy_start = Clock::now();
    {
        std::unique_ptr<ProgressMonitor> progress;
        const bool terminal = ::isatty(STDOUT_FILENO) != 0;
        if (output.options().resumable && comm.rank() == 0 && !o.quiet && o.progress != 0)
            progress = std::make_unique<ProgressMonitor>(staging, layout.total_size, comm.size(),
                                                         o.progress > 0 ? o.progress : (terminal ? 1 : 30),
                                                         terminal && o.progress < 0, out);
        collective_step(
            comm, "copy",
            [&] { copy_rank_share(output, mapping, run, o.debug, comm, err, result, crc_partials, not_resumable); },
            hint);
    }
    if (output.options().resumable) {
        // Every rank's CRC mismatch or refused value, and records split over ranks, are checked
        // here, before the commit; output staged from damaged bytes or refused values is not worth
        // a --resume, so it is discarded.
        const auto crc_pieces = comm.allgather(crc_partials);
        const auto refusals = comm.allgather(not_resumable);
        const bool refused = std::any_of(refusals.begin(), refusals.end(), [](const auto& r) { return !r.empty(); });
        try {
            collective_step(comm, "copy check", [&] {
                if (!not_resumable.empty()) throw Error(not_resumable);
                if (refused) return;  // a rank that stopped early left its records' CRCs unfinished
                const std::string note =
                    comm.rank() ? "" : crc_completion_note(complete_record_crcs(crc_pieces, kCrcGapBudget));
                if (!note.empty() && !o.quiet) out << "vmerge: " << note << "\n";
            });
        } catch (const Error&) {
            if (comm.rank() == 0) {
                say_on_interrupt("");
                discard_staging(o.output.target);
            }
            throw;
        }
    }
    for (int round = 0; round < output.exchange_rounds(); ++round)
        collective_step(comm, "exchange between ranks", [&] { output.exchange(round, exchange); }, hint);
    if (!output.options().reuse.empty()) {
        // Which files any rank found changed decides what each fills in and what is linked.
        const auto states = comm.allgather(output.reuse_state());
        collective_step(comm, "reuse", [&] {
            const auto notes = output.complete_reuse(states);
            if (comm.rank() == 0 && !o.quiet)
                for (const auto& note : notes) out << "vmerge: " << note << "\n";
        }, hint);
    }
    result.copy_seconds = seconds_since(copy_start);
    const auto commit_start = Clock::now();
    collective_step(comm, "commit", [&] {
        if (comm.rank() != 0) return;
        say_on_interrupt("");  // from here on the staging folder becomes the output
        for (const auto& note : output.commit())
            if (!o.quiet) out << "vmerge: " << note << "\n";
    }, hint);
    result.commit_seconds = seconds_since(commit_start);
    return result;
}

}  // namespace vmerge
