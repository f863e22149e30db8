#include "mapping/output_rules.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"

namespace vmerge {

DTypeChoice parse_dtype_choice(const std::string& text) {
    if (text == "auto") return DTypeChoice::Auto;
    if (text == "keep") return DTypeChoice::Keep;
    if (text == "bf16" || text == "bfloat16") return DTypeChoice::BF16;
    if (text == "fp16" || text == "float16" || text == "half") return DTypeChoice::F16;
    if (text == "fp32" || text == "float32" || text == "float") return DTypeChoice::F32;
    throw Error("--dtype " + text + ": expected auto, keep, bf16, fp16 or fp32");
}

std::vector<std::string> apply_output_rules(TensorMapping& mapping, const HfConfig& config,
                                            DTypeChoice choice, bool tie_word_embeddings) {
    std::vector<std::string> notes;
    if (tie_word_embeddings || config.tie_word_embeddings) {
        auto& tensors = mapping.tensors;
        auto it = std::find_if(tensors.begin(), tensors.end(),
                               [](const OutputTensor& t) { return t.name == "lm_head.weight"; });
        if (it != tensors.end()) {
            tensors.erase(it);
            notes.push_back("tied word embeddings: lm_head.weight is not written (it is model.embed_tokens.weight)");
        }
    }
    std::optional<DType> target;
    switch (choice) {
        case DTypeChoice::Keep: break;
        case DTypeChoice::BF16: target = DType::BF16; break;
        case DTypeChoice::F16: target = DType::F16; break;
        case DTypeChoice::F32: target = DType::F32; break;
        case DTypeChoice::Auto:
            target = config.dtype;
            if (!target) notes.push_back(config.dir + "/config.json has no dtype: tensors keep their stored dtype");
            break;
    }
    if (!target) return notes;
    size_t cast = 0, kept_fp32 = 0;
    for (auto& t : mapping.tensors) {
        // An extracted adapter keeps the dtype it was trained in, as PEFT saves it.
        if (t.adapter || (!is_floating(t.source_dtype) && !t.source_scales)) continue;
        if (choice == DTypeChoice::Auto && t.keep_float32) {
            t.dtype = DType::F32;
            ++kept_fp32;
            continue;
        }
        // A block-FP8 source is dequantized to float32 first (block_dequantize.h), then cast.
        const DType from = t.source_scales ? DType::F32 : t.source_dtype;
        if (t.source_scales ? t.dtype == *target : t.source_dtype == *target) continue;
        if (!can_cast(from, *target))
            throw Error(t.name + ": cannot cast " + std::string(torch_name(t.source_dtype)) + " to " +
                        std::string(torch_name(*target)));
        t.dtype = *target;
        ++cast;
    }
    if (kept_fp32 && *target != DType::F32)
        notes.push_back(std::to_string(kept_fp32) + " tensors written in float32, which the architecture keeps in float32 "
                        "(architecture table keep_fp32)");
    if (cast)
        notes.push_back(std::to_string(cast) + " tensors cast to " + std::string(torch_name(*target)) +
                        " (round to nearest even)");
    return notes;
}

}  // namespace vmerge
