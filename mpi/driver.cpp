#include "driver.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <unistd.h>

#include "check_commands.h"
#include "collective_step.h"
#include "core/error.h"
#include "core/stopwatch.h"
#include "exec/copy_executor.h"
#include "hdf5_commands.h"
#include "io/output_path_check.h"
#include "io/record_crc.h"
#include "merge_inputs.h"
#include "output/output_folder.h"
#include "output/target_guard.h"
#include "output/write_journal.h"
#include "plan/output_layout.h"
#include "plan/rank_work.h"
#include "rank_resources.h"
#include "formats/registry.h"
#include "report/inspect_report.h"
#include "report/merge_summary.h"
#include "report/progress_monitor.h"

namespace vmerge {
namespace {

// Plan: the output files and every rank's rows, the same on every rank.
struct MergePlan {
    OutputLayout layout;
    std::vector<std::vector<WriteTask>> work;
    double seconds = 0;
};

MergePlan plan_merge(const std::vector<OutputTensor>& tensors, const Options& o, int ranks) {
    const auto start = Clock::now();
    MergePlan plan;
    plan.layout = plan_output_layout(tensors, o.max_shard_size);
    plan.work = plan_rank_work(tensors, plan.layout, ranks);
    plan.seconds = seconds_since(start);
    return plan;
}

// ---- inspect ---------------------------------------------------------------------------

InspectReport inspect_report(const Options& o, const MergeInputs& in, const MergePlan& plan, int ranks, uint64_t budget) {
    InspectReport r;
    r.facts = in.mapped.facts;
    r.backend = in.checkpoint.backend;
    r.description = in.checkpoint.description;
    r.local_dir = o.local_dir;
    r.hf_config = in.config.dir;
    r.architecture = in.config.architectures.empty() ? "" : in.config.architectures[0];
    // The backend's own facts: FSDP's DTensor shardings, Megatron's parallelism line.
    const InspectFacts facts = inspect_facts(in.checkpoint, in.scans);
    r.states_parallelism = facts.parallelism_line;
    r.scanned_archives = in.checkpoint.jobs.size();
    r.notes = in.mapped.notes;
    r.source_entries_written = in.mapped.account.written;
    r.dropped = dropped_json(in.mapped.account);
    if (!facts.shardings.is_null()) {
        r.lists_shardings = true;
        for (auto it = facts.shardings.begin(); it != facts.shardings.end(); ++it)
            r.shardings.emplace_back(it.key(), it->get<std::vector<std::string>>());
    }
    r.ranks = ranks;
    add_tensors_and_plan(r, in.mapping().tensors, plan.layout, plan.work);
    r.max_memory = budget;
    r.max_memory_automatic = o.max_memory == 0;
    if (in.quantize)
        r.quantization = InspectReport::Quantization{in.quantize->bits, in.quantize->group_size, in.quantize->symmetric,
                                                     in.quantization.bytes_before, in.quantization.bytes_after,
                                                     in.quantization.ignored_modules};
    if (in.lora.found)
        r.lora = InspectReport::Lora{o.merge_lora, in.lora.modules, in.lora.ranks, in.lora.alpha, in.lora.alpha_source};
    r.plan_seconds = plan.seconds;
    return r;
}

int run_inspect(const Options& o, Comm& comm, std::ostream& out) {
    if (is_archive_backend(o.backend)) return inspect_hdf5_archive(o, comm, out);
    const auto start = Clock::now();
    const MergeInputs in = o.simulate.empty() ? load_inputs(o, comm) : simulate_inputs(o, comm);
    if (comm.rank() != 0) return 0;
    const int ranks = o.np > 0 ? o.np : comm.size();
    const uint64_t budget = max_memory(o, comm);
    InspectReport report = inspect_report(o, in, plan_merge(in.mapping().tensors, o, ranks), ranks, budget);
    report.total_seconds = seconds_since(start);
    if (o.json) out << inspect_json(report).dump(2) << "\n";
    else print_inspect_text(report, out);
    return 0;
}

// ---- merge -----------------------------------------------------------------------------

// Rank 0, before anything is written: the target may be written (target_guard.h), and no other
// merge writes it while `lock` is held.
void guard_target(const Options& o, Comm& comm, const std::vector<InputFolder>& inputs, std::optional<TargetLock>& lock) {
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        check_target(o.target_dir, o.force, inputs);
        lock.emplace(o.target_dir);
    });
}

// What executing and committing the safetensors output gave this rank.
struct WriteOutcome {
    bool resumed = false;
    CopyStats stats;
    double copy_seconds = 0, commit_seconds = 0;
};

// Rank 0: a fresh staging folder, or the interrupted one --resume continues.
bool open_staging(const Options& o, Comm& comm, const MergeInputs& in, const OutputLayout& layout, uint64_t budget,
                  std::ostream& out) {
    bool resumed = false;
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        const StagingState state = prepare_staging(o.target_dir, o.force, o.resume, layout,
                                                   merge_identity(in, layout, comm, budget), input_folders(o, in));
        resumed = state.resumed;
        if (!state.note.empty() && !o.quiet) out << "vmerge: " << state.note << "\n";
    });
    return resumed;
}

// Execute: every rank copies its rows into the staging folder (skipping, with --resume, the
// blocks an earlier run wrote); the CRC-32 partials and any mismatch come back for the check.
CopyStats copy_rows(const Options& o, Comm& comm, const MergeInputs& in, const MergePlan& plan, uint64_t budget,
                    std::string& crc_partials, std::string& crc_mismatch, std::ostream& out, std::ostream& err) {
    const std::string staging = staging_path(o.target_dir);
    const auto& tensors = in.mapping().tensors;
    CopyStats stats;
    std::unique_ptr<ProgressMonitor> progress;
    const bool terminal = ::isatty(STDOUT_FILENO) != 0;
    if (comm.rank() == 0 && !o.quiet && o.progress != 0)
        progress = std::make_unique<ProgressMonitor>(staging, plan.layout.total_size, comm.size(),
                                                     o.progress > 0 ? o.progress : (terminal ? 1 : 30),
                                                     terminal && o.progress < 0, out);
    collective_step(comm, [&] {
        std::map<BlockKey, WrittenBlock> done;
        if (o.resume) done = blocks_by_key(read_journals(staging));
        JournalWriter journal(staging, comm.rank());
        OutputWriter writer(staging, tensors, plan.layout, &journal);
        CopyExecutor executor(in.mapping(), budget, in.quantize ? &*in.quantize : nullptr, compute_threads(comm));
        executor.defer_crc_mismatches();
        const int delay = block_delay_ms();
        try {
            executor.run(
                plan.work[comm.rank()],
                [&](size_t t, int64_t row, int64_t row_end, const unsigned char* data, size_t size) {
                    writer.write(t, row, row_end, data, size);
                    if (delay) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
                },
                [&](size_t t, int64_t row, int64_t row_end) {
                    auto it = done.find({t, row, row_end});
                    return it != done.end() && writer.holds(it->second);
                });
            writer.finish();
            mark_rank_done(staging, comm.rank());
        } catch (const std::exception& e) {
            // The staging folder stays for --resume.
            abort_all_ranks(comm, err, e.what(), staging);
            throw;
        }
        stats = executor.stats();
        crc_partials = executor.crcs().partial_records();
        crc_mismatch = executor.crcs().mismatch();
    }, staging);
    return stats;
}

// Every rank's CRC mismatch, and records split over ranks, are checked here, before the
// commit; output staged from damaged bytes is not worth a --resume, so it is discarded.
void check_record_crcs(const Options& o, Comm& comm, const std::string& crc_partials, const std::string& crc_mismatch,
                       std::ostream& out) {
    const auto crc_pieces = comm.allgather(crc_partials);
    try {
        collective_step(comm, [&] {
            if (!crc_mismatch.empty()) throw Error(crc_mismatch);
            const std::string note = comm.rank() ? "" : crc_completion_note(complete_record_crcs(crc_pieces, kCrcGapBudget));
            if (!note.empty() && !o.quiet) out << "vmerge: " << note << "\n";
        });
    } catch (const Error&) {
        if (comm.rank() == 0) discard_staging(o.target_dir);
        throw;
    }
}

// Execute and commit the safetensors folder: staging, every rank's rows, the CRC check, and
// rank 0 moving the finished folder into place.
WriteOutcome write_safetensors_folder(const Options& o, Comm& comm, const MergeInputs& in, const MergePlan& plan,
                                      uint64_t budget, std::ostream& out, std::ostream& err) {
    WriteOutcome w;
    w.resumed = open_staging(o, comm, in, plan.layout, budget, out);
    const auto copy_start = Clock::now();
    std::string crc_partials, crc_mismatch;
    w.stats = copy_rows(o, comm, in, plan, budget, crc_partials, crc_mismatch, out, err);
    check_record_crcs(o, comm, crc_partials, crc_mismatch, out);
    w.copy_seconds = seconds_since(copy_start);
    const auto commit_start = Clock::now();
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        for (const auto& note : commit_staging(o.target_dir, o.force, in.config.dir, in.mapping().tensors, plan.layout,
                                               generated_files(in)))
            if (!o.quiet) out << "vmerge: " << note << "\n";
    }, staging_path(o.target_dir));
    w.commit_seconds = seconds_since(commit_start);
    return w;
}

// Report: every rank's record to rank 0, which writes --log_json and prints the summary.
void report_merge(const Options& o, Comm& comm, const MergeInputs& in, const MergePlan& plan, const WriteOutcome& w,
                  Clock::time_point start, uint64_t budget, std::ostream& out) {
    const RankMergeRecord mine{comm.rank(), comm.host(), in.scan_seconds, in.map_seconds, plan.seconds,
                               w.copy_seconds, w.commit_seconds, w.stats, peak_rss_bytes()};
    const auto gathered = comm.allgather(rank_record_json(mine).dump());
    if (comm.rank() != 0) return;
    const auto& tensors = in.mapping().tensors;
    MergeSummary s;
    for (const auto& g : gathered) s.per_rank.push_back(nlohmann::ordered_json::parse(g));
    s.wall_seconds = seconds_since(start);
    s.local_dir = o.local_dir;
    s.target_dir = o.target_dir;
    s.ranks = comm.size();
    s.total_bytes = plan.layout.total_size;
    s.files = plan.layout.files.size();
    s.max_memory = budget;
    s.tensors = tensors.size();
    s.adapter_tensors = std::count_if(tensors.begin(), tensors.end(), [](const OutputTensor& t) { return t.adapter; });
    s.archives = in.checkpoint.jobs.size();
    s.resumed = w.resumed;
    s.quantize = in.quantize;
    s.quantization = in.quantization;
    if (!o.log_json.empty() && !(std::ofstream(o.log_json) << merge_log_json(s).dump(2) << "\n"))
        throw Error("--log_json " + o.log_json + ": cannot write it");
    if (!o.quiet) print_merge_summary(s, out);
}

// The archive holds one model: an adapter is folded in or not merged at all.
void refuse_hdf5_adapter(const Options& o, const MergeInputs& in) {
    if (o.format == "hdf5" && in.lora.found && !o.merge_lora)
        throw Error(o.local_dir + " holds a LoRA adapter: --format hdf5 writes no lora_adapter/ folder; pass "
                                  "--merge_lora to fold it into the archived weights, or merge to safetensors");
}

// discover -> scan -> map (load_inputs), then plan -> execute -> commit, then the report.
int run_merge(const Options& o, Comm& comm, std::ostream& out, std::ostream& err) {
    const uint64_t budget = max_memory(o, comm);
    collective_step(comm, [&] {
        if (comm.rank() == 0 && !o.log_json.empty()) require_writable_output_file(o.log_json, "--log_json");
    });
    std::optional<TargetLock> lock;  // rank 0 holds it until the merge ends, however it ends
    if (is_archive_backend(o.backend)) {
        guard_target(o, comm, {{o.local_dir, "the archive folder (--local_dir)"}}, lock);
        return convert_hdf5_archive(o, comm, budget, out);
    }
    const auto start = Clock::now();
    MergeInputs in = load_inputs(o, comm);
    guard_target(o, comm, input_folders(o, in), lock);
    refuse_hdf5_adapter(o, in);
    if (comm.rank() == 0 && !o.quiet)
        for (const auto& note : in.mapped.notes) out << "vmerge: " << note << "\n";
    if (o.format == "hdf5") {
        const auto generated = generated_files(in);
        return write_hdf5_archive(o, comm, std::move(in.mapped.mapping), in.config.dir, generated, budget,
                                  compute_threads(comm), out, err);
    }
    const MergePlan plan = plan_merge(in.mapping().tensors, o, comm.size());
    const WriteOutcome written = write_safetensors_folder(o, comm, in, plan, budget, out, err);
    report_merge(o, comm, in, plan, written, start, budget, out);
    return 0;
}

}  // namespace

int run_command(const Options& o, Comm& comm, std::ostream& out, std::ostream& err) {
    try {
        if (o.command == "inspect") return run_inspect(o, comm, out);
        if (o.command == "merge") return run_merge(o, comm, out, err);
        if (o.command == "test") return run_test(o, comm, out);
        if (o.command == "verify") return run_verify(o, comm, out);
        throw Error("unknown command " + o.command);
    } catch (const std::exception& e) {
        if (comm.rank() == 0) err << "vmerge-mpi: error: " << e.what() << "\n";
        return 1;
    }
}

}  // namespace vmerge
