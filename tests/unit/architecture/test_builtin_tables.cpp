// The architecture tables built into the binary (architecture/builtin_tables.h).
#include <gtest/gtest.h>

#include <string>

#include "architecture/architecture_table.h"
#include "architecture/builtin_tables.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::error_of;

TEST(ArchitectureTables, BuiltIntoTheBinary) {
    // A copied vmerge-mpi (no share/ beside it) still has every shipped table.
    const auto& tables = builtin_architecture_tables();
    ASSERT_GE(tables.size(), 10u);
    for (const auto& t : tables) {
        const ArchitectureTable table = read_architecture_table(std::string("builtin:") + t.name);
        EXPECT_FALSE(table.architectures.empty()) << t.name;
    }
    EXPECT_FALSE(error_of([] { read_architecture_table("builtin:none.json"); }).empty());
}

}  // namespace
}  // namespace vmerge
