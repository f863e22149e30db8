#include "formats/checkpoint.h"

#include "core/box_region.h"
#include "architecture/config_check.h"
#include "core/error.h"
#include "formats/backend.h"
#include "formats/peft_wrapping.h"
#include "architecture/architecture_table.h"
#include "architecture/hf_architecture.h"
#include "formats/table_mapping.h"

namespace vmerge {
namespace {

// One account per scanned entry; one without an archive key of its own (a DCP chunk of
// torch_dist or plain DCP) is named by DetectedCheckpoint::job_names, and the entries never
// scanned (DCP bytes items) are dropped as such.
SourceLedger open_ledger(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans) {
    SourceLedger ledger(scans, ckpt.job_names);
    for (const auto& item : ckpt.unscanned_items) ledger.drop_unscanned(item, DropReason::BytesItem);
    return ledger;
}

}  // namespace

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

// Tensors the HF architecture keeps in float32 (its source 'hf' table's keep_fp32, e.g.
// DeepSeek-V3's e_score_correction_bias, which transformers loads in float32 whatever the
// model dtype): marked for the output rules. A PEFT-wrapped name by the model tensor's.
static void mark_float32_tensors(MappedCheckpoint& m, const HfConfig& config, const MapOptions& options) {
    if (config.architectures.empty()) return;
    const ArchitectureTable* table = find_architecture_table(options.loaded_tables(), "hf", config.architectures[0]);
    if (!table) return;
    for (OutputTensor& t : m.mapping.tensors)
        t.keep_float32 = t.keep_float32 || table_keeps_fp32(*table, peft_wrapping(t.name).model_name());
}

// An architecture whose release keeps embedding / output head copies in its MTP layers (its 'hf'
// table's mtp_shared_copies): the copies the checkpoint holds are set aside, each dropped with
// its reason (compared with its original once the bytes can be read, and written from it).
static void set_aside_mtp_copies(MappedCheckpoint& m, const HfConfig& config, const MapOptions& options,
                                 SourceLedger& ledger) {
    if (config.architectures.empty()) return;
    const ArchitectureTable* table = find_architecture_table(options.loaded_tables(), "hf", config.architectures[0]);
    if (!table || !table->mtp_shared_copies) return;
    m.mtp_shared_copies = set_aside_mtp_shared_copies(m.mapping);
    for (const MtpSharedCopy& copy : m.mtp_shared_copies)
        if (copy.read) ledger.drop_output(*copy.read, m.mapping.sources, DropReason::MtpSharedCopy);
}

void add_dcp_jobs(DetectedCheckpoint& d, const DcpMetadata& meta) {
    for (const auto& t : meta.tensors)
        for (const auto& c : t.chunks) {
            d.jobs.push_back({c.file, c.offset, c.length});
            d.job_names.push_back("'" + t.fqn + "' chunk " + shape_to_string(c.offsets));
        }
    for (const auto& fqn : meta.byte_items) d.unscanned_items.push_back(meta.dir + "/.metadata '" + fqn + "'");
}

namespace {

// A checkpoint that keeps the model's own module names holds transformers' run-time names:
// the rules of the architecture's 'hf' table give the names its save_pretrained writes.
void name_as_saved(MappedCheckpoint& m, const DetectedCheckpoint& ckpt, const HfConfig& config, const MapOptions& options,
                   SourceLedger& ledger) {
    if (!ckpt.source || !(ckpt.source->names_own_tensors() || ckpt.hf_named) || config.architectures.empty()) return;
    const ArchitectureTable* hf = find_architecture_table(options.loaded_tables(), "hf", config.architectures[0]);
    if (hf && !hf->rules.empty()) apply_saved_names(m.mapping, *hf, config, ledger, m.notes);
}

}  // namespace

MappedCheckpoint map_checkpoint(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                const HfConfig& config, const MapOptions& options) {
    MappedCheckpoint m;
    m.notes = ckpt.notes;
    m.facts["backend"] = ckpt.backend;
    m.facts["layout"] = ckpt.description;
    m.facts["architecture"] = config.architectures.empty() ? "" : config.architectures[0];
    if ((options.tp_size || options.pp_size) && !ckpt.source->records_parallelism())
        m.notes.push_back("--tp_size/--pp_size not checked: " + ckpt.description +
                          " does not record them (its tensors carry their own placement)");
    SourceLedger ledger = open_ledger(ckpt, scans);
    ckpt.source->map(ckpt, scans, config, options, m, ledger);
    name_as_saved(m, ckpt, config, options, ledger);
    mark_float32_tensors(m, config, options);
    set_aside_mtp_copies(m, config, options, ledger);
    m.account = ledger.settle(m.mapping);
    if (const std::string dropped = dropped_summary(m.account); !dropped.empty()) m.notes.push_back(dropped);
    return m;
}

void check_output_against_config(MappedCheckpoint& m, const DetectedCheckpoint& ckpt, const HfConfig& config,
                                 const MapOptions& options, bool tie_word_embedding) {
    if (!ckpt.source || !(ckpt.source->names_own_tensors() || ckpt.hf_named)) return;  // Megatron: in megatron_to_hf
    const std::string architecture = config.architectures.empty() ? "" : config.architectures[0];
    // A verl critic saves the actor's config.json (a *ForCausalLM) with its own score head:
    // the checkpoint's names say which head it has.
    bool score_head = false, lm_head = false;
    for (const OutputTensor& t : m.mapping.tensors) {
        score_head = score_head || t.name == "score.weight";
        lm_head = lm_head || t.name == "lm_head.weight";
    }
    // HF models of an MTP architecture (transformers drops the MTP layer on load) are checked
    // without it unless the checkpoint holds it.
    bool mtp = false;
    for (const OutputTensor& t : m.mapping.tensors) mtp = mtp || t.name.ends_with(".enorm.weight");
    const bool value_model =
        options.is_value_model || (score_head && !lm_head) || architecture.ends_with("ForTokenClassification");
    std::optional<ExpectedTensors> expected =
        architecture.empty() ? std::nullopt
                             : expected_tensors_for(config, options.loaded_tables(), architecture, value_model,
                                                    !options.drop_mtp && mtp);
    if (!expected) {
        m.notes.push_back("the merged tensors are not checked against " + config.dir + "/config.json: no tensor table for " +
                          (architecture.empty() ? std::string("a config without 'architectures'")
                                                : "architecture " + architecture));
        return;
    }
    if (tie_word_embedding) expected->required.erase("lm_head.weight");  // the rules drop it
    for (const auto& name : m.left_out) expected->required.erase(name);
    // Names and shapes are all the check reads; an extracted adapter is not part of the model.
    TensorMapping model;
    for (const OutputTensor& t : m.mapping.tensors) {
        if (t.adapter) continue;
        OutputTensor named;
        named.name = t.name;
        named.shape = t.shape;
        model.tensors.push_back(std::move(named));
    }
    check_against_config(model, config, architecture, *expected, value_model);
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
