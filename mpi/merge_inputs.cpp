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
#include "io/read_once.h"
#include "io/small_file.h"
#include "io/record_crc.h"
#include "architecture/architecture_table.h"
#include "mapping/output_rules.h"
#include "rank_resources.h"
#include "read_on_rank_zero.h"
#include "torch/scan_serialization.h"
#include "torch/torch_pickle.h"

namespace vmerge {
namespace {

// Quantization, then the config.json that states what was written (output_config.h).
void plan_quantized_output(MergeInputs& in, const Options& o) {
    if (o.quantize) in.quantize = o.quantize_spec;
    if (in.quantize) in.quantization = plan_quantization(in.mapped.mapping, *in.quantize);
    for (const auto& note : in.quantization.notes) in.mapped.notes.push_back(note);
    // Printed once by merge and inspect (rank 0), each naming the loader rule.
    for (const auto& warning : in.quantization.shape_warnings) in.mapped.notes.push_back(warning);
    in.output_config = plan_output_config(
        in.config, in.mapped.mapping, o.map.tie_word_embedding,
        in.quantize ? quantization_config(*in.quantize, in.quantization.ignored_modules) : nlohmann::ordered_json());
    for (const auto& note : in.output_config.notes) in.mapped.notes.push_back(note);
}

// The embedding / output head copies of the MTP layers (mtp_shared_copies.h): written from
// their originals (after LoRA, so a merged update is in them too, and before the tied head is
// dropped) unless --no_mtp_shared_copies.
void write_mtp_copies(MappedCheckpoint& mapped, const Options& o, bool tied) {
    if (mapped.mtp_shared_copies.empty()) return;
    const auto read = std::count_if(mapped.mtp_shared_copies.begin(), mapped.mtp_shared_copies.end(),
                                    [](const MtpSharedCopy& c) { return c.read.has_value(); });
    if (read)
        mapped.notes.push_back("the checkpoint's " + std::to_string(read) + " embed_tokens / shared_head.head copies of "
                               "its MTP layers equal their originals (compared byte for byte; written once)");
    if (o.map.no_mtp_shared_copies) {
        mapped.notes.push_back("--no_mtp_shared_copies: the " + std::to_string(mapped.mtp_shared_copies.size()) +
                               " embed_tokens / shared_head.head copies of the MTP layers not written");
        return;
    }
    for (auto& note : add_mtp_shared_copies(mapped.mapping, mapped.mtp_shared_copies, tied)) mapped.notes.push_back(note);
}

// A LoRA merge with another alpha writes other bytes into the same layout: --resume must
// not mix the two.
std::string lora_fingerprint(const TensorMapping& mapping) {
    std::ostringstream out;
    out << std::hexfloat;
    for (const auto& d : mapping.lora_deltas) out << d.scale << ";";
    return out.str();
}

void apply_lora_choice(MergeInputs& in, const Options& o, std::optional<LoraMetadataFiles> metadata) {
    LoraOptions lora = o.lora;
    lora.checkpoint_dir = in.checkpoint.dir;
    lora.metadata = std::move(metadata);
    lora.alpha_unrecorded = in.mapped.lora_alpha_unrecorded;
    lora.task_type = o.map.is_value_model ? "TOKEN_CLS" : "CAUSAL_LM";
    // The extracted adapter sits inside the folder that holds its base model.
    if (!o.output.target.empty()) lora.base_model_name_or_path = std::filesystem::absolute(o.output.target).lexically_normal().string();
    in.lora = apply_lora(in.mapped.mapping, lora, in.checkpoint.dir);
    for (const auto& note : in.lora.notes) in.mapped.notes.push_back(note);
}

// The text of config.json, read by rank 0 for every rank (each parses it).
std::string shared_hf_config_text(Comm& comm, const std::string& dir) {
    return read_on_rank_zero(comm, [&] { return read_hf_config_text(dir); });
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
    collective_step(comm, [&] {
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
    collective_step(comm, [&] {
        if (comm.rank() == 0) return;
        const ReplayedReads replayed(deserialize_small_files(reads));
        detect();
    });
    return checkpoint;
}

// Scan: rank r parses archives r, r+P, r+2P, ... and everyone receives every scan.
std::vector<ScannedFile> scan(const DetectedCheckpoint& checkpoint, Comm& comm) {
    const std::vector<ScanJob>& jobs = checkpoint.jobs;
    std::vector<ScannedFile> mine;
    collective_step(comm, [&] {
        for (size_t i = comm.rank(); i < jobs.size(); i += comm.size()) mine.push_back(scan_job(checkpoint, jobs[i]));
    });
    std::vector<std::string> gathered = comm.allgather(serialize_scans(mine));
    return gathered_scans(gathered, jobs.size());
}

// Map of a checkpoint that is a merge's output already (Backend::as_stored, an archive): its
// tensors as stored, no config.json, rules, LoRA or quantization; a merge writes the HF files it
// holds (rank 0 reads them).
void map_as_stored(MergeInputs& in, const Options& o, Comm& comm) {
    collective_step(comm, [&] {
        in.mapped = map_checkpoint(in.checkpoint, in.scans, HfConfig{}, o.map);
        if (comm.rank() == 0 && o.command == "merge") in.held_files = checkpoint_hf_files(in.checkpoint);
    });
}

// Map: HF names, the LoRA adapter, the output rules and checks, quantization. The config and
// the LoRA metadata are read by rank 0; every rank computes the same mapping from them.
void map_stage(MergeInputs& in, const Options& o, Comm& comm) {
    if (written_as_stored(in.checkpoint)) return map_as_stored(in, o, comm);
    const std::string config_dir = o.hf_config.empty() ? in.checkpoint.default_hf_dir : o.hf_config;
    const std::string config_text = shared_hf_config_text(comm, config_dir);
    // The architecture tables (shipped and --architecture_table): rank 0 reads them, the other
    // ranks map from its texts (or meet its read errors).
    const std::string table_texts = read_on_rank_zero(comm, [&] {
        start_recording_reads();
        for (const auto& file : architecture_table_files(o.map.architecture_tables)) {
            try {
                read_architecture_table_text(file);
            } catch (const Error&) {  // recorded: every rank meets it when mapping
            }
        }
        return serialize_small_files(stop_recording_reads());
    });
    const ReplayedReads tables(deserialize_small_files(table_texts));
    MapOptions options = o.map;
    // --tie_word_embedding acts after mapping (check_tied_head, then apply_output_rules), so a
    // Megatron output_layer becomes lm_head.weight and is compared before it may be dropped.
    options.tie_word_embedding = false;
    // The word embeddings are tied by config.json or --tie_word_embedding (for the MTP copies'
    // original: the embedding when there is no lm_head.weight).
    bool tied = false;
    collective_step(comm, [&] {
        in.config = parse_hf_config(config_dir, config_text);
        in.mapped = map_checkpoint(in.checkpoint, in.scans, in.config, options);
        tied = o.map.tie_word_embedding || in.config.tie_word_embeddings;
        // The checkpoint's own MTP copies against the bytes they copy, before a LoRA update is attached.
        check_mtp_shared_copies(in.mapped.mapping, in.mapped.mtp_shared_copies, tied, max_memory(o, comm), comm.rank(),
                                comm.size());
    });
    std::optional<LoraMetadataFiles> lora_metadata;
    const auto& tensors = in.mapped.mapping.tensors;
    if (std::any_of(tensors.begin(), tensors.end(), [](const OutputTensor& t) { return is_peft_name(t.name); }))
        lora_metadata = deserialize_lora_metadata(
            read_on_rank_zero(comm, [&] { return serialize_lora_metadata(read_lora_metadata(in.checkpoint.dir, in.checkpoint.lora_adapter_dir.empty()
                                                       ? ""
                                                       : in.checkpoint.lora_adapter_dir + "/adapter_config.json")); }));
    collective_step(comm, [&] {
        apply_lora_choice(in, o, std::move(lora_metadata));
        check_tied_head(in.mapped.mapping, in.config, o.map.tie_word_embedding, max_memory(o, comm), comm.rank(), comm.size());
        write_mtp_copies(in.mapped, o, tied);
        for (auto& note : apply_output_rules(in.mapped.mapping, in.config, parse_dtype_choice(o.dtype),
                                             o.map.tie_word_embedding))
            in.mapped.notes.push_back(note);
        MapOptions checked = options;
        checked.tie_word_embedding = o.map.tie_word_embedding;  // the rules above dropped lm_head
        check_output_against_config(in.mapped, in.checkpoint, in.config, checked);
        plan_quantized_output(in, o);
    });
}

}  // namespace

MergeInputs load_inputs(const Options& o, Comm& comm) {
    MergeInputs in;
    in.checkpoint = discover(o, comm);
    const auto scan_start = Clock::now();
    in.scans = scan(in.checkpoint, comm);
    if (comm.rank() == 0) {
        const std::string scans = serialize_scans(in.scans);
        in.scans_digest = hex64(xxh64(scans.data(), scans.size()));
    }
    in.scan_seconds = seconds_since(scan_start);
    const auto map_start = Clock::now();
    map_stage(in, o, comm);
    // Every replica dropped in the mapping holds its kept copy's values (CRC-32s, or the bytes).
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        const std::string note = check_replicas_agree(in.mapped.account.replicas, kReplicaReadBudget);
        if (!note.empty()) in.mapped.notes.push_back(note);
    });
    std::vector<ReplicaPair>().swap(in.mapped.account.replicas);
    if (o.command != "inspect" || comm.rank() != 0) std::vector<ScannedFile>().swap(in.scans);
    in.map_seconds = seconds_since(map_start);
    return in;
}

MergeInputs simulate_inputs(const Options& o, Comm& comm) {
    MergeInputs in;
    const std::string config_text = shared_hf_config_text(comm, o.hf_config);
    collective_step(comm, [&] {
        in.config = parse_hf_config(o.hf_config, config_text);
        in.checkpoint.backend = "simulated";
        in.checkpoint.description = o.simulate + " (no files read)";
        ScanExchangeFigures figures;
        Clock::time_point decoded = Clock::now();
        const int ranks = o.np > 0 ? o.np : comm.size();
        in.mapped.mapping = simulate_checkpoint(in.config, o.simulate, in.mapped.notes, [&](std::vector<ScannedFile> scans) {
            auto received = exchange_scans_as_ranks(std::move(scans), ranks, figures);
            decoded = Clock::now();
            return received;
        });
        figures.map_seconds = seconds_since(decoded);
        in.exchange = figures;
        in.mapped.facts["backend"] = "simulated";
        in.mapped.facts["layout"] = o.simulate;
        in.mapped.facts["architecture"] = in.config.architectures.empty() ? "" : in.config.architectures[0];
        for (auto& note : apply_output_rules(in.mapped.mapping, in.config, parse_dtype_choice(o.dtype), o.map.tie_word_embedding))
            in.mapped.notes.push_back(note);
        plan_quantized_output(in, o);
    });
    return in;
}

std::map<std::string, std::string> generated_files(const MergeInputs& in) {
    if (written_as_stored(in.checkpoint)) return in.held_files;
    std::map<std::string, std::string> files;
    if (in.output_config.text) files["config.json"] = *in.output_config.text;
    if (!in.lora.adapter_config.is_null())
        files[std::string(kAdapterFolder) + "/adapter_config.json"] = in.lora.adapter_config.dump(2) + "\n";
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
