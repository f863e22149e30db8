#include "exec/tied_embedding.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "exec/copy_executor.h"
#include "core/error.h"
#include "core/tensor_ref.h"
#include "plan/rank_work.h"

namespace vmerge {
namespace {

std::optional<size_t> index_of(const TensorMapping& mapping, const std::string& name) {
    for (size_t i = 0; i < mapping.tensors.size(); ++i)
        if (mapping.tensors[i].name == name) return i;
    return std::nullopt;
}

// Rows [begin, end) of tensor `index` as the executor assembles them.
void read_rows(CopyExecutor& executor, const TensorMapping& mapping, size_t index, int64_t begin, int64_t end,
               std::vector<unsigned char>& rows) {
    const uint64_t row = row_bytes(mapping.tensors[index]);
    rows.assign(static_cast<size_t>(end - begin) * row, 0);
    executor.run({{index, begin, end}}, [&](const RowBlock& b) {
        std::memcpy(rows.data() + static_cast<size_t>(b.row_begin - begin) * row, b.data, b.size);
    });
}

// "lm_head.weight [8, 4] bfloat16": for messages about two tensors that should be one.
std::string described(const OutputTensor& t) {
    return t.name + " " + shape_to_string(t.shape) + " " + std::string(torch_name(t.dtype));
}

// Why tying is asked for, for the messages.
std::string tie_reason(const HfConfig& config, bool flag) {
    return flag ? std::string("--tie_word_embedding") : config.dir + "/config.json has tie_word_embeddings true";
}

std::string keep_hint(bool flag) {
    return flag ? "; merge without --tie_word_embedding to keep the trained head"
                : "; to keep the trained head, pass --hf_config with a copy of the config that says "
                  "tie_word_embeddings: false";
}

// A mapping of just `a` and `b` and the sources their copies read (`a` and `b` may come from
// outside `mapping`'s tensors: a copy set aside). LoRA updates are not carried over.
TensorMapping pair_mapping(const TensorMapping& mapping, const OutputTensor& a, const OutputTensor& b) {
    TensorMapping pair;
    std::map<uint32_t, uint32_t> renumbered;
    for (const OutputTensor* t : {&a, &b}) {
        OutputTensor own = *t;
        own.lora_delta.reset();
        for (BoxCopy& c : own.copies) {
            if (c.source >= mapping.sources.size())
                throw Error(t->name + ": copy reads source " + std::to_string(c.source) + " of " +
                            std::to_string(mapping.sources.size()));
            auto [it, fresh] = renumbered.emplace(c.source, static_cast<uint32_t>(pair.sources.size()));
            if (fresh) pair.sources.push_back(mapping.sources[c.source]);
            c.source = it->second;
        }
        pair.tensors.push_back(std::move(own));
    }
    return pair;
}

}  // namespace

std::optional<int64_t> first_differing_row(const TensorMapping& mapping, size_t a, size_t b, uint64_t max_memory,
                                           int rank, int ranks) {
    const OutputTensor& first = mapping.tensors[a];
    const int64_t rows = row_count(first);
    const int64_t begin = rows * rank / std::max(1, ranks), end = rows * (rank + 1) / std::max(1, ranks);
    const uint64_t row = std::max<uint64_t>(1, row_bytes(first));
    const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(max_memory / 4 / row));
    CopyExecutor executor(mapping, max_memory / 4);
    std::vector<unsigned char> a_rows, b_rows;
    for (int64_t r = begin; r < end; r += block) {
        const int64_t r_end = std::min(end, r + block);
        read_rows(executor, mapping, a, r, r_end, a_rows);
        read_rows(executor, mapping, b, r, r_end, b_rows);
        for (int64_t k = 0; k < r_end - r; ++k)
            if (std::memcmp(a_rows.data() + k * row, b_rows.data() + k * row, row) != 0) return r + k;
    }
    return std::nullopt;
}

void check_tied_head(const TensorMapping& mapping, const HfConfig& config, bool tie_word_embedding,
                     uint64_t max_memory, int rank, int ranks) {
    if (!tie_word_embedding && !config.tie_word_embeddings) return;
    const auto head = index_of(mapping, kHeadName);
    if (!head) return;
    const std::string reason = tie_reason(config, tie_word_embedding);
    const auto embedding = index_of(mapping, kEmbeddingName);
    if (!embedding)
        throw Error(reason + ", but the checkpoint has " + kHeadName + " and no " + kEmbeddingName +
                    " it could be tied to: dropping it would lose the trained head" + keep_hint(tie_word_embedding));
    const OutputTensor& h = mapping.tensors[*head];
    const OutputTensor& e = mapping.tensors[*embedding];
    if (h.shape != e.shape || h.dtype != e.dtype)
        throw Error(reason + ", but " + described(h) + " and " + described(e) +
                    " differ: tying would drop the trained head" + keep_hint(tie_word_embedding));
    if (const auto row = first_differing_row(mapping, *head, *embedding, max_memory, rank, ranks))
        throw Error(reason + ", but " + kHeadName + " differs from " + kEmbeddingName + " (first at row " +
                    std::to_string(*row) + "): tying would drop the trained head" + keep_hint(tie_word_embedding));
}

void check_mtp_shared_copies(const TensorMapping& mapping, const std::vector<MtpSharedCopy>& copies, bool tied,
                             uint64_t max_memory, int rank, int ranks) {
    const std::string why = ": an MTP layer's copy must equal the tensor it copies (DeepSeek-V3's release; vLLM's "
                            "MTP loader reads it as that tensor)";
    for (const MtpSharedCopy& copy : copies) {
        if (!copy.read) continue;
        const std::string original = mtp_copy_original(mapping, copy, tied);
        if (original.empty())
            throw Error("the checkpoint holds " + copy.name + " but no " + (copy.head ? kHeadName : kEmbeddingName) +
                        " it copies" + why);
        const OutputTensor& o = mapping.tensors[*index_of(mapping, original)];
        const OutputTensor& c = *copy.read;
        if (o.shape != c.shape || o.source_dtype != c.source_dtype)
            throw Error("the checkpoint's " + described(c) + " and " + described(o) + " differ in shape or dtype" + why);
        const TensorMapping pair = pair_mapping(mapping, c, o);
        if (const auto row = first_differing_row(pair, 0, 1, max_memory, rank, ranks))
            throw Error("the checkpoint's " + copy.name + " differs from " + original + " (first at row " +
                        std::to_string(*row) + ")" + why);
    }
}

}  // namespace vmerge
