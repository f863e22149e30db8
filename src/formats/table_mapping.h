#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/source_ledger.h"
#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// `assembled` (a tensor [n*d, ...] described by its box copies) with its rows regrouped per
// head from interleaved-complex RoPE order into HF's rotate-half order: HF row
// h*d + j*(d/2) + p takes row h*d + 2p + j (head h, p < d/2, j in {0, 1}). Box copies only,
// one row each. Error when the rows are not `heads` heads of an even head dim.
OutputTensor rope_permuted(const OutputTensor& assembled, int64_t heads, const std::string& name);

// A grouped tensor [E, ...] as E tensors [...], expert e named `name_of(e)`: each copy of
// `grouped` becomes copies from views of its source at the expert's index (appended to
// `sources`), so no byte moves twice.
std::vector<OutputTensor> split_experts(const OutputTensor& grouped, const std::string& name_pattern,
                                        const std::string& layer, std::vector<TensorRef>& sources);

// `assembled` with its last two axes swapped, named `name`: each copy reads a transposed view of
// its source (appended to `sources`). Error for a tensor of fewer than two axes.
OutputTensor transposed(const OutputTensor& assembled, const std::string& name, std::vector<TensorRef>& sources);

// `assembled` with the [gate | up] halves of its last axis interleaved, named `name`: column
// 2j + k of the result is column k*F + j (F the half), as GPT-OSS's gate_up_proj [E, H, 2F] and
// its bias hold them. The copies address the result as its copies_view [.., F, 2], each one
// half's columns of one piece, read through a view of its source with a unit last axis. Error
// for an odd last axis or a tensor already viewed.
OutputTensor gate_up_interleaved(const OutputTensor& assembled, const std::string& name, std::vector<TensorRef>& sources);

// A fused expert tensor under a transform of a Megatron stack_experts rule (transpose,
// interleave_gate_up or both, in that order); other transforms leave it as it is.
OutputTensor fused_expert_transformed(const OutputTensor& fused, TableTransform transform, std::vector<TensorRef>& sources);

// What applying a table did: the output tensors in HF order, and per rule how many
// checkpoint tensors it took (inspect --json's "architecture_table").
struct TableApplication {
    TensorMapping mapping;
    nlohmann::ordered_json applied;
};

// Renames and regroups `model` (checkpoint tensors under their own names, training state
// already taken out) into HF tensors by `table`. Tensors a rule drops, and the tied head
// when config.json ties the embeddings, are dropped in `ledger` with their reason; a tensor
// no rule matches is an Error listing every one (with `allow_unmapped`: dropped and listed in
// `notes`). Two tensors that give one HF name are an Error.
TableApplication apply_architecture_table(const TensorMapping& model, const ArchitectureTable& table,
                                          const HfConfig& config, bool allow_unmapped,
                                          std::vector<std::string>& notes, SourceLedger& ledger);

// A grouped [E, 2F, ...] tensor of fused [gate; up] rows as the gate and the up tensor [F, ...] of
// each expert, named by the two '|'-separated patterns of `names` ({e}: the expert).
std::vector<OutputTensor> split_experts_gate_up(const OutputTensor& grouped, const std::string& names,
                                               const std::string& layer, std::vector<TensorRef>& sources);

// Renames, in place, the tensors of a checkpoint that keeps the model's own module names (FSDP,
// DCP, DeepSpeed) by the rules of `table`, the 'hf' table of config.json's architecture: from
// the names transformers uses at run time to those its save_pretrained writes (Qwen2.5-VL's
// model.language_model.* -> model.*, transformers 5's fused experts -> one tensor per expert).
// A tensor no rule matches keeps its name, an adapter tensor is left alone, a renamed one keeps
// its LoRA delta; regrouping one that has a delta is an Error. Two tensors that end with one
// name are an Error naming both. A PEFT-wrapped state dict (formats/peft_wrapping.h) is renamed
// inside its wrapping: base_model.model.model.language_model.layers.0.q_proj.lora_A.default.weight
// -> base_model.model.model.layers.0.q_proj.lora_A.default.weight, like its base_layer weight, so
// apply_lora pairs them under the saved names; each renamed module's run-time path is kept in
// mapping.peft_run_time_modules (PEFT's own names, for the exported adapter). Regrouping a
// wrapped tensor (an adapted fused expert) is an Error.
void apply_saved_names(TensorMapping& mapping, const ArchitectureTable& table, const HfConfig& config,
                       SourceLedger& ledger, std::vector<std::string>& notes);

// The HF tensors config.json implies, checked as for Megatron (check_against_config) with the
// table's config_check architecture; a table without one gives a note instead.
void check_table_output(const TensorMapping& mapping, const ArchitectureTable& table, const HfConfig& config,
                        const ArchitectureTables& tables, std::vector<std::string>& notes);

}  // namespace vmerge
