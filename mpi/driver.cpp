#include "driver.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "collective_step.h"
#include "hdf5_commands.h"
#include "output_stage.h"
#include "exec/copy_executor.h"
#include "io/record_crc.h"
#include "exec/dtype_cast.h"
#include "core/error.h"
#include "formats/checkpoint.h"
#include "mapping/hf_config.h"
#include "core/human_units.h"
#include "io/input_file.h"
#include "mapping/lora_adapter.h"
#include "mapping/output_config.h"
#include "output/output_folder.h"
#include "output/registry.h"
#include "io/output_path_check.h"
#include "core/bounded_number.h"
#include "plan/output_layout.h"
#include "mapping/output_rules.h"
#include "report/progress_monitor.h"
#include "mapping/quantization.h"
#include "plan/rank_work.h"
#include "exec/reference_compare.h"
#include "safetensors/safetensors_file.h"
#include "torch/scan_serialization.h"
#include "formats/simulated/simulated_checkpoint.h"
#include "core/stopwatch.h"
#include "output/target_guard.h"
#include "io/checksum.h"
#include "exec/tied_embedding.h"
#include "torch/torch_pickle.h"
#include "output/write_journal.h"

namespace vmerge {
namespace {

struct MergeInputs {
    double scan_seconds = 0;
    double map_seconds = 0;
    DetectedCheckpoint checkpoint;
    std::vector<ScannedFile> scans;
    HfConfig config;
    MappedCheckpoint mapped;
    std::optional<QuantizeSpec> quantize;
    QuantizationPlan quantization;
    OutputConfig output_config;
    LoraResult lora;
    const TensorMapping& mapping() const { return mapped.mapping; }
};

std::optional<QuantizeSpec> quantize_spec(const Options& o) {
    if (!o.quantize) return std::nullopt;
    QuantizeSpec spec;
    spec.bits = o.bits;
    spec.group_size = o.group_size;
    spec.symmetric = !o.asymmetric;
    spec.ignore = o.quantize_ignore;
    spec.allow_unsupported = o.allow_unsupported_quantization;
    return spec;
}

// Quantization, then the config.json that states what was written (output_config.h).
void plan_quantized_output(MergeInputs& in, const Options& o) {
    in.quantize = quantize_spec(o);
    if (in.quantize) in.quantization = plan_quantization(in.mapped.mapping, *in.quantize);
    for (const auto& note : in.quantization.notes) in.mapped.notes.push_back(note);
    in.output_config = plan_output_config(
        in.config, in.mapped.mapping, o.tie_word_embedding,
        in.quantize ? quantization_config(*in.quantize, in.quantization.ignored_modules) : nlohmann::ordered_json());
    for (const auto& note : in.output_config.notes) in.mapped.notes.push_back(note);
}

// Files rank 0 writes at commit: config.json when the merge changed what it states, an
// extracted adapter's adapter_config.json.
std::map<std::string, std::string> generated_files(const MergeInputs& in) {
    std::map<std::string, std::string> files;
    if (in.output_config.text) files["config.json"] = *in.output_config.text;
    if (!in.lora.adapter_config.is_null())
        files[std::string(kAdapterFolder) + "/adapter_config.json"] = in.lora.adapter_config.dump(2) + "\n";
    return files;
}

// A LoRA merge with another alpha writes other bytes into the same layout: --resume must
// not mix the two.
std::string lora_fingerprint(const TensorMapping& mapping) {
    std::ostringstream out;
    out << std::hexfloat;
    for (const auto& d : mapping.lora_deltas) out << d.scale << ";";
    return out.str();
}

void apply_lora_choice(MergeInputs& in, const Options& o) {
    LoraOptions lora;
    lora.mode = o.merge_lora ? LoraMode::Merge : LoraMode::Extract;
    lora.alpha = o.lora_alpha;
    if (o.use_rslora) lora.use_rslora = true;
    lora.checkpoint_dir = o.local_dir;
    lora.task_type = o.is_value_model ? "TOKEN_CLS" : "CAUSAL_LM";
    // The extracted adapter sits inside the folder that holds its base model.
    if (!o.target_dir.empty()) lora.base_model_name_or_path = std::filesystem::absolute(o.target_dir).lexically_normal().string();
    in.lora = apply_lora(in.mapped.mapping, lora, o.local_dir);
    for (const auto& note : in.lora.notes) in.mapped.notes.push_back(note);
}

// The folders a merge reads: its target must be none of them, inside none and around none.
std::vector<InputFolder> input_folders(const Options& o, const MergeInputs& in) {
    return {{o.local_dir, "the checkpoint (--local_dir)"},
            {in.checkpoint.weights_dir, "the checkpoint's weights folder"},
            {in.config.dir, "the config folder (--hf_config)"},
            {o.lora_base, "the LoRA base model (--lora_base)"}};
}

// What --resume must find unchanged: the plan, the split, the values' recipe and the inputs.
ResumeIdentity merge_identity(const MergeInputs& in, const OutputLayout& layout, const Comm& comm, uint64_t budget) {
    ResumeIdentity id = resume_identity(layout, comm.size(), budget, lora_fingerprint(in.mapping()));
    std::vector<std::string> paths;
    for (const auto& job : in.checkpoint.jobs) paths.push_back(job.path);
    if (!in.config.dir.empty()) paths.push_back(in.config.dir + "/config.json");
    id.inputs = stamp_inputs(paths);
    const std::string scans = serialize_scans(in.scans);
    id.scans = hex64(xxh64(scans.data(), scans.size()));
    return id;
}

uint64_t max_memory(const Options& o, const Comm& comm);

MergeInputs load_inputs(const Options& o, Comm& comm) {
    MergeInputs in;
    collective_step(comm, [&] { in.checkpoint = detect_checkpoint(o.local_dir, o.backend, o.iteration); });
    // Scan: rank r parses archives r, r+P, r+2P, ... and everyone receives every scan.
    const auto& jobs = in.checkpoint.jobs;
    std::vector<ScannedFile> mine;
    const auto scan_start = Clock::now();
    collective_step(comm, [&] {
        for (size_t i = comm.rank(); i < jobs.size(); i += comm.size()) {
            const InputFile file(jobs[i].path);
            mine.push_back(scan_torch_archive(file, jobs[i].base, jobs[i].length));
        }
    });
    in.scan_seconds = seconds_since(scan_start);
    const auto gathered = comm.allgather(serialize_scans(mine));
    in.scans.resize(jobs.size());
    for (int r = 0; r < comm.size(); ++r) {
        auto list = deserialize_scans(gathered[r]);
        for (size_t k = 0; k < list.size(); ++k) in.scans[r + k * comm.size()] = std::move(list[k]);
    }
    const auto map_start = Clock::now();
    collective_step(comm, [&] {
        in.config = load_hf_config(o.hf_config.empty() ? in.checkpoint.default_hf_dir : o.hf_config);
        MapOptions options;
        options.is_value_model = o.is_value_model;
        // --tie_word_embedding acts after mapping (check_tied_head, then apply_output_rules), so a
        // Megatron output_layer becomes lm_head.weight and is compared before it may be dropped.
        options.allow_unmapped = o.allow_unmapped;
        options.tp_size = o.tp_size;
        options.lora_base = o.lora_base;
        options.pp_size = o.pp_size;
        in.mapped = map_checkpoint(in.checkpoint, in.scans, in.config, options);
        apply_lora_choice(in, o);
        check_tied_head(in.mapped.mapping, in.config, o.tie_word_embedding, max_memory(o, comm), comm.rank(), comm.size());
        for (auto& note : apply_output_rules(in.mapped.mapping, in.config, parse_dtype_choice(o.dtype),
                                             o.tie_word_embedding))
            in.mapped.notes.push_back(note);
        MapOptions checked = options;
        checked.tie_word_embedding = o.tie_word_embedding;  // the rules above dropped lm_head
        check_output_against_config(in.mapped, in.checkpoint, in.config, checked);
        plan_quantized_output(in, o);
    });
    in.map_seconds = seconds_since(map_start);
    return in;
}

// --max-memory auto: a quarter of the memory this node gives the job (physical RAM, or the
// cgroup limit when lower), shared by the ranks on the node, and at most half of what Slurm
// grants one rank (SLURM_MEM_PER_CPU); within 64 MiB .. 4 GiB (beyond that blocks are large
// enough that I/O, not memory, sets the pace).
uint64_t default_max_memory(const Comm& comm) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    uint64_t ram = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : (8ull << 30);
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    std::string limit;
    if (cgroup >> limit && !limit.empty() && std::isdigit(static_cast<unsigned char>(limit[0])))
        ram = std::min<uint64_t>(ram, parse_int_within(limit, 0, INT64_MAX).value_or(ram));
    uint64_t share = ram / 4 / static_cast<uint64_t>(std::max(1, comm.local_size()));
    if (const char* per_cpu = std::getenv("SLURM_MEM_PER_CPU")) {
        const char* cpus = std::getenv("SLURM_CPUS_PER_TASK");
        // Both bounded (MiB per CPU up to 1 PiB, 4096 CPUs), so the product cannot wrap.
        const uint64_t per_rank = static_cast<uint64_t>(parse_int_within(per_cpu, 0, int64_t{1} << 30).value_or(0)) *
                                  static_cast<uint64_t>(cpus ? parse_int_within(cpus, 1, 4096).value_or(1) : 1) << 20;
        if (per_rank > 0) share = std::min(share, per_rank / 2);
    }
    return std::clamp<uint64_t>(share, 64ull << 20, 4ull << 30);
}

// Threads a rank may use for LoRA products: its share of the node's cores.
int compute_threads(const Comm& comm) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, comm.local_size()));
}

uint64_t max_memory(const Options& o, const Comm& comm) {
    if (o.max_memory) return o.max_memory;
    const uint64_t automatic = default_max_memory(comm);
    return o.low_cpu_mem_usage ? std::min<uint64_t>(automatic, 256ull << 20) : automatic;
}

// inspect --simulate: the mapping a checkpoint of the declared layout would give, from
// config.json alone (cluster-scale planning without the files).
MergeInputs simulate_inputs(const Options& o) {
    MergeInputs in;
    in.config = load_hf_config(o.hf_config);
    in.checkpoint.backend = "simulated";
    in.checkpoint.description = o.simulate + " (no files read)";
    in.mapped.mapping = simulate_checkpoint(in.config, o.simulate, in.mapped.notes);
    in.mapped.facts["backend"] = "simulated";
    in.mapped.facts["layout"] = o.simulate;
    in.mapped.facts["architecture"] = in.config.architectures.empty() ? "" : in.config.architectures[0];
    for (auto& note : apply_output_rules(in.mapped.mapping, in.config, parse_dtype_choice(o.dtype), o.tie_word_embedding))
        in.mapped.notes.push_back(note);
    plan_quantized_output(in, o);
    return in;
}

int run_inspect(const Options& o, Comm& comm, std::ostream& out) {
    if (o.backend == "hdf5") return inspect_hdf5_archive(o, comm, out);
    const auto start = Clock::now();
    MergeInputs in;
    if (o.simulate.empty()) in = load_inputs(o, comm);
    else collective_step(comm, [&] { in = simulate_inputs(o); });
    if (comm.rank() != 0) return 0;
    const int ranks = o.np > 0 ? o.np : comm.size();
    const uint64_t budget = max_memory(o, comm);
    const auto& tensors = in.mapping().tensors;
    const auto plan_start = Clock::now();
    const OutputLayout layout = plan_output_layout(tensors, o.max_shard_size);
    const auto work = plan_rank_work(tensors, layout, ranks);
    const double plan_seconds = seconds_since(plan_start);
    nlohmann::ordered_json j = in.mapped.facts;
    j["local_dir"] = o.local_dir;
    j["hf_config"] = in.config.dir;
    j["scanned_archives"] = in.checkpoint.jobs.size();
    j["notes"] = in.mapped.notes;
    j["source_entries_written"] = in.mapped.account.written;
    j["dropped"] = dropped_json(in.mapped.account);
    // One example per distinct DTensor sharding, so a user sees mesh and placements at a glance.
    nlohmann::ordered_json meshes = nlohmann::ordered_json::object();
    if (in.checkpoint.layout == Layout::Fsdp && !in.scans.empty()) {
        for (const auto& e : in.scans[0].tensors) {
            std::string key = "plain tensor (concatenated on dim 0)";
            if (e.tensor.dtensor) {
                const auto& d = *e.tensor.dtensor;
                key = "mesh " + shape_to_string(d.mesh_shape) + " (";
                for (size_t i = 0; i < d.mesh_dim_names.size(); ++i) key += (i ? "," : "") + d.mesh_dim_names[i];
                key += ") placements (";
                for (size_t i = 0; i < d.placements.size(); ++i) key += (i ? ", " : "") + placement_to_string(d.placements[i]);
                key += ")";
            }
            if (!meshes.contains(key)) meshes[key] = nlohmann::ordered_json::array();
            meshes[key].push_back(e.key);
        }
        j["shardings"] = meshes;
    }
    nlohmann::ordered_json tensor_list = nlohmann::ordered_json::array();
    for (const auto& t : tensors)
        tensor_list.push_back({{"name", t.name}, {"shape", t.shape},
                               {"stored_dtype", std::string(torch_name(t.source_dtype))},
                               {"dtype", std::string(torch_name(t.dtype))}, {"bytes", t.nbytes()},
                               {"pieces", t.copies.size()}});
    j["tensors"] = tensor_list;
    j["total_bytes"] = layout.total_size;
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (const auto& f : layout.files) files.push_back({{"name", f.name}, {"bytes", f.size}, {"tensors", f.tensors.size()}});
    j["output_files"] = files;
    nlohmann::ordered_json plan = nlohmann::ordered_json::array();
    for (int r = 0; r < ranks; ++r) {
        uint64_t bytes = 0;
        for (const auto& task : work[r]) bytes += (task.row_end - task.row_begin) * row_bytes(tensors[task.tensor]);
        plan.push_back({{"rank", r}, {"bytes", bytes}, {"tasks", work[r].size()}});
    }
    uint64_t largest = 0;
    for (const auto& p : plan) largest = std::max(largest, p["bytes"].get<uint64_t>());
    const double mean = static_cast<double>(layout.total_size) / ranks;
    const double imbalance = mean > 0 ? static_cast<double>(largest) / mean - 1.0 : 0.0;
    const double total_seconds = seconds_since(start);
    j["max_memory_per_rank"] = budget;
    if (in.quantize)
        j["quantization"] = {{"bits", in.quantize->bits}, {"group_size", in.quantize->group_size},
                             {"symmetric", in.quantize->symmetric}, {"bytes_before", in.quantization.bytes_before},
                             {"bytes_after", in.quantization.bytes_after}, {"ignored", in.quantization.ignored_modules}};
    if (in.lora.found)
        j["lora"] = {{"mode", o.merge_lora ? "merge" : "extract"}, {"modules", in.lora.modules}, {"ranks", in.lora.ranks},
                     {"alpha", in.lora.alpha}, {"alpha_source", in.lora.alpha_source}};
    j["plan"] = {{"ranks", ranks}, {"largest_rank_bytes", largest}, {"mean_rank_bytes", mean},
                 {"largest_over_mean", imbalance}, {"plan_seconds", plan_seconds}, {"total_seconds", total_seconds},
                 {"per_rank", plan}};
    if (o.json) {
        out << j.dump(2) << "\n";
        return 0;
    }
    out << "backend      " << in.checkpoint.backend << ": " << in.checkpoint.description << "\n";
    if (!o.local_dir.empty()) out << "local_dir    " << o.local_dir << "\n";
    out
        << "hf_config    " << in.config.dir << "\n"
        << "architecture " << (in.config.architectures.empty() ? "?" : in.config.architectures[0]) << "\n";
    if (in.checkpoint.layout == Layout::MegatronLegacy)
        out << "parallelism  tp " << j["tp"] << ", pp " << j["pp"] << ", vpp " << j["vpp"] << ", ep " << j["ep"] << "\n";
    for (const auto& note : in.mapped.notes) out << "note         " << note << "\n";
    for (auto it = meshes.begin(); it != meshes.end(); ++it)
        out << "sharding     " << it.key() << ": " << it->size() << " tensors\n";
    out << "tensors      " << tensors.size() << ", " << human_bytes(layout.total_size) << "\n";
    for (const auto& f : layout.files)
        out << "output       " << f.name << "  " << human_bytes(f.size) << ", " << f.tensors.size() << " tensors\n";
    if (in.quantize)
        out << "quantized    " << in.quantize->bits << " bits: " << human_bytes(in.quantization.bytes_before) << " -> "
            << human_bytes(in.quantization.bytes_after) << " (" << in.quantization.ignored_modules.size()
            << " Linear modules left unquantized)\n";
    if (in.lora.found) {
        out << "lora         " << in.lora.modules << " adapted modules, r";
        for (size_t i = 0; i < in.lora.ranks.size(); ++i) out << (i ? "/" : " ") << in.lora.ranks[i];
        out << ", lora_alpha " << in.lora.alpha << " (" << in.lora.alpha_source << "): "
            << (o.merge_lora ? "folded into the weights (--merge_lora)" : "exported to lora_adapter/ (--merge_lora folds it)")
            << "\n";
    }
    out << "memory       --max-memory " << human_bytes(budget) << " per rank"
        << (o.max_memory ? "" : " (auto: a quarter of this node's memory over its ranks, at most half of Slurm's per-rank memory)")
        << "\n";
    out << "plan for " << ranks << " rank" << (ranks > 1 ? "s" : "") << ": mean " << human_bytes(mean)
        << " per rank, largest " << human_bytes(largest) << " (" << std::fixed << std::setprecision(3)
        << 100.0 * imbalance << "% over the mean); planned in " << std::setprecision(2) << plan_seconds << " s, "
        << total_seconds << " s in all\n";
    // Long plans: the first and last ranks show the pattern.
    for (size_t r = 0; r < plan.size(); ++r) {
        if (plan.size() > 16 && r == 8) out << "  ...\n";
        if (plan.size() > 16 && r >= 8 && r + 8 < plan.size()) continue;
        const auto& p = plan[r];
        out << "  rank " << p["rank"].get<int>() << ": " << human_bytes(p["bytes"].get<uint64_t>()) << " in "
            << p["tasks"].get<size_t>() << " row ranges\n";
    }
    return 0;
}

uint64_t peak_rss_bytes() {
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

// Rank 0, before anything is written: the target may be written (target_guard.h), and no other
// merge writes it while `lock` is held.
void guard_target(const Options& o, Comm& comm, const std::vector<InputFolder>& inputs, std::optional<TargetLock>& lock) {
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        check_target(o.target_dir, o.force, inputs);
        lock.emplace(o.target_dir);
    });
}

int run_merge(const Options& o, Comm& comm, std::ostream& out, std::ostream& err) {
    const uint64_t budget = max_memory(o, comm);
    collective_step(comm, [&] {
        if (comm.rank() == 0 && !o.log_json.empty()) require_writable_output_file(o.log_json, "--log_json");
    });
    std::optional<TargetLock> lock;  // rank 0 holds it until the merge ends, however it ends
    if (o.backend == "hdf5") {
        guard_target(o, comm, {{o.local_dir, "the archive folder (--local_dir)"}}, lock);
        return convert_hdf5_archive(o, comm, budget, out, err);
    }
    const auto start = Clock::now();
    MergeInputs in = load_inputs(o, comm);
    guard_target(o, comm, input_folders(o, in), lock);
    OutputOptions options = output_options(o, comm, budget);
    options.resumable = true;
    options.hf_dir = in.config.dir;
    options.generated = generated_files(in);
    const auto output = make_output_format(o.format, std::move(options));
    output->check_adapter(o.local_dir, in.lora.found && !o.merge_lora);
    if (comm.rank() == 0 && !o.quiet)
        for (const auto& note : in.mapped.notes) out << "vmerge: " << note << "\n";
    const auto write_start = Clock::now();
    OutputRun run;
    run.quantize = in.quantize ? &*in.quantize : nullptr;
    run.threads = compute_threads(comm);
    run.identity = [&](const OutputLayout& planned) { return merge_identity(in, planned, comm, budget); };
    run.inputs = input_folders(o, in);
    const OutputResult written = write_output(*output, in.mapped.mapping, run, o, comm, out, err);
    if (output->has_summary()) {
        if (comm.rank() == 0 && !o.quiet)
            for (const auto& line : output->summary(seconds_since(write_start), written.copy_seconds)) out << line << "\n";
        return 0;
    }
    const auto& tensors = in.mapping().tensors;
    const OutputLayout& layout = output->layout();
    const double plan_seconds = written.plan_seconds, copy_seconds = written.copy_seconds,
                 commit_seconds = written.commit_seconds;
    const bool resumed = written.resumed;
    const CopyStats& stats = written.stats;

    nlohmann::ordered_json mine = {
        {"rank", comm.rank()}, {"host", comm.host()}, {"scan_s", in.scan_seconds}, {"map_s", in.map_seconds},
        {"plan_s", plan_seconds}, {"copy_s", copy_seconds}, {"read_s", stats.read_seconds},
        {"cast_s", stats.cast_seconds}, {"lora_s", stats.lora_seconds}, {"write_s", stats.sink_seconds}, {"crc_s", stats.crc_seconds},
        {"commit_s", commit_seconds},
        {"bytes_read", stats.bytes_read}, {"bytes_written", stats.bytes_written},
        {"bytes_kept_from_earlier_run", stats.bytes_skipped}, {"reads", stats.reads},
        {"peak_rss_bytes", peak_rss_bytes()}};
    if (!stats.quantization_error.empty()) {
        nlohmann::ordered_json errors = nlohmann::ordered_json::object();
        for (const auto& [kind, e] : stats.quantization_error) errors[kind] = {e.sum, e.max, e.count};
        mine["quantization_error"] = errors;
    }
    const auto gathered = comm.allgather(mine.dump());
    if (comm.rank() != 0) return 0;
    std::vector<nlohmann::ordered_json> ranks;
    uint64_t resumed_bytes = 0, rss_min = UINT64_MAX, rss_max = 0;
    for (const auto& g : gathered) {
        ranks.push_back(nlohmann::ordered_json::parse(g));
        resumed_bytes += ranks.back()["bytes_kept_from_earlier_run"].get<uint64_t>();
        rss_min = std::min(rss_min, ranks.back()["peak_rss_bytes"].get<uint64_t>());
        rss_max = std::max(rss_max, ranks.back()["peak_rss_bytes"].get<uint64_t>());
    }
    std::map<std::string, QuantError> quant_errors;
    for (const auto& r : ranks)
        if (r.contains("quantization_error"))
            for (auto it = r["quantization_error"].begin(); it != r["quantization_error"].end(); ++it) {
                QuantError& e = quant_errors[it.key()];
                e.sum += (*it)[0].get<double>();
                e.max = std::max(e.max, (*it)[1].get<double>());
                e.count += (*it)[2].get<uint64_t>();
            }
    const double seconds = seconds_since(start);
    if (!o.log_json.empty()) {
        nlohmann::ordered_json log = {{"command", "merge"},        {"local_dir", o.local_dir},
                                      {"target_dir", o.target_dir}, {"ranks", comm.size()},
                                      {"wall_s", seconds},          {"bytes", layout.total_size},
                                      {"files", layout.files.size()}, {"max_memory", budget},
                                      {"per_rank", ranks}};
        if (!(std::ofstream(o.log_json) << log.dump(2) << "\n")) throw Error("--log_json " + o.log_json + ": cannot write it");
    }
    if (!o.quiet) {
        if (resumed)
            out << "vmerge: resumed: " << human_bytes(resumed_bytes) << " written by the interrupted run were checked and kept, "
                << human_bytes(layout.total_size - resumed_bytes) << " written now\n";
        const size_t adapter_tensors = std::count_if(tensors.begin(), tensors.end(), [](const OutputTensor& t) { return t.adapter; });
        out << "vmerge: merged " << tensors.size() - adapter_tensors << " tensors"
            << (adapter_tensors ? " and " + std::to_string(adapter_tensors) + " adapter tensors" : std::string()) << " ("
            << human_bytes(layout.total_size) << ") from "
            << in.checkpoint.jobs.size() << " archives into " << o.target_dir << " (" << layout.files.size()
            << " file" << (layout.files.size() > 1 ? "s" : "") << ") with " << comm.size() << " rank"
            << (comm.size() > 1 ? "s" : "") << " in " << std::fixed << std::setprecision(2) << seconds << " s ("
            << std::setprecision(2)
            << (seconds > 0 ? static_cast<double>(layout.total_size - resumed_bytes) / seconds / 1e9 : 0.0)
            << " GB/s written); peak memory per rank " << human_bytes(rss_min) << " .. " << human_bytes(rss_max) << "\n";
        if (in.quantize) {
            out << "vmerge: quantized to " << in.quantize->bits << " bits ("
                << (in.quantize->group_size ? "groups of " + std::to_string(in.quantize->group_size) : std::string("per channel"))
                << ", " << (in.quantize->symmetric ? "symmetric" : "asymmetric") << "): "
                << human_bytes(in.quantization.bytes_before) << " -> " << human_bytes(in.quantization.bytes_after)
                << "; |dequantized - original| by kind (mean, max):\n";
            for (const auto& [kind, e] : quant_errors)
                out << "  " << kind << ": " << std::scientific << std::setprecision(3)
                    << (e.count ? e.sum / static_cast<double>(e.count) : 0.0) << ", " << e.max << std::fixed << "\n";
        }
    }
    return 0;
}

int run_test(const Options& o, Comm& comm, std::ostream& out) {
    MergeInputs in = load_inputs(o, comm);
    const auto& tensors = in.mapping().tensors;
    HfWeights reference;
    std::vector<std::string> problems;
    collective_step(comm, [&] {
        reference = read_hf_weights(o.test_hf_dir);
        // An extracted adapter is compared with the reference's lora_adapter/ folder.
        const std::string adapter = o.test_hf_dir + "/" + kAdapterWeightsFile;
        if (std::filesystem::exists(adapter)) {
            reference.files.push_back(read_safetensors_header(adapter));
            const auto& entries = reference.files.back().entries;
            for (size_t e = 0; e < entries.size(); ++e)
                reference.by_name[entries[e].name] = {reference.files.size() - 1, e};
        }
    });
    std::vector<std::optional<DType>> compare_as(tensors.size());  // reference_compare.h
    std::map<std::string, size_t> cast_notes;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        auto it = reference.by_name.find(t.name);
        if (it == reference.by_name.end()) {
            problems.push_back(t.name + ": in the merge, not in the reference");
            continue;
        }
        const auto& e = reference.files[it->second.first].entries[it->second.second];
        if (e.shape != t.shape) {
            problems.push_back(t.name + ": shape " + shape_to_string(t.shape) + ", reference " + shape_to_string(e.shape));
            continue;
        }
        compare_as[i] = comparison_dtype(t.dtype, e.dtype);
        const std::string dtypes = "dtype " + std::string(torch_name(t.dtype)) + ", reference " + std::string(torch_name(e.dtype));
        if (!compare_as[i]) problems.push_back(t.name + ": " + dtypes);
        else if (e.dtype != t.dtype) ++cast_notes[dtypes + ": compared after casting to " + std::string(torch_name(*compare_as[i]))];
    }
    std::set<std::string> merged;
    for (const auto& t : tensors) merged.insert(t.name);
    for (const auto& [name, _] : reference.by_name)
        if (!merged.count(name)) problems.push_back(name + ": in the reference, not in the merge");
    const OutputLayout layout = plan_output_layout(tensors, o.max_shard_size);
    const auto work = plan_rank_work(tensors, layout, comm.size());
    std::vector<std::string> value_problems;
    // With --merge_lora, a reference that differs from the merge is also compared with the
    // unmerged base weight: equal means whoever wrote it dropped the adapter.
    TensorMapping base = in.mapping();
    for (auto& t : base.tensors) t.lora_delta.reset();
    collective_step(comm, [&] {
        const uint64_t budget = max_memory(o, comm);
        CopyExecutor executor(in.mapping(), budget);
        CopyExecutor base_executor(base, budget);
        std::map<std::string, std::unique_ptr<InputFile>> files;
        std::vector<unsigned char> expected;
        CastComparison compare;
        executor.run(work[comm.rank()], [&](size_t t, int64_t row, int64_t row_end, const unsigned char* data, size_t size) {
            if (!compare_as[t] || value_problems.size() >= 10) return;
            const auto [f, e] = reference.by_name.at(tensors[t].name);
            const auto& entry = reference.files[f].entries[e];
            auto& file = files[reference.files[f].path];
            if (!file) file = std::make_unique<InputFile>(reference.files[f].path);
            const size_t count = size / element_size(tensors[t].dtype);
            const size_t row_elems = row_bytes(tensors[t]) / element_size(tensors[t].dtype);
            expected.resize(count * element_size(entry.dtype));
            file->read_exact(entry.begin + row * row_elems * element_size(entry.dtype), expected.data(), expected.size(),
                             "reference tensor");
            size_t bad = 0;
            if (!compare.match(data, tensors[t].dtype, expected.data(), entry.dtype, *compare_as[t], count, o.atol, o.rtol, &bad)) {
                bool equals_base = false;
                if (tensors[t].lora_delta)
                    base_executor.run({{t, row, row_end}}, [&](size_t, int64_t, int64_t, const unsigned char* unmerged, size_t n) {
                        size_t ignored = 0;
                        equals_base = n == size && compare.match(unmerged, tensors[t].dtype, expected.data(), entry.dtype,
                                                                 *compare_as[t], count, 0, 0, &ignored);
                    });
                value_problems.push_back(tensors[t].name + ": values differ first at row " +
                                         std::to_string(row + static_cast<int64_t>(bad / std::max<size_t>(row_elems, 1))) +
                                         " (rows " + std::to_string(row) + ".." + std::to_string(row_end) + " checked)" +
                                         (equals_base ? "; the reference equals the base weight without the LoRA update: "
                                                        "the adapter was not merged into it (lora_alpha 0?)" : ""));
            }
        });
    });
    nlohmann::json mine = value_problems;
    const auto gathered = comm.allgather(mine.dump());
    for (const auto& g : gathered)
        for (const auto& p : nlohmann::json::parse(g)) problems.push_back(p.get<std::string>());
    if (comm.rank() != 0) return problems.empty() ? 0 : 1;
    for (const auto& [what, n] : cast_notes) out << "vmerge test: note: " << n << " tensors " << what << "\n";
    if (problems.empty()) {
        out << "vmerge test: OK, " << tensors.size() << " tensors match " << o.test_hf_dir
            << (o.atol > 0 || o.rtol > 0 ? " within tolerance" : " bit for bit") << "\n";
        return 0;
    }
    out << "vmerge test: " << problems.size() << " difference" << (problems.size() > 1 ? "s" : "")
        << " against " << o.test_hf_dir << ":\n";
    for (size_t i = 0; i < problems.size() && i < 20; ++i) out << "  " << problems[i] << "\n";
    return 1;
}

int run_verify(const Options& o, Comm& comm, std::ostream& out) {
    std::vector<std::string> warnings;
    HfWeights weights;
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        weights = read_hf_weights(o.target_dir);
        for (const auto& f : weights.files) {
            for (const auto& w : f.convention_warnings) warnings.push_back(f.path + ": " + w);
            auto it = f.metadata.find("format");
            if (it == f.metadata.end() || it->second != "pt")
                warnings.push_back(f.path + ": __metadata__ lacks {\"format\":\"pt\"} (transformers < 4.4x fails on it)");
        }
    });
    if (comm.rank() != 0) return 0;
    for (const auto& w : warnings) out << "warning: " << w << "\n";
    if (std::filesystem::exists(o.target_dir + "/" + kChecksumsFile)) {
        const auto problems = verify_checksums(o.target_dir);
        if (!problems.empty()) {
            out << "vmerge verify: " << problems.size() << (problems.size() > 1 ? " ranges differ" : " range differs")
                << " from what merge wrote:\n";
            for (const auto& p : problems) out << "  " << p << "\n";
            return 1;
        }
        out << "vmerge verify: every byte matches the checksums merge recorded (" << kChecksumsFile << ")\n";
    } else {
        out << "vmerge verify: no " << kChecksumsFile << " (not written by vmerge merge): checksums not checked\n";
    }
    out << "vmerge verify: OK, " << weights.by_name.size() << " tensors in " << weights.files.size() << " file"
        << (weights.files.size() > 1 ? "s" : "") << " follow the safetensors rules\n";
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
