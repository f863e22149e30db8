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
#include "exit_code.h"
#include "collective_step.h"
#include "map_command.h"
#include "watch_command.h"
#include "core/error.h"
#include "output/registry.h"
#include "output_stage.h"
#include "core/resident_memory.h"
#include "core/stopwatch.h"
#include "exec/copy_executor.h"
#include "hf_upload.h"
#include "io/json_file.h"
#include "io/output_path_check.h"
#include "io/record_crc.h"
#include "merge_inputs.h"
#include "routed_exchange_model.h"
#include "output/output_folder.h"
#include "io/object_url.h"
#include "output/target_guard.h"
#include "output/write_journal.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/output_layout.h"
#include "plan/rank_inputs.h"
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
    plan.layout = plan_safetensors_layout(tensors, o.output.max_shard_size);
    plan.work = plan_rank_work(tensors, plan.layout, ranks);
    plan.seconds = seconds_since(start);
    return plan;
}

// ---- inspect ---------------------------------------------------------------------------

InspectReport inspect_report(const Options& o, const MergeInputs& in, const MergePlan& plan, int ranks, uint64_t budget,
                             const Comm& comm) {
    InspectReport r;
    r.facts = in.mapped.facts;
    r.backend = in.checkpoint.backend;
    r.description = in.checkpoint.description;
    r.local_dir = o.local_dir;
    r.resolved = in.checkpoint.resolved;
    r.hf_config = in.config.dir;
    r.architecture = in.config.architectures.empty() ? "" : in.config.architectures[0];
    // The backend's own facts: FSDP's DTensor shardings, Megatron's parallelism line.
    const InspectFacts facts = inspect_facts(in.checkpoint, in.scans);
    r.states_parallelism = facts.parallelism_line;
    r.scanned_archives = in.checkpoint.jobs.size();
    r.notes = in.mapped.notes;
    r.source_entries_written = in.mapped.account.written;
    r.dropped = dropped_json(in.mapped.account);
    r.backend_lines = facts.lines;
    r.backend_json_key = facts.json_key;
    r.backend_json = facts.json;
    if (!facts.shardings.is_null()) {
        r.lists_shardings = true;
        for (auto it = facts.shardings.begin(); it != facts.shardings.end(); ++it)
            r.shardings.emplace_back(it.key(), it->get<std::vector<std::string>>());
    }
    r.ranks = ranks;
    add_tensors_and_plan(r, in.mapping().tensors, plan.layout, plan.work);
    r.max_memory = budget;
    r.max_memory_automatic = o.max_memory == 0;
    const PageCacheChoice cache = page_cache_choice(o, comm, in.mapping());
    r.page_cache = page_cache_name(cache.policy);
    r.page_cache_reason = cache.reason;
    if (in.quantize) r.quantization = inspect_quantization(*in.quantize, in.quantization, in.mapping().tensors);
    if (in.lora.found)
        r.lora = InspectReport::Lora{o.merge_lora(), in.lora.modules, in.lora.ranks, in.lora.alpha, in.lora.alpha_source};
    r.plan_seconds = plan.seconds;
    return r;
}

int run_inspect(const Options& o, Comm& comm, std::ostream& out) {
    const auto start = Clock::now();
    const MergeInputs in = o.simulate.empty() ? load_inputs(o, comm) : simulate_inputs(o, comm);
    if (comm.rank() != 0) return 0;
    const int ranks = o.np > 0 ? o.np : comm.size();
    const uint64_t budget = max_memory(o, comm);
    const MergePlan plan = plan_merge(in.mapping().tensors, o, ranks);
    std::optional<ScanExchangeFigures> exchange = in.exchange;
    if (exchange) {  // --simulate: a merging rank's planning ends here
        exchange->plan_seconds = plan.seconds;
        exchange->resident_peak_bytes = resident_peak_bytes();
        for (size_t files : input_files_per_rank(in.mapping(), plan.work)) {
            exchange->input_files_max = std::max(exchange->input_files_max, files);
            exchange->rank_file_opens += files;
        }
        exchange->input_files_mean = static_cast<double>(exchange->rank_file_opens) / ranks;
    }
    InspectReport report = inspect_report(o, in, plan, ranks, budget, comm);
    report.exchange = exchange;
    if (!o.simulate.empty()) {
        report.simulated_planning = in.planning;
        report.simulated_planning_note = in.planning_note;
        report.routed_planning = in.routed_planning;
    }
    if (in.rank_messages) report.routed = model_routed_exchange(*in.rank_messages, in.mapping(), plan.work);
    report.total_seconds = seconds_since(start);
    if (o.hooks) o.hooks->result = inspect_json(report);
    if (o.json) out << inspect_json(report).dump(2) << "\n";
    else print_inspect_text(report, out);
    return 0;
}

// ---- merge -----------------------------------------------------------------------------

// Rank 0, before anything is written: the target may be written (target_guard.h), and no other
// merge writes it while `lock` is held.
void guard_target(const Options& o, Comm& comm, const std::vector<InputFolder>& inputs, std::optional<TargetLock>& lock) {
    collective_step(comm, "check target", [&] {
        // A bucket's prefix is checked by its output format (output/s3/bucket_output.h).
        if (comm.rank() != 0 || is_object_url(o.output.target)) return;
        check_target(o.output.target, o.output.force, inputs);
        lock.emplace(o.output.target);
    });
}


// Report: every rank's record to rank 0, which writes --log_json and prints the summary.
void report_merge(const Options& o, Comm& comm, const MergeInputs& in, const OutputLayout& layout,
                  const OutputResult& w, Clock::time_point start, uint64_t budget, std::ostream& out) {
    const RankMergeRecord mine{comm.rank(), comm.host(), in.scan_seconds, in.map_seconds, w.plan_seconds,
                               w.copy_seconds, w.commit_seconds, w.stats, peak_rss_bytes(), in.planning,
                               in.planning_note, in.entries_received};
    const auto gathered = comm.allgather(rank_record_json(mine).dump());
    if (comm.rank() != 0) return;
    const auto& tensors = in.mapping().tensors;
    MergeSummary s;
    for (const auto& g : gathered) s.per_rank.push_back(nlohmann::ordered_json::parse(g));
    s.wall_seconds = seconds_since(start);
    s.local_dir = o.local_dir;
    s.target_dir = o.output.target;
    s.ranks = comm.size();
    s.total_bytes = layout.total_size;
    s.files = layout.files.size();
    s.max_memory = budget;
    s.tensors = tensors.size();
    s.adapter_tensors = std::count_if(tensors.begin(), tensors.end(), [](const OutputTensor& t) { return t.adapter; });
    s.archives = in.checkpoint.jobs.size();
    if (written_as_stored(in.checkpoint)) s.converted_from = in.checkpoint.description;
    s.resumed = w.resumed;
    s.quantize = in.quantize;
    s.quantization = in.quantization;
    if (o.hooks) o.hooks->result = merge_log_json(s);
    if (!o.log_json.empty() && !(std::ofstream(o.log_json) << merge_log_json(s).dump(2) << "\n"))
        throw Error("--log_json " + o.log_json + ": cannot write it");
    if (!o.quiet) print_merge_summary(s, out);
}

// What the merge gives its output format: the command line's options, the HF folder to copy
// and the files the merge writes itself (config.json, adapter_config.json). A checkpoint written
// as stored (an archive) brings its own HF files, and is converted whole again rather than resumed.
OutputOptions merge_output_options(const Options& o, const Comm& comm, const MergeInputs& in, uint64_t budget) {
    OutputOptions options = output_options(o, comm, budget);
    options.page_cache = page_cache_choice(o, comm, in.mapping()).policy;
    options.generated = generated_files(in);
    if (written_as_stored(in.checkpoint)) {
        options.resume = false;
        return options;
    }
    options.resumable = true;
    options.hf_dir = in.config.dir;
    if (in.config.dir == in.checkpoint.default_hf_dir) options.hf_training_files = in.checkpoint.training_files;
    return options;
}

// discover -> scan -> map (load_inputs), then plan -> execute -> commit, then the report.
int run_merge(const Options& o, Comm& comm, std::ostream& out, std::ostream& err) {
    const uint64_t budget = max_memory(o, comm);
    collective_step(comm, "check --log_json", [&] {
        if (comm.rank() == 0 && !o.log_json.empty()) require_writable_output_file(o.log_json, "--log_json");
    });
    std::optional<TargetLock> lock;  // rank 0 holds it until the merge ends, however it ends
    std::string hf_cli;  // --hf_upload_path: found before anything is read
    collective_step(comm, "find the hf CLI", [&] {
        if (comm.rank() == 0 && !o.hf_upload_path.empty()) hf_cli = require_hf_cli(o.hf_upload_path);
    });
    const auto upload = [&] {
        collective_step(comm, "upload", [&] {
            if (comm.rank() == 0 && !hf_cli.empty())
                upload_merged_folder(hf_cli, o.hf_upload_path, o.output.target, o.hf_upload_private, out);
        });
    };
    const auto start = Clock::now();
    MergeInputs in = load_inputs(o, comm);
    guard_target(o, comm, input_folders(o, in), lock);
    const auto output = make_output_format(o.format, merge_output_options(o, comm, in, budget));
    output->check_adapter(o.local_dir, in.lora.found && !o.merge_lora());
    if (comm.rank() == 0 && !o.quiet) {
        for (const auto& step : in.checkpoint.resolved) out << "vmerge: resolved " << step << "\n";
        for (const auto& note : in.mapped.notes) out << "vmerge: " << note << "\n";
    }
    const auto write_start = Clock::now();
    OutputRun run;
    run.quantize = in.quantize ? &*in.quantize : nullptr;
    run.threads = compute_threads(comm);
    run.sources = source_opener(in.checkpoint);  // empty: the checkpoint's files, read with pread
    run.identity = [&](const OutputLayout& planned) { return merge_identity(in, planned, comm, budget); };
    run.inputs = input_folders(o, in);
    if (o.hooks) run.progress = o.hooks->progress, run.progress_interval_ms = o.hooks->interval_ms;
    const OutputResult written = write_output(*output, in.mapped.mapping, run, o, comm, out, err);
    if (output->has_summary()) {  // a format that reports itself (the archive)
        if (comm.rank() == 0 && !o.quiet)
            for (const auto& line : output->summary(seconds_since(write_start), written.copy_seconds)) out << line << "\n";
        return 0;
    }
    report_merge(o, comm, in, output->layout(), written, start, budget, out);
    upload();
    return 0;
}

}  // namespace

int run_command(const Options& o, Comm& comm, std::ostream& out, std::ostream& err) {
    try {
        if (o.command == "inspect") return o.suggest_table ? run_suggest_table(o, comm, out) : run_inspect(o, comm, out);
        if (o.command == "merge") return run_merge(o, comm, out, err);
        if (o.command == "test") return run_test(o, comm, out);
        if (o.command == "verify") return run_verify(o, comm, out);
        if (o.command == "map") return run_map(o, comm, out);
        if (o.command == "watch")
            return run_watch(o, comm, out, err, [&](const Options& step) {
                if (run_merge(step, comm, out, err) != kExitSuccess) throw Error("the merge failed");
            });
        throw Error("unknown command " + o.command);
    } catch (const nlohmann::json::exception& e) {
        // A JSON value no reader wrapped in interpret_json: still its place, never the bare code.
        if (comm.rank() == 0) err << "vmerge-mpi: error: unexpected JSON in an input file: " << json_error_text(e) << "\n";
        return 1;
    } catch (const std::exception& e) {
        if (comm.rank() == 0) err << "vmerge-mpi: error: " << e.what() << "\n";
        return kExitFailure;
    }
}

}  // namespace vmerge
