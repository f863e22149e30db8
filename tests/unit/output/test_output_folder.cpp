// What an output copies from the HF folder (output/output_folder.h): an HDF5 file is weights, not
// an HF file.
#include <gtest/gtest.h>

#include <string>

#include "output/output_folder.h"
#include "test_support.h"

namespace vmerge {
namespace {

// A checkpoint's HF folder with a model.h5 (or TF's tf_model.h5): not an HF file to copy, or it
// would be published over the archive --format hdf5 writes; an archive's hf_files/ refuse it too.
TEST(ArchiveUntrusted, H5FilesAreWeightsNotHfFiles) {
    testing::TempDir dir;
    dir.touch("config.json", "{}");
    dir.touch("model.h5", "not the archive");
    dir.touch("tf_model.h5", "keras");
    const HfFilePlan plan = plan_hf_file_copies(dir.path());
    ASSERT_EQ(plan.copies.size(), 1u);
    EXPECT_EQ(plan.copies[0].rel, "config.json");
    EXPECT_TRUE(is_weight_file("model.h5"));
    EXPECT_FALSE(is_weight_file("model.h5.json"));
}

}  // namespace
}  // namespace vmerge
