// The registry of output formats (output/registry.h): --format's choices and help.
#include <gtest/gtest.h>

#include "output/registry.h"

namespace vmerge {
namespace {

TEST(OutputFormats, RegistryListsSafetensorsFirstThenHdf5) {
    ASSERT_EQ(output_formats().size(), 2u);
    EXPECT_EQ(output_formats()[0].name, "safetensors");
    EXPECT_EQ(output_formats()[1].name, "hdf5");
    EXPECT_NE(find_output_format("hdf5"), nullptr);
    EXPECT_EQ(find_output_format("gguf"), nullptr);
    EXPECT_EQ(output_format_choices(), "safetensors or hdf5");
    EXPECT_EQ(output_format_help(),
              "safetensors | hdf5 (one model.h5 archive, written with parallel HDF5; docs/hdf5.md)");
}

}  // namespace
}  // namespace vmerge
