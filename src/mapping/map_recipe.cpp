#include "mapping/map_recipe.h"

#include <algorithm>

#include "mapping/output_rules.h"

namespace vmerge {
namespace {

// The embedding / output head copies of the MTP layers (mtp_shared_copies.h): written from
// their originals (after LoRA, so a merged update is in them too, and before the tied head is
// dropped) unless --no_mtp_shared_copies.
void write_mtp_copies(MappedCheckpoint& mapped, const MapOptions& options, bool tied) {
    if (mapped.mtp_shared_copies.empty()) return;
    const auto read = std::count_if(mapped.mtp_shared_copies.begin(), mapped.mtp_shared_copies.end(),
                                    [](const MtpSharedCopy& c) { return c.read.has_value(); });
    if (read)
        mapped.notes.push_back("the checkpoint's " + std::to_string(read) + " embed_tokens / shared_head.head copies of "
                               "its MTP layers equal their originals (compared byte for byte; written once)");
    if (options.no_mtp_shared_copies) {
        mapped.notes.push_back("--no_mtp_shared_copies: the " + std::to_string(mapped.mtp_shared_copies.size()) +
                               " embed_tokens / shared_head.head copies of the MTP layers not written");
        return;
    }
    for (auto& note : add_mtp_shared_copies(mapped.mapping, mapped.mtp_shared_copies, tied)) mapped.notes.push_back(note);
}

// The adapter found in the mapping, extracted or folded as the recipe says.
LoraResult apply_lora_choice(MappedCheckpoint& mapped, const DetectedCheckpoint& checkpoint, const HfConfig& config,
                             const MapRecipe& recipe) {
    LoraOptions lora = recipe.lora;
    lora.checkpoint_dir = checkpoint.dir;
    lora.alpha_unrecorded = mapped.lora_alpha_unrecorded;
    if (!checkpoint.lora_adapter_dir.empty()) lora.adapter_config = checkpoint.lora_adapter_dir + "/adapter_config.json";
    // PeftModel.from_pretrained picks its model class by task_type: a value model's adapter
    // (score head in modules_to_save) must say TOKEN_CLS, as verl's critic and PEFT save it.
    const bool token_classifier =
        !config.architectures.empty() && config.architectures[0].ends_with("ForTokenClassification");
    if (recipe.map.is_value_model || token_classifier) lora.task_type = "TOKEN_CLS";
    LoraResult result = apply_lora(mapped.mapping, lora, checkpoint.dir);
    for (const auto& note : result.notes) mapped.notes.push_back(note);
    return result;
}

// Quantization, then the config.json that states what was written (output_config.h).
void plan_quantized_output(MappedModel& model, const HfConfig& config, const MapRecipe& recipe) {
    model.quantize = recipe.quantize;
    if (model.quantize) model.quantization = plan_quantization(model.mapped.mapping, *model.quantize);
    for (const auto& note : model.quantization.notes) model.mapped.notes.push_back(note);
    // Printed once by merge and inspect (rank 0), each naming the loader rule.
    for (const auto& warning : model.quantization.shape_warnings) model.mapped.notes.push_back(warning);
    model.output_config = plan_output_config(
        config, model.mapped.mapping, recipe.tie_word_embedding,
        model.quantize ? quantization_config(*model.quantize, model.quantization.ignored_modules) : nlohmann::ordered_json());
    for (const auto& note : model.output_config.notes) model.mapped.notes.push_back(note);
}

}  // namespace

MappedModel map_model(MappedCheckpoint mapped, const DetectedCheckpoint& checkpoint, const HfConfig& config,
                      const MapRecipe& recipe, const SourceByteChecks& checks) {
    MappedModel model;
    model.mapped = std::move(mapped);
    MappedCheckpoint& m = model.mapped;
    // The word embeddings are tied by config.json or --tie_word_embedding (for the MTP copies'
    // original: the embedding when there is no lm_head.weight).
    const bool tied = recipe.tie_word_embedding || config.tie_word_embeddings;
    // The checkpoint's own MTP copies against the bytes they copy, before a LoRA update is attached.
    if (checks.mtp_copies) checks.mtp_copies(m.mapping, m.mtp_shared_copies, tied);
    model.lora = apply_lora_choice(m, checkpoint, config, recipe);
    // --tie_word_embedding acts here, after mapping: a Megatron output_layer has become
    // lm_head.weight and is compared with the embedding before the output rules drop it.
    if (checks.tied_head) checks.tied_head(m.mapping, config, recipe.tie_word_embedding);
    write_mtp_copies(m, recipe.map, tied);
    for (auto& note : apply_output_rules(m.mapping, config, parse_dtype_choice(recipe.dtype), recipe.tie_word_embedding))
        m.notes.push_back(note);
    check_output_against_config(m, checkpoint, config, recipe.map, recipe.tie_word_embedding);
    plan_quantized_output(model, config, recipe);
    return model;
}

}  // namespace vmerge
