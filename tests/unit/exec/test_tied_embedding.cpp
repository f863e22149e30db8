// exec/tied_embedding.h: a tied head that is really the embedding (check_tied_head), and an MTP
// layer's copy the checkpoint holds compared with its original (check_mtp_shared_copies).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "architecture/mtp_shared_copies.h"
#include "core/error.h"
#include "exec/tied_embedding.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::mapping_of;

using testing::contains;
using testing::error_of;
using testing::tensor;
OutputTensor constant(const std::string& name, std::vector<float> values, Shape shape) {
    OutputTensor t = tensor(name, DType::F32, std::move(shape));
    t.role = OutputTensor::Role::Constant;
    t.constant.resize(values.size() * 4);
    std::memcpy(t.constant.data(), values.data(), t.constant.size());
    return t;
}

TEST(TiedHead, TrainedHeadIsNeverDropped) {
    HfConfig untied;
    untied.dir = "/hf";
    const std::vector<float> emb{1, 2, 3, 4, 5, 6};
    auto same = mapping_of({constant("model.embed_tokens.weight", emb, {3, 2}), constant("lm_head.weight", emb, {3, 2})});
    for (int rank = 0; rank < 2; ++rank) EXPECT_NO_THROW(check_tied_head(same, untied, true, 64, rank, 2));
    auto differs = mapping_of({constant("model.embed_tokens.weight", emb, {3, 2}),
                               constant("lm_head.weight", {1, 2, 3, 4, 5, 7}, {3, 2})});
    EXPECT_NO_THROW(check_tied_head(differs, untied, false, 64, 0, 1));  // not tied: nothing to check
    EXPECT_NO_THROW(check_tied_head(differs, untied, true, 64, 0, 2));   // rank 0 holds rows 0..1
    try {
        check_tied_head(differs, untied, true, 16, 1, 2);  // rows 1..2, one row per block
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("lm_head.weight differs from model.embed_tokens.weight (first at row 2)"),
                  std::string::npos)
            << e.what();
    }
    HfConfig tied = untied;
    tied.tie_word_embeddings = true;
    EXPECT_THROW(check_tied_head(differs, tied, false, 64, 0, 1), Error);
    auto no_embedding = mapping_of({constant("lm_head.weight", emb, {3, 2})});
    EXPECT_THROW(check_tied_head(no_embedding, tied, false, 64, 0, 1), Error);
    auto other_shape = mapping_of({constant("model.embed_tokens.weight", emb, {2, 3}), constant("lm_head.weight", emb, {3, 2})});
    EXPECT_THROW(check_tied_head(other_shape, tied, false, 64, 0, 1), Error);
}

// fp32 rows written to a file: embedding, head and the checkpoint's copies, each [3, 2].
class CarriedCopies : public ::testing::Test {
protected:
    void SetUp() override {
        file_ = dir_.path() + "/weights.bin";
        const std::vector<float> values{1, 2, 3, 4, 5, 6,         // embedding
                                        7, 8, 9, 10, 11, 12,      // head
                                        1, 2, 3, 4, 5, 6,         // a true embedding copy
                                        7, 8, 9, 10, 11, 13};     // a head copy differing in row 2
        std::ofstream(file_, std::ios::binary).write(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    }
    // Tensor `name` [rows, 2] read from float `at` of the file.
    OutputTensor from_file(TensorMapping& m, const std::string& name, int64_t at, int64_t rows = 3) {
        TensorRef s;
        s.dtype = DType::F32;
        s.shape = {rows, 2};
        s.stride = contiguous_strides(s.shape);
        s.storage.file = file_;
        s.storage.byte_offset = static_cast<uint64_t>(at) * 4;
        s.storage.byte_size = s.nbytes();
        OutputTensor t = tensor(name, DType::F32, {rows, 2});
        t.copies.push_back({static_cast<uint32_t>(m.sources.size()), {0, 0}, {0, 0}, {rows, 2}});
        m.sources.push_back(s);
        return t;
    }
    TensorMapping model() {
        TensorMapping m;
        m.tensors.push_back(from_file(m, "model.embed_tokens.weight", 0));
        m.tensors.push_back(from_file(m, "lm_head.weight", 6));
        return m;
    }
    testing::TempDir dir_;
    std::string file_;
};

TEST_F(CarriedCopies, EqualCopiesPassOnEveryRank) {
    TensorMapping m = model();
    std::vector<MtpSharedCopy> copies{{"model.layers.2.embed_tokens.weight", false, from_file(m, "c", 12)}};
    for (int rank = 0; rank < 3; ++rank) EXPECT_NO_THROW(check_mtp_shared_copies(m, copies, false, 16, rank, 3));
}

TEST_F(CarriedCopies, ADifferingCopyIsRefusedNamingBoth) {
    TensorMapping m = model();
    std::vector<MtpSharedCopy> copies{{"model.layers.2.shared_head.head.weight", true, from_file(m, "c", 18)}};
    EXPECT_NO_THROW(check_mtp_shared_copies(m, copies, false, 16, 0, 2));  // rank 0: row 0 only
    EXPECT_EQ(error_of([&] { check_mtp_shared_copies(m, copies, false, 16, 1, 2); }),
              "the checkpoint's model.layers.2.shared_head.head.weight differs from lm_head.weight (first at row 2): an "
              "MTP layer's copy must equal the tensor it copies (DeepSeek-V3's release; vLLM's MTP loader reads it as "
              "that tensor)");
    // Tied with no lm_head: the head copy is the embedding's.
    TensorMapping tied;
    tied.tensors.push_back(from_file(tied, "model.embed_tokens.weight", 0));
    std::vector<MtpSharedCopy> head_of_tied{{"model.layers.2.shared_head.head.weight", true, from_file(tied, "c", 12)}};
    EXPECT_NO_THROW(check_mtp_shared_copies(tied, head_of_tied, true, 16, 0, 1));
    EXPECT_TRUE(contains(error_of([&] { check_mtp_shared_copies(tied, head_of_tied, false, 16, 0, 1); }),
                         "the checkpoint holds model.layers.2.shared_head.head.weight but no lm_head.weight it copies"));
}

TEST_F(CarriedCopies, ACopyOfAnotherShapeIsRefused) {
    TensorMapping m = model();
    std::vector<MtpSharedCopy> copies{{"model.layers.2.embed_tokens.weight", false,
                                       from_file(m, "model.layers.2.embed_tokens.weight", 12, 2)}};
    EXPECT_EQ(error_of([&] { check_mtp_shared_copies(m, copies, false, 64, 0, 1); }),
              "the checkpoint's model.layers.2.embed_tokens.weight [2, 2] float32 and model.embed_tokens.weight [3, 2] float32 differ in shape or dtype: "
              "an MTP layer's copy must equal the tensor it copies (DeepSeek-V3's release; vLLM's MTP loader reads it "
              "as that tensor)");
}

}  // namespace
}  // namespace vmerge
