// A merge into a bucket (output/s3/): the parts each weight file is cut into, who sends each,
// and the ranks' assembly of them with the pieces they trade, checked against the whole file.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "output/s3/rank_parts.h"
#include "output/s3/upload_plan.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/rank_work.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::tensor;

std::vector<OutputTensor> model() {
    return {tensor("model.embed_tokens.weight", DType::BF16, {301, 64}), tensor("model.norm.weight", DType::F32, {64}),
            tensor("lm_head.weight", DType::BF16, {301, 64}), tensor("model.layers.0.mlp.up_proj.weight", DType::F32, {97, 33})};
}

// The byte the copy writes at `offset` of `file`, the same whoever writes it.
unsigned char byte_at(size_t file, uint64_t offset) { return static_cast<unsigned char>((offset * 131 + file * 7) % 251); }

// Every rank writes its share block by block, the pieces go to their owners, and the parts
// that come out, put in order, are the files byte for byte.
void check_round_trip(const std::vector<OutputTensor>& tensors, const OutputLayout& layout, int ranks, uint64_t part_size) {
    const auto work = plan_rank_work(tensors, layout, ranks);
    const UploadPlan plan = plan_uploads(tensors, layout, work, part_size);
    std::map<std::pair<size_t, int>, std::vector<unsigned char>> sent;
    std::vector<std::unique_ptr<RankParts>> rank_parts;
    for (int r = 0; r < ranks; ++r) {
        rank_parts.push_back(std::make_unique<RankParts>(plan, layout, r, [&, r](const PlannedPart& part, const auto& bytes) {
            EXPECT_EQ(part.owner, r);
            EXPECT_TRUE(sent.emplace(std::make_pair(part.file, part.number), bytes).second) << "part sent twice";
        }));
        rank_parts.back()->start();
        for (const WriteTask& task : work[r]) {
            const TensorLocation& where = layout.locations[task.tensor];
            const uint64_t row = row_bytes(tensors[task.tensor]);
            for (int64_t i = task.row_begin; i < task.row_end; ++i) {  // one row per block: the finest split
                std::vector<unsigned char> bytes(row);
                const uint64_t offset = where.offset + i * row;
                for (uint64_t b = 0; b < row; ++b) bytes[b] = byte_at(where.file, offset + b);
                rank_parts.back()->add(where.file, offset, bytes.data(), row);
            }
        }
    }
    std::vector<std::vector<std::string>> outgoing;
    for (auto& p : rank_parts) outgoing.push_back(p->outgoing_pieces(ranks));
    for (int r = 0; r < ranks; ++r) {
        std::vector<std::string> incoming;
        for (int from = 0; from < ranks; ++from) incoming.push_back(outgoing[from][r]);
        rank_parts[r]->take_pieces(incoming);
        rank_parts[r]->check_complete();
    }
    for (size_t f = 0; f < layout.files.size(); ++f) {
        std::vector<unsigned char> whole;
        for (const PlannedPart& part : plan.parts[f]) {
            const auto& bytes = sent.at({f, part.number});
            if (part.number < static_cast<int>(plan.parts[f].size())) {
                EXPECT_EQ(bytes.size(), plan.part_size[f]);
            }
            whole.insert(whole.end(), bytes.begin(), bytes.end());
        }
        ASSERT_EQ(whole.size(), layout.files[f].size);
        const std::string& header = layout.files[f].header;
        EXPECT_EQ(std::string(whole.begin(), whole.begin() + header.size()), header);
        for (uint64_t o = header.size(); o < whole.size(); ++o) ASSERT_EQ(whole[o], byte_at(f, o)) << "file " << f << " byte " << o;
    }
}

TEST(UploadPlan, PartsOnAGridWithPiecesSentToTheOwner) {
    const auto tensors = model();
    const OutputLayout layout = plan_safetensors_layout(tensors, 30000);  // several files
    ASSERT_GT(layout.files.size(), 1u);
    const auto work = plan_rank_work(tensors, layout, 3);
    const UploadPlan plan = plan_uploads(tensors, layout, work, 4096);
    size_t pieces = 0;
    for (size_t f = 0; f < layout.files.size(); ++f) {
        uint64_t next = 0;
        for (const PlannedPart& part : plan.parts[f]) {
            EXPECT_EQ(part.offset, next);
            next += part.length;
            for (const ShareSpan& piece : part.pieces) {
                EXPECT_NE(piece.rank, part.owner);
                EXPECT_LT(piece.end - piece.begin, part.length);
                ++pieces;
            }
        }
        EXPECT_EQ(next, layout.files[f].size);
    }
    EXPECT_GT(pieces, 0u);  // the shares do cross part boundaries here
}

TEST(UploadPlan, RankAssemblyGivesTheFilesByteForByte) {
    const auto tensors = model();
    for (int ranks : {1, 2, 3, 7})
        for (uint64_t part_size : {1000ull, 4096ull, 1ull << 20}) {
            SCOPED_TRACE("ranks " + std::to_string(ranks) + ", part " + std::to_string(part_size));
            check_round_trip(tensors, plan_safetensors_layout(tensors, 30000), ranks, part_size);
            check_round_trip(tensors, plan_safetensors_layout(tensors, 0), ranks, part_size);
        }
}

TEST(UploadPlan, HeaderLongerThanAPart) {
    const auto tensors = model();
    check_round_trip(tensors, plan_safetensors_layout(tensors, 0), 3, 64);  // part 1, 2, ... header only
}

TEST(UploadPlan, NoFileNeedsMoreThanTenThousandParts) {
    const auto tensors = model();
    const OutputLayout layout = plan_safetensors_layout(tensors, 0);
    const UploadPlan plan = plan_uploads(tensors, layout, plan_rank_work(tensors, layout, 2), 1);
    EXPECT_LE(plan.parts[0].size(), static_cast<size_t>(kMaxUploadParts));
    EXPECT_EQ(plan.part_size[0] % (1 << 20), 0u);
}

TEST(UploadPlan, RefusesWorkThatLeavesAGap) {
    const auto tensors = model();
    const OutputLayout layout = plan_safetensors_layout(tensors, 0);
    auto work = plan_rank_work(tensors, layout, 1);
    work[0].pop_back();
    EXPECT_THROW(plan_uploads(tensors, layout, work, 4096), Error);
}

}  // namespace
}  // namespace vmerge
