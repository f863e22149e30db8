// config_int of architecture/hf_config.h: every config.json size bounded, errors naming file,
// key and value.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "architecture/hf_config.h"
#include "core/error.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::error_of;
HfConfig config_with(nlohmann::json json) {
    HfConfig c;
    c.dir = "/m";
    c.json = std::move(json);
    return c;
}

TEST(ConfigInt, BoundsEveryKeyAndNamesFileKeyAndValue) {
    const HfConfig c = config_with({{"num_hidden_layers", 1000000000}, {"vocab_size", 0}, {"hidden_size", 4096}});
    EXPECT_EQ(config_int(c, "hidden_size"), 4096);
    EXPECT_EQ(error_of([&] { config_int(c, "num_hidden_layers"); }),
              "/m/config.json: num_hidden_layers 1000000000: expected 1..100000");
    EXPECT_EQ(error_of([&] { config_int(c, "vocab_size"); }), "/m/config.json: vocab_size 0: expected 1..2147483648");
    EXPECT_EQ(config_int(c, "decoder_sparse_step", 1), 1);  // missing: the fallback
    EXPECT_EQ(error_of([&] { config_int(c, "intermediate_size"); }), "/m/config.json: missing 'intermediate_size'");
    EXPECT_THROW(config_int(c, "no_such_key_has_bounds"), std::logic_error);
    const HfConfig zero_step = config_with({{"decoder_sparse_step", 0}});
    EXPECT_EQ(error_of([&] { config_int(zero_step, "decoder_sparse_step", 1); }),
              "/m/config.json: decoder_sparse_step 0: expected 1..100000");
}

TEST(ConfigInt, EveryBoundKeepsShapeProductsIn64Bits) {
    // Two sizes multiply into a shape's element count: it must not overflow int64.
    const int64_t vocab = config_int_bounds("vocab_size").second, hidden = config_int_bounds("hidden_size").second;
    EXPECT_LT(static_cast<double>(vocab) * static_cast<double>(hidden), 9.2e18);
    EXPECT_GE(config_int_bounds("num_hidden_layers").first, 1);
    EXPECT_GE(config_int_bounds("decoder_sparse_step").first, 1);  // a divisor
    EXPECT_GE(config_int_bounds("moe_layer_freq").first, 1);        // a divisor
}

}  // namespace
}  // namespace vmerge
