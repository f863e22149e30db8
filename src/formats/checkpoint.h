#pragma once
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "architecture/mtp_shared_copies.h"
#include "core/error.h"
#include "core/tensor_mapping.h"
#include "formats/backend_flags.h"
#include "formats/source_ledger.h"
#include "torch/dcp_metadata.h"

namespace vmerge {

// A torch.save archive to scan: a whole file, or an item inside a .distcp file.
struct ScanJob {
    std::string path;
    uint64_t base = 0;
    uint64_t length = 0;  // 0: to the end of the file
};

class Backend;  // formats/backend.h

// What one layout's detect found beyond the fields every checkpoint has (its rank files, its
// DCP metadata, ...): kept with the detection result, read back only by the layout that made
// it (DetectedCheckpoint::keep and ::kept). A new layout adds its own type, in its own folder.
struct LayoutState {
    virtual ~LayoutState() = default;
};
template <class T>
struct LayoutStateOf final : LayoutState {
    explicit LayoutStateOf(T v) : value(std::move(v)) {}
    T value;
};

// What a backend's detect found: the backend, its files, and the archives to scan.
struct DetectedCheckpoint {
    const Backend* source = nullptr;  // the layout that detected it (nullptr: --simulate)
    std::string backend;      // the --backend value it belongs to (registry.h)
    std::string description;  // for people: "verl FSDP", "Megatron-LM legacy (iteration 20)", ...
    std::string weights_dir;
    std::string default_hf_dir;
    // Files in default_hf_dir that belong to training, not to the model (names, or "dir/"
    // prefixes): never copied into the output.
    std::vector<std::string> training_files;
    // The folder read after following a verl run's levels (checkpoint_level.h), and how.
    std::string dir;
    std::vector<std::string> resolved;
    // Set when the checkpoint records no config.json anywhere (a verl v2 dist-only save): the
    // Error, asking for --hf_config, that a merge without --hf_config stops with.
    std::string config_missing;
    // A PEFT adapter export (Megatron-Bridge LoRA: model/huggingface/adapter/): its
    // adapter_config.json gives alpha; its adapter_model.safetensors is read when the
    // checkpoint's shards hold no adapter.
    std::string lora_adapter_dir;
    std::vector<std::string> notes;
    // The weights are saved under their HF names by a backend that names none itself (a
    // torchtitan last_save_in_hf step): checked against config.json like names_own_tensors.
    bool hf_named = false;
    std::vector<ScanJob> jobs;
    // The source ledger's name of each job's entries when their archive has no key of its own
    // (a DCP chunk: "'fqn' chunk [offsets]"); empty: the archive keys name them.
    std::vector<std::string> job_names;
    // Entries the checkpoint holds that are never scanned (a DCP bytes item): dropped as such.
    std::vector<std::string> unscanned_items;
    // The layout flags given (--iteration, --lora_base, ...): the detecting layout reads its own.
    BackendFlags flags;
    std::shared_ptr<const LayoutState> state;

    template <class T>
    void keep(T value) {
        state = std::make_shared<const LayoutStateOf<T>>(std::move(value));
    }
    // The state kept, or nullptr when the layout kept none of this type.
    template <class T>
    const T* kept_if() const {
        const auto* s = dynamic_cast<const LayoutStateOf<T>*>(state.get());
        return s ? &s->value : nullptr;
    }
    template <class T>
    const T& kept() const {
        const T* value = kept_if<T>();
        if (!value) throw Error("internal: " + description + " holds no state of the layout asked for");
        return *value;
    }
};

struct MapOptions {
    bool is_value_model = false;
    bool allow_unmapped = false;
    std::optional<int> tp_size;
    std::optional<int> pp_size;
    std::vector<std::string> architecture_tables;  // --architecture_table files (add or override)
    // The shipped tables and those files, loaded once per merge (load_architecture_tables) by
    // whoever runs the mapping; every stage reads them through loaded_tables().
    std::shared_ptr<const ArchitectureTables> tables;
    const ArchitectureTables& loaded_tables() const {
        if (!tables) throw Error("internal: the architecture tables were not loaded before mapping");
        return *tables;
    }
    bool drop_mtp = false;  // --drop_mtp: leave multi-token prediction layers out (recorded)
    // --no_mtp_shared_copies: write no embed_tokens / shared_head.head copies in MTP layers
    // (mtp_shared_copies.h); an architecture whose release holds them gets them by default.
    bool no_mtp_shared_copies = false;
    bool pad_vocab = false;  // --pad_vocab: zero rows up to vocab_size where the checkpoint holds fewer
    // `map` (learned_map/): the checkpoint's tensors under its own canonical names, assembled as a
    // merge assembles them but given to no table (the table is what map learns). Layouts that
    // name tensors by a table (torchtitan, torch_dist) stop before it (map refuses the others).
    bool checkpoint_names = false;
};

struct MappedCheckpoint {
    TensorMapping mapping;
    nlohmann::ordered_json facts;  // detected parallelism, architecture, ... for inspect
    std::vector<std::string> notes;
    SourceAccount account;  // every scanned entry: written, or dropped for a named reason
    // Output names left out on the user's request (--exclude_frozen_parameters): not "missing"
    // when the output is checked against config.json.
    std::set<std::string> left_out;
    // The embedding / output head copies the MTP layers take (an architecture whose 'hf' table
    // says mtp_shared_copies), each with the checkpoint's own copy when it holds one (set aside,
    // to be compared with the original: check_mtp_shared_copies).
    std::vector<MtpSharedCopy> mtp_shared_copies;
    // Set when the adapter's alpha is recorded nowhere in the checkpoint (Megatron-Bridge LoRA
    // shards): why, for the error that asks for --lora_alpha.
    std::string lora_alpha_unrecorded;
    // map (MapOptions::checkpoint_names) of a legacy Megatron save: the tp rule that joined the
    // tensor-parallel pieces of each tensor of `mapping`, a name appearing once per rule its
    // pieces' shapes allow (the values choose; assemble_megatron_legacy_alternatives). Empty
    // for every other layout (its tensors are whole).
    std::vector<TpRule> tp_assemblies;
};

// Applies the detecting backend's rules to the scans (`scans[i]` belongs to `ckpt.jobs[i]`).
// Every scanned entry ends in the output or in `account` with its reason; one that ends in
// neither, or an unrecognised object where a tensor belongs, is an Error naming file and key.
MappedCheckpoint map_checkpoint(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                const HfConfig& config, const MapOptions& options);

// Buffers a model's state dict may hold that are not weights of the Hugging Face model
// (rotary inv_freq, TransformerEngine _extra_state): taken out of `mapping`, each dropped
// in `ledger` with its reason, and a note when any was. For backends that keep every key.
void drop_non_weight_buffers(TensorMapping& mapping, SourceLedger& ledger, std::vector<std::string>& notes);

// The scan jobs of a DCP folder's chunks, in metadata order (tensor by tensor, chunk by chunk),
// each named for the ledger, and its bytes items as never scanned.
void add_dcp_jobs(DetectedCheckpoint& d, const DcpMetadata& meta);

// FSDP and plain DCP name their own tensors (Backend::names_own_tensors): once the output rules have run, their set is
// checked against what config.json implies, as megatron_to_hf does for Megatron (Error
// naming the missing, unexpected and misshapen tensors). An architecture vmerge has no
// table for is not checked, with a note saying so.
// `tie_word_embedding` (--tie_word_embedding): the output rules dropped lm_head.weight.
void check_output_against_config(MappedCheckpoint& m, const DetectedCheckpoint& ckpt, const HfConfig& config,
                                 const MapOptions& options, bool tie_word_embedding);

// The merge summary / inspect line for `account` ("dropped 12 source entries: ..."); "" when none.
std::string dropped_summary(const SourceAccount& account);
nlohmann::ordered_json dropped_json(const SourceAccount& account);

}  // namespace vmerge
