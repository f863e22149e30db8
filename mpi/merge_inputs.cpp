#include "merge_inputs.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "collective_step.h"
#include "core/error.h"
#include "core/stopwatch.h"
#include "exec/dtype_cast.h"
#include "exec/tied_embedding.h"
#include "formats/registry.h"
#include "formats/replica_check.h"
#include "formats/simulated/simulated_checkpoint.h"
#include "io/checksum.h"
#include "io/input_file.h"
#include "io/object_url.h"
#include "io/read_once.h"
#include "io/small_file.h"
#include "io/record_crc.h"
#include "architecture/architecture_table.h"
#include "mapping/map_recipe.h"
#include "output/peft_adapter_config.h"
#include "rank_resources.h"
#include "routed_fsdp_merge.h"
#include "routed_fsdp_simulation.h"
#include "formats/fsdp/fsdp_backend.h"
#include "read_on_rank_zero.h"
#include "torch/scan_serialization.h"
#include "torch/torch_pickle.h"

namespace vmerge {
namespace {

// A LoRA merge with another alpha writes other bytes into the same layout: --resume must
// not mix the two.
std::string lora_fingerprint(const TensorMapping& mapping) {
    std::ostringstream out;
    out << std::hexfloat;
    for (const auto& d : mapping.lora_deltas) out << d.scale << ";";
    return out.str();
}

// The text of config.json, read by rank 0 for every rank (each parses it).
std::string shared_hf_config_text(Comm& comm, const std::string& dir) {
    return read_on_rank_zero(comm, "read config.json", [&] { return read_hf_config_text(dir); });
}

// Discover: which backend, which files to scan. Rank 0 detects first and hands the files it
// read to the others (read_once.h), which then detect from them without opening any.
DetectedCheckpoint discover(const Options& o, Comm& comm) {
    DetectedCheckpoint checkpoint;
    auto detect = [&] {
        checkpoint = detect_checkpoint(o.local_dir, o.backend, o.level, o.backend_flags);
        // A save that records no config anywhere: the model it started from is the only source.
        if (o.hf_config.empty() && !checkpoint.config_missing.empty()) throw Error(checkpoint.config_missing);
    };
    std::string reads;
    collective_step(comm, "discover", [&] {
        if (comm.rank() != 0) return;
        start_recording_reads();
        try {
            detect();
        } catch (...) {
            stop_recording_reads();
            throw;
        }
        reads = serialize_small_files(stop_recording_reads());
    });
    if (comm.size() == 1) return checkpoint;
    comm.broadcast(reads, 0);
    collective_step(comm, "discover", [&] {
        if (comm.rank() == 0) return;
        const ReplayedReads replayed(deserialize_small_files(reads));
        detect();
    });
    return checkpoint;
}

// Scan: rank r parses archives r, r+P, r+2P, ...
std::vector<ScannedFile> scan_own_files(const DetectedCheckpoint& checkpoint, Comm& comm) {
    const std::vector<ScanJob>& jobs = checkpoint.jobs;
    std::vector<ScannedFile> mine;
    collective_step(comm, "scan", [&] {
        for (size_t i = comm.rank(); i < jobs.size(); i += comm.size()) {
            try {
                mine.push_back(scan_job(checkpoint, jobs[i]));
            } catch (const Error& e) {
                // A DCP item is one of many in its file: the message names its key and offset.
                if (i >= checkpoint.job_names.size()) throw;
                throw Error(std::string(e.what()) + " (item " + checkpoint.job_names[i] + " at byte " +
                            std::to_string(jobs[i].base) + ")");
            }
        }
    });
    return mine;
}

// ... and everyone receives every scan.
std::vector<ScannedFile> gather_scans(const std::vector<ScannedFile>& mine, size_t files, Comm& comm) {
    std::vector<std::string> gathered = comm.allgather(serialize_scans(mine));
    return gathered_scans(gathered, files);
}

// What the command line chose for the map stage (mapping/map_recipe.h).
MapRecipe map_recipe(const Options& o) {
    MapRecipe recipe;
    recipe.map = o.map;
    recipe.tie_word_embedding = o.tie_word_embedding;
    recipe.dtype = o.dtype;
    if (o.quantize) recipe.quantize = o.quantize_spec;
    recipe.lora = o.lora;
    // The extracted adapter sits inside the folder that holds its base model.
    if (is_object_url(o.output.target))  // a bucket target: its URL as given
        recipe.lora.base_model_name_or_path = parse_object_url(o.output.target).text();
    else if (!o.output.target.empty())
        recipe.lora.base_model_name_or_path = std::filesystem::absolute(o.output.target).lexically_normal().string();
    return recipe;
}

// The architecture tables (shipped and --architecture_table) as rank 0 read them, for every
// rank to load from (or to meet rank 0's read errors).
std::string shared_table_texts(Comm& comm, const Options& o) {
    return read_on_rank_zero(comm, "read the architecture tables", [&] {
        start_recording_reads();
        for (const auto& file : architecture_table_files(o.map.architecture_tables)) {
            try {
                read_architecture_table_text(file);
            } catch (const Error&) {  // recorded: every rank meets it when loading
            }
        }
        return serialize_small_files(stop_recording_reads());
    });
}

// The tables, loaded once from rank 0's texts (every rank parses the same).
std::shared_ptr<const ArchitectureTables> load_shared_tables(const std::string& table_texts, const Options& o) {
    const ReplayedReads tables(deserialize_small_files(table_texts));
    return std::make_shared<const ArchitectureTables>(load_architecture_tables(o.map.architecture_tables));
}

void take_model(MergeInputs& in, MappedModel model) {
    in.mapped = std::move(model.mapped);
    in.lora = std::move(model.lora);
    in.quantize = std::move(model.quantize);
    in.quantization = std::move(model.quantization);
    in.output_config = std::move(model.output_config);
}

// Map of a checkpoint that is a merge's output already (Backend::as_stored, an archive): its
// tensors as stored, no config.json, tables, rules, LoRA or quantization; a merge writes the HF
// files it holds (rank 0 reads them).
void map_as_stored(MergeInputs& in, const Options& o, Comm& comm) {
    collective_step(comm, "map", [&] {
        in.mapped = map_checkpoint(in.checkpoint, in.scans, HfConfig{}, o.map);
        if (comm.rank() == 0 && o.command == "merge") in.held_files = checkpoint_hf_files(in.checkpoint);
    });
}

// What the map stage reads on rank 0 for every rank: config.json, the architecture tables and
// the LoRA metadata, and the recipe they complete.
struct MapContext {
    std::string config_dir, config_text, table_texts;
    MapRecipe recipe;
    uint64_t budget = 0;
};

MapContext map_context(const MergeInputs& in, const Options& o, Comm& comm) {
    MapContext ctx;
    ctx.config_dir = o.hf_config.empty() ? in.checkpoint.default_hf_dir : o.hf_config;
    ctx.config_text = shared_hf_config_text(comm, ctx.config_dir);
    ctx.table_texts = shared_table_texts(comm, o);
    // Read whether or not the mapping holds an adapter: the read records what it cannot read
    // instead of throwing, and apply_lora parses it only for an adapter.
    const std::string adapter_config =
        in.checkpoint.lora_adapter_dir.empty() ? "" : in.checkpoint.lora_adapter_dir + "/adapter_config.json";
    const std::string lora_metadata = read_on_rank_zero(comm, "read the LoRA metadata", [&] {
        return serialize_lora_metadata(read_lora_metadata(in.checkpoint.dir, adapter_config));
    });
    ctx.recipe = map_recipe(o);
    ctx.recipe.lora.metadata = deserialize_lora_metadata(lora_metadata);
    ctx.budget = max_memory(o, comm);
    return ctx;
}

// Map: the config, the tables and the LoRA metadata are read by rank 0; every rank then runs
// the same recipe on them (the byte checks split over the ranks), and all agree on the result.
void map_stage(MergeInputs& in, const Options& o, Comm& comm, MapContext& ctx) {
    SourceByteChecks checks;
    checks.mtp_copies = [&](const TensorMapping& mapping, const std::vector<MtpSharedCopy>& copies, bool tied) {
        check_mtp_shared_copies(mapping, copies, tied, ctx.budget, comm.rank(), comm.size());
    };
    checks.tied_head = [&](const TensorMapping& mapping, const HfConfig& config, bool tie_flag) {
        check_tied_head(mapping, config, tie_flag, ctx.budget, comm.rank(), comm.size());
    };
    collective_step(comm, "map", [&] {
        in.config = parse_hf_config(ctx.config_dir, ctx.config_text);
        ctx.recipe.map.tables = load_shared_tables(ctx.table_texts, o);
        take_model(in, map_model(map_checkpoint(in.checkpoint, in.scans, in.config, ctx.recipe.map), in.checkpoint,
                                 in.config, ctx.recipe, checks));
    });
}

// The routed merge's skeleton mapping (routed_fsdp_merge.h), on every rank alike: the checks
// that read source bytes are not run but noted, and anything that needs them, or drops, LoRA
// or quantization, or an Error, sends the merge to the all-gather path, which meets it there.
std::optional<MappedModel> map_skeleton(MergeInputs& in, const Options& o, MapContext& ctx, const ScannedFile& skeleton,
                                        const SourceAccount& account) {
    bool needs_bytes = false;
    SourceByteChecks checks;
    checks.mtp_copies = [&](const TensorMapping&, const std::vector<MtpSharedCopy>& copies, bool) {
        if (!copies.empty()) needs_bytes = true;
    };
    checks.tied_head = [&](const TensorMapping& mapping, const HfConfig& config, bool tie_flag) {
        if (!tie_flag && !config.tie_word_embeddings) return;
        for (const OutputTensor& t : mapping.tensors) needs_bytes = needs_bytes || t.name == "lm_head.weight";
    };
    try {
        in.config = parse_hf_config(ctx.config_dir, ctx.config_text);
        ctx.recipe.map.tables = load_shared_tables(ctx.table_texts, o);
        MappedCheckpoint mapped = map_checkpoint(in.checkpoint, {skeleton}, in.config, ctx.recipe.map);
        if (mapped.account.total_dropped() || !mapped.account.replicas.empty()) return std::nullopt;
        mapped.account = account;
        if (const std::string dropped = dropped_summary(account); !dropped.empty()) mapped.notes.push_back(dropped);
        MappedModel model = map_model(std::move(mapped), in.checkpoint, in.config, ctx.recipe, checks);
        if (needs_bytes || model.lora.found || model.quantize) return std::nullopt;
        return model;
    } catch (const std::exception&) {  // any of them: the all-gather path meets it in its own step
        return std::nullopt;
    }
}

// Where a merge of `checkpoint` would plan routed: a verl FSDP save written into safetensors
// (whose rank shares plan_rank_work gives), nothing quantized; the files themselves decide the
// rest. inspect --simulate asks it of the simulated save.
bool routes_when_merged(const Options& o, const DetectedCheckpoint& checkpoint) {
    return !o.debug.allgather_planning && checkpoint.backend == "fsdp" && o.format == "safetensors" && !o.quantize &&
           !checkpoint.jobs.empty() && checkpoint.job_names.empty() && checkpoint.unscanned_items.empty();
}

bool may_route(const Options& o, const DetectedCheckpoint& checkpoint) {
    return o.command != "inspect" && routes_when_merged(o, checkpoint);
}

// The routed merge, when it applies: fills `in` and says so.
bool routed_merge(MergeInputs& in, const Options& o, Comm& comm, MapContext& ctx, const std::vector<ScannedFile>& mine) {
    if (!may_route(o, in.checkpoint)) return false;
    const SkeletonMapper mapper = [&](const ScannedFile& skeleton, const SourceAccount& account) {
        return map_skeleton(in, o, ctx, skeleton, account);
    };
    std::optional<RoutedFsdpMerge> routed =
        route_fsdp_merge(mine, in.checkpoint.jobs.size(), mapper, o.output.max_shard_size, ctx.budget, comm,
                         in.planning_note);
    if (!routed) return false;
    take_model(in, std::move(routed->model));
    in.scans_digest = std::move(routed->scans_digest);
    in.planning = "routed";
    in.entries_received = routed->received_entries;
    return true;
}

}  // namespace

MergeInputs load_inputs(const Options& o, Comm& comm) {
    MergeInputs in;
    in.checkpoint = discover(o, comm);
    const auto scan_start = Clock::now();
    std::vector<ScannedFile> mine = scan_own_files(in.checkpoint, comm);
    std::optional<MapContext> ctx;
    if (!written_as_stored(in.checkpoint)) ctx = map_context(in, o, comm);
    const auto routed_start = Clock::now();
    if (ctx && routed_merge(in, o, comm, *ctx, mine)) {
        in.scan_seconds = seconds_since(scan_start) - seconds_since(routed_start);
        in.map_seconds = seconds_since(routed_start);  // the routing, the skeleton's mapping and the composing
        return in;
    }
    in.scans = gather_scans(mine, in.checkpoint.jobs.size(), comm);
    std::vector<ScannedFile>().swap(mine);
    for (const ScannedFile& file : in.scans) in.entries_received += file.tensors.size();
    if (comm.rank() == 0) {
        const std::string scans = serialize_scans(in.scans);
        in.scans_digest = hex64(xxh64(scans.data(), scans.size()));
    }
    in.scan_seconds = seconds_since(scan_start);
    const auto map_start = Clock::now();
    if (ctx) map_stage(in, o, comm, *ctx);
    else map_as_stored(in, o, comm);
    // Every replica dropped in the mapping holds its kept copy's values (CRC-32s, or the bytes).
    collective_step(comm, "replica check", [&] {
        if (comm.rank() != 0) return;
        const std::string note = check_replicas_agree(in.mapped.account.replicas, kReplicaReadBudget);
        if (!note.empty()) in.mapped.notes.push_back(note);
    });
    std::vector<ReplicaPair>().swap(in.mapped.account.replicas);
    if (o.command != "inspect" || comm.rank() != 0) std::vector<ScannedFile>().swap(in.scans);
    in.map_seconds = seconds_since(map_start);
    return in;
}

MergeInputs load_checkpoint_names(const Options& o, const std::string& config_dir, Comm& comm,
                                  std::shared_ptr<const ArchitectureTables>& tables) {
    MergeInputs in;
    in.checkpoint = discover(o, comm);
    const std::string layout = in.checkpoint.source ? in.checkpoint.source->name() : "";
    if ((layout != "torchtitan" && layout != "torch_dist" && layout != "megatron_legacy") || in.checkpoint.hf_named)
        throw Error(in.checkpoint.description + ": map learns tables for torchtitan DCP and Megatron torch_dist "
                    "and legacy per-rank checkpoints (their tensors under the trainer's own names); this is " +
                    (layout.empty() ? std::string("another layout") : layout) +
                    (layout == "fsdp" || layout == "dcp" || layout == "deepspeed" || in.checkpoint.hf_named
                         ? " (it keeps transformers' names; where transformers 5 renames at run time, as for "
                           "fused experts or a VL model's language_model, an hf_* table's rules map them, which map "
                           "does not learn: docs/architecture-tables.md)"
                         : ""));
    in.scans = gather_scans(scan_own_files(in.checkpoint, comm), in.checkpoint.jobs.size(), comm);
    const std::string config_text = shared_hf_config_text(comm, config_dir);
    const std::string table_texts = shared_table_texts(comm, o);
    MapOptions names = o.map;
    names.checkpoint_names = true;
    collective_step(comm, "map", [&] {
        in.config = parse_hf_config(config_dir, config_text);
        names.tables = tables = load_shared_tables(table_texts, o);
        in.mapped = map_checkpoint(in.checkpoint, in.scans, in.config, names);
    });
    return in;
}

namespace {

// The simulated save as discovery would find it (verl FSDP, its W rank files), so the routed
// merge's functions take it as they take a real one.
DetectedCheckpoint simulated_fsdp_checkpoint(const SimulatedFsdpSave& save) {
    DetectedCheckpoint checkpoint;
    checkpoint.source = find_layout("fsdp");
    checkpoint.backend = "fsdp";
    FsdpCheckpoint fsdp;
    fsdp.world_size = save.world;
    for (int r = 0; r < save.world; ++r) fsdp.rank_files.push_back(simulated_fsdp_rank_path(save.world, r));
    checkpoint.description = "verl FSDP (world size " + std::to_string(save.world) + ")";
    for (const std::string& path : fsdp.rank_files) checkpoint.jobs.push_back({path});
    checkpoint.keep(std::move(fsdp));
    return checkpoint;
}

// inspect --simulate fsdp:W where a merge would plan routed: the model of it
// (routed_fsdp_simulation.h), with the merge's skeleton mapper. False, with why in
// in.planning_note, where the merge would plan from the all-gather.
bool simulate_routed(MergeInputs& in, const Options& o, Comm& comm, const std::string& config_text,
                     const std::string& table_texts) {
    if (!o.simulate.starts_with("fsdp:")) {
        in.planning_note = "merges route verl FSDP / FSDP2 DTensor saves only; this is a Megatron-LM save";
        return false;
    }
    MapContext ctx;
    ctx.config_dir = o.hf_config;
    ctx.config_text = config_text;
    ctx.table_texts = table_texts;
    ctx.recipe = map_recipe(o);
    ctx.recipe.map.tables = load_shared_tables(table_texts, o);
    ctx.budget = max_memory(o, comm);
    in.config = parse_hf_config(o.hf_config, config_text);
    const SimulatedFsdpSave save = simulated_fsdp_save(in.config, o.simulate, ctx.recipe.map.loaded_tables());
    in.checkpoint = simulated_fsdp_checkpoint(save);
    if (!routes_when_merged(o, in.checkpoint)) {
        in.planning_note = o.debug.allgather_planning ? "VMERGE_TEST_ALLGATHER_PLANNING is set"
                           : o.quantize                ? "--quantize"
                                                       : "--format " + o.format + " (routed planning writes safetensors)";
        return false;
    }
    RoutedSimulationInput model;
    model.files = static_cast<size_t>(save.world);
    model.ranks = o.np > 0 ? o.np : comm.size();
    model.rank_file = [&](size_t file) { return simulated_fsdp_rank_file(save, static_cast<int>(file)); };
    model.map_skeleton = [&](const ScannedFile& skeleton, const SourceAccount& account) {
        return map_skeleton(in, o, ctx, skeleton, account);
    };
    model.max_shard_size = o.output.max_shard_size;
    model.budget = ctx.budget;
    RoutedFsdpSimulation routed = simulate_routed_fsdp(model);
    if (!routed.model) {
        in.planning_note = routed.why_not;
        return false;
    }
    routed.model->mapped.notes.push_back(save.note);
    routed.model->mapped.facts["backend"] = "simulated";
    routed.model->mapped.facts["layout"] = o.simulate;
    take_model(in, std::move(*routed.model));
    in.routed_planning = std::move(routed.figures);
    in.planning = "routed";
    return true;
}

}  // namespace

MergeInputs simulate_inputs(const Options& o, Comm& comm) {
    MergeInputs in;
    const std::string config_text = shared_hf_config_text(comm, o.hf_config);
    const std::string table_texts = shared_table_texts(comm, o);
    bool routed = false;
    collective_step(comm, "simulate", [&] { routed = simulate_routed(in, o, comm, config_text, table_texts); });
    in.checkpoint = DetectedCheckpoint{};
    in.checkpoint.backend = "simulated";
    in.checkpoint.description = o.simulate + " (no files read)";
    if (routed) return in;
    collective_step(comm, "simulate", [&] {
        in.config = parse_hf_config(o.hf_config, config_text);
        MapRecipe recipe = map_recipe(o);
        recipe.map.tables = load_shared_tables(table_texts, o);
        ScanExchangeFigures figures;
        Clock::time_point decoded = Clock::now();
        const int ranks = o.np > 0 ? o.np : comm.size();
        in.rank_messages = std::make_shared<KeptRankMessages>();
        MappedCheckpoint simulated;
        simulated.mapping = simulate_checkpoint(in.config, o.simulate, recipe.map.loaded_tables(), simulated.notes,
                                                [&](std::vector<ScannedFile> scans) {
                                                    auto received =
                                                        exchange_scans_as_ranks(std::move(scans), ranks, figures, in.rank_messages.get());
                                                    decoded = Clock::now();
                                                    return received;
                                                });
        figures.map_seconds = seconds_since(decoded);
        in.exchange = figures;
        simulated.facts["backend"] = "simulated";
        simulated.facts["layout"] = o.simulate;
        simulated.facts["architecture"] = in.config.architectures.empty() ? "" : in.config.architectures[0];
        take_model(in, map_model(std::move(simulated), in.checkpoint, in.config, recipe));
    });
    return in;
}

std::map<std::string, std::string> generated_files(const MergeInputs& in) {
    if (written_as_stored(in.checkpoint)) return in.held_files;
    std::map<std::string, std::string> files;
    if (in.output_config.text) files["config.json"] = *in.output_config.text;
    if (in.lora.extracted)
        files[std::string(kAdapterFolder) + "/adapter_config.json"] = peft_adapter_config(*in.lora.extracted).dump(2) + "\n";
    return files;
}

std::vector<InputFolder> input_folders(const Options& o, const MergeInputs& in) {
    std::vector<InputFolder> folders{{o.local_dir, "the checkpoint (--local_dir)"},
                                     {in.checkpoint.dir, "the checkpoint folder --local_dir leads to"},
                                     {in.checkpoint.weights_dir, "the checkpoint's weights folder"},
                                     {in.config.dir, "the config folder (--hf_config)"}};
    // A layout's folder flag names an input too (--lora_base: the base model).
    for (const BackendFlag* flag : backend_flags())
        if (flag->kind == BackendFlag::Kind::Folder && o.backend_flags.given(flag->name))
            folders.push_back({o.backend_flags.text(flag->name), "the folder --" + flag->name + " names"});
    return folders;
}

ResumeIdentity merge_identity(const MergeInputs& in, const OutputLayout& layout, const Comm& comm, uint64_t budget) {
    ResumeIdentity id = resume_identity(layout, comm.size(), budget, lora_fingerprint(in.mapping()));
    std::vector<std::string> paths;
    for (const auto& job : in.checkpoint.jobs) paths.push_back(job.path);
    if (!in.config.dir.empty()) paths.push_back(in.config.dir + "/config.json");
    id.inputs = stamp_inputs(paths);
    id.scans = in.scans_digest;
    return id;
}

}  // namespace vmerge
