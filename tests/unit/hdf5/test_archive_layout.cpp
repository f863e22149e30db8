// The HF name -> dataset path rule of hdf5/archive_layout.h.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "hdf5/archive_layout.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::tensor;

TEST(ArchiveLayout, DatasetPathOfHfNames) {
    EXPECT_EQ(archive_dataset_path("model.layers.0.self_attn.q_proj.weight"), "model/layers/0/self_attn/q_proj/weight");
    EXPECT_EQ(archive_dataset_path("lm_head.weight"), "lm_head/weight");
    EXPECT_EQ(archive_dataset_path("score"), "score");
    EXPECT_THROW(archive_dataset_path(""), Error);
    EXPECT_THROW(archive_dataset_path("model..weight"), Error);
    EXPECT_THROW(archive_dataset_path(".weight"), Error);
    EXPECT_THROW(archive_dataset_path("model.weight."), Error);
    EXPECT_THROW(archive_dataset_path("model/weight"), Error);
}

TEST(ArchiveLayout, PathsThatCannotCoexist) {
    EXPECT_NO_THROW(check_archive_paths({tensor("a.b", DType::F32, {2}), tensor("a.b-x", DType::F32, {2}),
                                         tensor("a.c.d", DType::F32, {2})}));
    try {
        check_archive_paths({tensor("a.b", DType::F32, {2}), tensor("a.b-x", DType::F32, {2}),
                             tensor("a.b.c", DType::F32, {2})});
        FAIL() << "a.b is both a dataset and a group";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("a.b and a.b.c"), std::string::npos) << e.what();
    }
    EXPECT_THROW(check_archive_paths({tensor("hf_files.config", DType::F32, {2})}), Error);
}

}  // namespace
}  // namespace vmerge
