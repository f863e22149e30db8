#include "formats/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "core/box_region.h"
#include "core/error.h"
#include "formats/megatron/megatron_lora.h"
#include "safetensors/safetensors_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

bool path_exists(const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec);
}

bool holds_safetensors(const fs::path& dir) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().extension() == ".safetensors") return true;
    return false;
}

// Megatron-LM's tracker file names the iteration folder; `iteration` overrides it.
fs::path resolve_iteration(const fs::path& dir, std::optional<int> iteration) {
    const auto folder = iteration_folder(dir.string(), iteration);
    if (!folder) return dir;
    if (iteration && !path_exists(dir / folder->name))
        throw Error((dir / folder->name).string() + ": missing (--iteration " + std::to_string(*iteration) + ")");
    return dir / folder->name;
}

std::string default_hf_dir(const fs::path& dir) {
    for (const char* name : {"huggingface", "hf_config_and_tokenizer"})
        if (path_exists(dir / name / "config.json")) return (dir / name).string();
    return (dir / "huggingface").string();
}

void add_dcp_jobs(DetectedCheckpoint& d) {
    for (const auto& t : d.dcp.tensors)
        for (const auto& c : t.chunks) d.jobs.push_back({c.file, c.offset, c.length});
}

// Plain DCP keys carry the container names of the saved dict ("model." for
// dcp.save({"model": sd}), "module." for wrapped modules): strip them to get model names.
// What lies outside the "model" dict is dropped in the ledger; two keys that strip to one
// name are an Error.
TensorMapping strip_dcp_prefixes(TensorMapping mapping, const DcpMetadata& meta, SourceLedger& ledger) {
    TensorMapping out;
    out.sources = std::move(mapping.sources);
    OutputNames names(meta.dir + "/.metadata");
    bool any_model = false;
    for (const auto& t : mapping.tensors) any_model = any_model || t.name.starts_with("model.");
    for (auto& t : mapping.tensors) {
        std::string name = t.name;
        if (any_model) {
            if (!name.starts_with("model.")) {
                ledger.drop_output(t, out.sources, DropReason::OutsideModel);
                continue;
            }
            name = name.substr(6);
        }
        while (name.starts_with("module.")) name = name.substr(7);
        names.claim(name, t.name);
        t.name = name;
        out.tensors.push_back(std::move(t));
    }
    return out;
}

// Buffers a model's state dict may hold that are not weights of the Hugging Face model:
// transformers recomputes rotary inv_freq, and TransformerEngine's _extra_state is FP8
// bookkeeping. FSDP and DCP keep every key, so they are taken out here, each with its reason.
void drop_non_weight_buffers(TensorMapping& mapping, SourceLedger& ledger, std::vector<std::string>& notes) {
    size_t dropped = 0;
    std::erase_if(mapping.tensors, [&](const OutputTensor& t) {
        const bool inv_freq = t.name.ends_with("rotary_emb.inv_freq");
        const bool extra_state = t.name.ends_with("_extra_state");
        if (!inv_freq && !extra_state) return false;
        ledger.drop_output(t, mapping.sources, inv_freq ? DropReason::RotaryInvFreq : DropReason::ExtraState);
        ++dropped;
        return true;
    });
    if (dropped) notes.push_back(std::to_string(dropped) + " rotary inv_freq / _extra_state buffers not written (not model weights)");
}

// One account per scanned entry; a DCP item is named by its fqn and chunk (its archive key
// is empty), and its bytes items, never scanned, are dropped as such.
SourceLedger open_ledger(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans) {
    const bool dcp = ckpt.layout == Layout::Dcp || ckpt.layout == Layout::MegatronDist;
    std::vector<std::string> item_names;
    if (dcp)
        for (const auto& t : ckpt.dcp.tensors)
            for (const auto& c : t.chunks) item_names.push_back("'" + t.fqn + "' chunk " + shape_to_string(c.offsets));
    SourceLedger ledger(scans, item_names);
    if (dcp)
        for (const auto& fqn : ckpt.dcp.byte_items)
            ledger.drop_unscanned(ckpt.dcp.dir + "/.metadata '" + fqn + "'", DropReason::BytesItem);
    return ledger;
}

// An HF safetensors folder as it is: every tensor copied whole.
TensorMapping map_hf_safetensors(const std::string& dir) {
    TensorMapping mapping;
    const HfWeights weights = read_hf_weights(dir);
    for (const auto& file : weights.files)
        for (const auto& e : file.entries) {
            TensorRef ref;
            ref.dtype = e.dtype;
            ref.shape = e.shape;
            ref.stride = contiguous_strides(e.shape);
            ref.storage = {file.path, e.name, e.begin, e.end - e.begin, std::nullopt};  // safetensors: no CRC
            OutputTensor t;
            t.name = e.name;
            t.source_dtype = t.dtype = e.dtype;
            t.shape = e.shape;
            const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
            mapping.sources.push_back(ref);
            add_copy(t, source, Shape(e.shape.size(), 0), Shape(e.shape.size(), 0), e.shape);
            mapping.tensors.push_back(std::move(t));
        }
    return mapping;
}

// Legacy per-rank files (model or adapter): assembled by the TP/PP rules, the parallelism
// found recorded for inspect and checked against --tp_size/--pp_size.
TensorMapping assemble_rank_files(DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                  const ArchitectureInfo& arch, const MapOptions& options, MappedCheckpoint& m,
                                  SourceLedger& ledger) {
    MegatronParallelism found;
    TensorMapping canonical = assemble_megatron_legacy(ckpt.legacy, scans, arch, found, &ledger);
    m.facts["tp"] = found.tp;
    m.facts["pp"] = found.pp;
    m.facts["vpp"] = found.vpp;
    m.facts["ep"] = found.ep;
    if (options.tp_size && *options.tp_size != found.tp)
        throw Error("--tp_size " + std::to_string(*options.tp_size) + " but " + ckpt.legacy.dir + " holds tp " +
                    std::to_string(found.tp));
    if (options.pp_size && *options.pp_size != found.pp)
        throw Error("--pp_size " + std::to_string(*options.pp_size) + " but " + ckpt.legacy.dir + " holds pp " +
                    std::to_string(found.pp));
    return canonical;
}

}  // namespace

DetectedCheckpoint detect_checkpoint(const std::string& local_dir, const std::string& backend,
                                     std::optional<int> iteration) {
    DetectedCheckpoint d;
    const fs::path dir(local_dir);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error(local_dir + ": not a directory");
    d.default_hf_dir = default_hf_dir(dir);
    const bool want_fsdp = backend == "auto" || backend == "fsdp";
    const bool want_megatron = backend == "auto" || backend == "megatron";
    if (want_fsdp && looks_like_fsdp(local_dir)) {
        d.layout = Layout::Fsdp;
        d.backend = "fsdp";
        d.fsdp = discover_fsdp(local_dir);
        d.description = "verl FSDP (world size " + std::to_string(d.fsdp.world_size) + ")";
        d.notes = d.fsdp.notes;
        for (const auto& f : d.fsdp.rank_files) d.jobs.push_back({f});
        return d;
    }
    if (backend == "fsdp") throw Error(local_dir + ": no model_world_size_*_rank_*.pt files (--backend fsdp)");
    if (want_megatron && has_megatron_adapters(local_dir)) {
        d.legacy = discover_megatron_adapters(local_dir);
        d.layout = Layout::MegatronAdapter;
        d.backend = "megatron";
        d.weights_dir = d.legacy.dir;
        d.description = "verl Megatron LoRA adapter checkpoint (" + d.legacy.dir + ")";
        for (const auto& f : d.legacy.files) d.jobs.push_back({f.path});
        return d;
    }
    if (want_megatron) {
        // torch_dist: verl's dist_ckpt/, or a Megatron-LM iteration folder with metadata.json.
        const fs::path iter = resolve_iteration(dir, iteration);
        for (const fs::path& candidate : {dir / "dist_ckpt", iter}) {
            if (!path_exists(candidate / "metadata.json") || !path_exists(candidate / ".metadata")) continue;
            d.dcp = read_dcp_metadata(candidate.string());
            bool has_model = false;
            for (const auto& t : d.dcp.tensors)
                has_model = has_model || t.fqn.starts_with("decoder.") || t.fqn.starts_with("embedding.");
            if (!has_model) continue;  // verl >= 0.7: dist_ckpt holds only optimizer state
            d.layout = Layout::MegatronDist;
            d.backend = "megatron";
            d.weights_dir = candidate.string();
            d.description = "Megatron-core torch_dist (" + candidate.string() + ")";
            add_dcp_jobs(d);
            return d;
        }
        if (looks_like_megatron_legacy(local_dir) || path_exists(iter / "mp_rank_00") || path_exists(iter / "mp_rank_00_000")) {
            d.legacy = discover_megatron_legacy(local_dir, iteration);
            d.layout = Layout::MegatronLegacy;
            d.backend = "megatron";
            d.weights_dir = d.legacy.dir;
            d.description = d.legacy.flavor + " legacy per-rank files" +
                            (d.legacy.iteration ? " (iteration " + std::to_string(*d.legacy.iteration) + ")" : "");
            for (const auto& f : d.legacy.files) d.jobs.push_back({f.path});
            return d;
        }
        if (holds_safetensors(d.default_hf_dir)) {
            d.layout = Layout::HfSafetensors;
            d.backend = "megatron";
            d.weights_dir = d.default_hf_dir;
            d.description = "Hugging Face safetensors already in " + d.default_hf_dir;
            d.notes.push_back(d.default_hf_dir + " already holds safetensors weights (verl >= 0.7 saves them with "
                              "mbridge): they are copied and checked, nothing needs merging");
            return d;
        }
        if (backend == "megatron")
            throw Error(local_dir + ": no Megatron checkpoint (no mp_rank_* folders, no dist_ckpt/ or metadata.json, "
                                    "no latest_checkpointed_iteration.txt)");
    }
    if ((backend == "auto" || backend == "dcp") && path_exists(dir / ".metadata")) {
        d.layout = Layout::Dcp;
        d.backend = "dcp";
        d.weights_dir = local_dir;
        d.dcp = read_dcp_metadata(local_dir);
        d.description = "torch.distributed.checkpoint folder";
        add_dcp_jobs(d);
        return d;
    }
    if (backend == "dcp") throw Error(local_dir + "/.metadata: missing (--backend dcp needs a torch.distributed.checkpoint folder)");
    throw Error(local_dir + ": cannot tell the checkpoint kind: no model_world_size_*_rank_*.pt (FSDP), no mp_rank_* "
                            "folders, dist_ckpt/ or latest_checkpointed_iteration.txt (Megatron), no .metadata (DCP)");
}

MappedCheckpoint map_checkpoint(DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                const HfConfig& config, const MapOptions& options) {
    MappedCheckpoint m;
    m.notes = ckpt.notes;
    m.facts["backend"] = ckpt.backend;
    m.facts["layout"] = ckpt.description;
    m.facts["architecture"] = config.architectures.empty() ? "" : config.architectures[0];
    if ((options.tp_size || options.pp_size) && ckpt.layout != Layout::MegatronLegacy && ckpt.layout != Layout::MegatronAdapter)
        m.notes.push_back("--tp_size/--pp_size not checked: " + ckpt.description +
                          " does not record them (its tensors carry their own placement)");
    SourceLedger ledger = open_ledger(ckpt, scans);
    switch (ckpt.layout) {
        case Layout::Fsdp:
            m.facts["world_size"] = ckpt.fsdp.world_size;
            m.facts["world_size_inferred"] = ckpt.fsdp.world_size_inferred;
            m.mapping = map_fsdp(scans, &ledger);
            drop_non_weight_buffers(m.mapping, ledger, m.notes);
            break;
        case Layout::MegatronLegacy: {
            const ArchitectureInfo arch = architecture_for(config, options.is_value_model);
            const TensorMapping canonical = assemble_rank_files(ckpt, scans, arch, options, m, ledger);
            m.mapping = megatron_to_hf(canonical, arch, config, options.tie_word_embedding, options.allow_unmapped, m.notes,
                                       &ledger);
            break;
        }
        case Layout::MegatronDist: {
            const ArchitectureInfo arch = architecture_for(config, options.is_value_model);
            const TensorMapping canonical = assemble_dcp_tensors(ckpt.dcp, scans, true, &ledger);
            m.mapping = megatron_to_hf(canonical, arch, config, options.tie_word_embedding, options.allow_unmapped, m.notes,
                                       &ledger);
            break;
        }
        case Layout::Dcp: {
            m.mapping = strip_dcp_prefixes(assemble_dcp_tensors(ckpt.dcp, scans, false, &ledger), ckpt.dcp,
                                           ledger);
            drop_non_weight_buffers(m.mapping, ledger, m.notes);
            break;
        }
        case Layout::HfSafetensors:
            m.mapping = map_hf_safetensors(ckpt.weights_dir);
            break;
        case Layout::MegatronAdapter: {
            if (options.lora_base.empty())
                throw Error(ckpt.legacy.dir + ": a Megatron LoRA adapter checkpoint without its base weights (verl does not save "
                            "the frozen base with LoRA); pass --lora_base with the Hugging Face model it was trained on "
                            "(actor_rollout_ref.model.path)");
            const ArchitectureInfo arch = architecture_for(config, options.is_value_model);
            const TensorMapping canonical = assemble_rank_files(ckpt, scans, arch, options, m, ledger);
            const TensorMapping adapters = megatron_adapters_to_peft(canonical, arch, config, m.notes);
            m.mapping = map_hf_safetensors(options.lora_base);
            check_against_config(m.mapping, config, arch);
            const uint32_t offset = static_cast<uint32_t>(m.mapping.sources.size());
            m.mapping.sources.insert(m.mapping.sources.end(), adapters.sources.begin(), adapters.sources.end());
            for (OutputTensor t : adapters.tensors) {
                for (auto& c : t.copies) c.source += offset;
                m.mapping.tensors.push_back(std::move(t));
            }
            m.notes.push_back("base weights from " + options.lora_base);
            break;
        }
    }
    m.account = ledger.settle(m.mapping);
    if (const std::string dropped = dropped_summary(m.account); !dropped.empty()) m.notes.push_back(dropped);
    return m;
}

void check_output_against_config(MappedCheckpoint& m, const DetectedCheckpoint& ckpt, const HfConfig& config,
                                 const MapOptions& options) {
    if (ckpt.layout != Layout::Fsdp && ckpt.layout != Layout::Dcp) return;  // Megatron: in megatron_to_hf
    if (!has_tensor_table(config)) {
        m.notes.push_back("the merged tensors are not checked against " + config.dir + "/config.json: no tensor table for " +
                          (config.architectures.empty() ? std::string("a config without 'architectures'")
                                                        : "architecture " + config.architectures[0]));
        return;
    }
    // A verl critic saves the actor's config.json (a *ForCausalLM) with its own score head:
    // the checkpoint's names say which head it has.
    bool score_head = false, lm_head = false;
    for (const OutputTensor& t : m.mapping.tensors) {
        score_head = score_head || t.name == "score.weight";
        lm_head = lm_head || t.name == "lm_head.weight";
    }
    ArchitectureInfo arch = architecture_for(config, options.is_value_model || (score_head && !lm_head));
    if (options.tie_word_embedding) arch.expected.required.erase("lm_head.weight");  // the rules drop it
    // Names and shapes are all the check reads; an extracted adapter is not part of the model.
    TensorMapping model;
    for (const OutputTensor& t : m.mapping.tensors) {
        if (t.adapter) continue;
        OutputTensor named;
        named.name = t.name;
        named.shape = t.shape;
        model.tensors.push_back(std::move(named));
    }
    check_against_config(model, config, arch);
}

std::string dropped_summary(const SourceAccount& account) {
    const std::string text = account.dropped_text();
    return text.empty() ? "" : "dropped " + text;
}

nlohmann::ordered_json dropped_json(const SourceAccount& account) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [reason, count] : account.dropped)
        j[reason] = {{"count", count}, {"examples", account.examples.at(reason)}};
    return j;
}

}  // namespace vmerge
