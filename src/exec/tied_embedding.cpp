#include "exec/tied_embedding.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "exec/copy_executor.h"
#include "core/error.h"
#include "core/tensor_ref.h"
#include "plan/rank_work.h"

namespace vmerge {
namespace {

constexpr const char* kHead = "lm_head.weight";
constexpr const char* kEmbedding = "model.embed_tokens.weight";

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

// Why tying is asked for, for the messages.
std::string tie_reason(const HfConfig& config, bool flag) {
    return flag ? std::string("--tie_word_embedding") : config.dir + "/config.json has tie_word_embeddings true";
}

std::string keep_hint(bool flag) {
    return flag ? "; merge without --tie_word_embedding to keep the trained head"
                : "; to keep the trained head, pass --hf_config with a copy of the config that says "
                  "tie_word_embeddings: false";
}

}  // namespace

void check_tied_head(const TensorMapping& mapping, const HfConfig& config, bool tie_word_embedding,
                     uint64_t max_memory, int rank, int ranks) {
    if (!tie_word_embedding && !config.tie_word_embeddings) return;
    const auto head = index_of(mapping, kHead);
    if (!head) return;
    const std::string reason = tie_reason(config, tie_word_embedding);
    const auto embedding = index_of(mapping, kEmbedding);
    if (!embedding)
        throw Error(reason + ", but the checkpoint has " + kHead + " and no " + kEmbedding +
                    " it could be tied to: dropping it would lose the trained head" + keep_hint(tie_word_embedding));
    const OutputTensor& h = mapping.tensors[*head];
    const OutputTensor& e = mapping.tensors[*embedding];
    if (h.shape != e.shape || h.dtype != e.dtype)
        throw Error(reason + ", but " + kHead + " " + shape_to_string(h.shape) + " " + std::string(torch_name(h.dtype)) +
                    " and " + kEmbedding + " " + shape_to_string(e.shape) + " " + std::string(torch_name(e.dtype)) +
                    " differ: tying would drop the trained head" + keep_hint(tie_word_embedding));
    const int64_t rows = row_count(h);
    const int64_t begin = rows * rank / std::max(1, ranks), end = rows * (rank + 1) / std::max(1, ranks);
    const uint64_t row = std::max<uint64_t>(1, row_bytes(h));
    const int64_t block = std::max<int64_t>(1, static_cast<int64_t>(max_memory / 4 / row));
    CopyExecutor executor(mapping, max_memory / 4);
    std::vector<unsigned char> head_rows, embedding_rows;
    for (int64_t r = begin; r < end; r += block) {
        const int64_t r_end = std::min(end, r + block);
        read_rows(executor, mapping, *head, r, r_end, head_rows);
        read_rows(executor, mapping, *embedding, r, r_end, embedding_rows);
        for (int64_t k = 0; k < r_end - r; ++k)
            if (std::memcmp(head_rows.data() + k * row, embedding_rows.data() + k * row, row) != 0)
                throw Error(reason + ", but " + kHead + " differs from " + kEmbedding + " (first at row " +
                            std::to_string(r + k) + "): tying would drop the trained head" + keep_hint(tie_word_embedding));
    }
}

}  // namespace vmerge
