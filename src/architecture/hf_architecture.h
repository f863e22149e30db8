#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "core/tensor_ref.h"

namespace vmerge {

// The model facts the rules need, read from config.json (docs/reference/megatron-formats.md §5.4).
struct ArchitectureInfo {
    std::string name;        // architectures[0]
    // The 'hf' table whose tensor set `expected` comes from (that of the architecture itself,
    // or of the one the megatron table's config_check names); "" when there is none (the
    // output is not checked).
    std::string tensor_set_file;
    std::string table_file, table_name;  // the source 'megatron' table the rules come from
    bool value_model = false;
    int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, layers = 0;
    // Multi-token prediction depths written as model.layers.{layers + k} (config.json's
    // num_nextn_predict_layers; 0 with --drop_mtp, whose mtp.* tensors are then dropped).
    int64_t mtp_layers = 0;
    bool drop_mtp = false;
    // The HF release holds embed_tokens / shared_head.head copies in its MTP layers (the 'hf'
    // table's mtp_shared_copies): config.json then allows them (mtp_shared_copies.h writes them).
    bool mtp_shared_copies = false;
    // The megatron table matches MTP keys under their own names (ArchitectureTable::mtp_own_names).
    bool mtp_own_names = false;
    // --pad_vocab: an embedding or head with fewer rows than vocab_size is padded with zero rows
    // (otherwise the config contradicts the checkpoint: an Error naming both sizes).
    bool pad_vocab = false;
    // The source 'megatron' table's rules, a value model's score-head rules first.
    std::vector<TableRule> rules;
    ExpectedTensors expected;  // what config.json implies (tensor_set.h)
};

// The tensor set of HF `architecture`: its 'hf' table's tensor_set with every set it extends
// applied beneath it; nullopt when no 'hf' table gives one (Error on an `extends` naming an
// architecture without a set, or a cycle).
std::optional<TensorSet> tensor_set_for(const ArchitectureTables& tables, const std::string& architecture);

// Chooses the name table from config.json `architectures`: the source 'megatron' table of the
// shipped ones and `table_files` (--architecture_table) that lists it (Error naming the
// architecture and the supported ones when none). `value_model` forces the score head.
ArchitectureInfo architecture_for(const HfConfig& config, bool value_model, bool drop_mtp,
                                  const ArchitectureTables& tables);

// The part a multimodal Megatron model nests a key under: "language_model." (its GPTModel) or
// "vision_model." (its vision encoder and projector), as megatron-core's LLaVA, mbridge's
// Qwen2.5-VL and Megatron-Bridge's Qwen3-VL name them; "" for a plain GPTModel key. Each part
// numbers its own decoder layers: the rest of the key reads as a GPTModel key does.
std::string_view megatron_submodel_prefix(std::string_view key);

// A Megatron MTP key (mtp.layers.{k}.transformer_layer.<rest>, also the runtime name
// mtp_model_layer, and the MTP block's own enorm/hnorm/eh_proj/final_layernorm) as the
// canonical decoder key of HF layer L + k that the name rules map (Megatron-Bridge's MTP
// mapping); nullopt for other keys. `depth` is set to k.
std::optional<std::string> canonical_mtp_key(const std::string& key, int64_t layers, int64_t& depth);
// A rule's section rows (TableRule::section_rows) added up, and as "a + b + c" for messages.
struct SectionRowsSum {
    int64_t total = 0;
    std::string text;
};
SectionRowsSum section_rows_sum(const std::vector<int64_t>& rows);
// The key the rules of `arch` match an MTP key by: canonical_mtp_key's, or nullopt (the key as it
// is, or not an MTP key) when the table names MTP tensors under their own names.
std::optional<std::string> mtp_rule_key(const ArchitectureInfo& arch, const std::string& key, int64_t& depth);
// What config.json implies for `architecture` by its tensor set (nullopt when none): a value
// model's score head when `value_model`, the MTP depths of num_nextn_predict_layers when
// `with_mtp`.
std::optional<ExpectedTensors> expected_tensors_for(const HfConfig& config, const ArchitectureTables& tables,
                                                    const std::string& architecture, bool value_model, bool with_mtp);

// Whether an 'hf' table gives the tensor set of config.json's architectures[0].
bool has_tensor_table(const HfConfig& config, const ArchitectureTables& tables);

// The rules of `arch` that took tensors, as inspect --json prints them.
nlohmann::ordered_json megatron_rules_json(const ArchitectureInfo& arch, const std::map<size_t, size_t>& used);

// A rule's name pattern with {i} (layer) and {e} (expert) replaced.
std::string substitute_rule(std::string_view pattern, const std::string& layer, const std::string& expert);
// The parts of a '|'-separated list of names (a split rule's TableRule::to).
std::vector<std::string> split_names(std::string_view names);

// Finds the rule for a canonical Megatron key with global layer/expert numbers and returns
// the HF names it produces (one, or several for a split); nullopt when unmapped.
struct RuleMatch {
    const TableRule* rule = nullptr;
    std::vector<std::string> hf_names;
    std::string expert;  // the expert number {e} matched ("" when the rule has none)
};
std::optional<RuleMatch> match_rule(const ArchitectureInfo& arch, const std::string& megatron_key);

}  // namespace vmerge
