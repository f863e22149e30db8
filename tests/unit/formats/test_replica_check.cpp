// A dropped replica must hold its kept copy's values: CRC-32s where they decide, else the bytes.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "formats/replica_check.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::TempDir;

// ReplicaPair is {name, dropped, kept}. Four floats at `offset` of `file`, in a record of `record` bytes with `crc` (if any).
TensorRef view(const std::string& file, uint64_t offset, uint64_t record, std::optional<uint32_t> crc) {
    TensorRef t;
    t.dtype = DType::F32;
    t.shape = {4};
    t.stride = {1};
    t.storage = {file, "data/0", offset, record, crc};
    return t;
}

std::string error_of(const std::vector<ReplicaPair>& pairs, uint64_t budget = kReplicaReadBudget) {
    try {
        check_replicas_agree(pairs, budget);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ReplicaCheck, EqualCrcsOfWholeRecordsDecideWithoutReading) {
    // The files do not exist: equal CRC-32s of records of one size are enough.
    EXPECT_EQ(error_of({{"w", view("/none/a", 0, 16, 7u), view("/none/b", 0, 16, 7u)}}), "");
    EXPECT_EQ(error_of({{"w", view("/none/a", 0, 16, 7u), view("/none/b", 0, 16, 8u)}}),
              "'w': /none/a (data/0) and /none/b (data/0) hold different values for it (each should be a copy of the "
              "other): two different sources for one output tensor; the save is inconsistent, merge a complete one");
}

TEST(ReplicaCheck, ViewsAreComparedWhereCrcsCannotTell) {
    TempDir dir;
    dir.touch("a", std::string(16, 'x') + "PADDING1");
    dir.touch("b", std::string(16, 'x') + "PADDING2");
    dir.touch("c", std::string(15, 'x') + "y");
    const std::string a = dir.path() + "/a", b = dir.path() + "/b", c = dir.path() + "/c";
    // Records of 24 bytes whose CRCs differ in the padding after the view: the views agree.
    EXPECT_EQ(error_of({{"w", view(a, 0, 24, 1u), view(b, 0, 24, 2u)}}), "");
    // No CRCs (a DCP or safetensors file): the bytes decide.
    EXPECT_EQ(error_of({{"w", view(a, 0, 16, std::nullopt), view(b, 0, 16, std::nullopt)}}), "");
    EXPECT_NE(error_of({{"w", view(a, 0, 16, std::nullopt), view(c, 0, 16, std::nullopt)}}), "");
    // Another geometry is another tensor.
    TensorRef longer = view(b, 0, 24, std::nullopt);
    longer.shape = {6};
    EXPECT_EQ(error_of({{"w", view(a, 0, 16, std::nullopt), longer}}),
              "'w': " + a + " (data/0) holds it as float32 [4], " + b +
                  " (data/0) as float32 [6]: two different sources for one output tensor");
}

TEST(ReplicaCheck, BeyondTheReadBudgetANoteSaysWhatWasNotCompared) {
    TempDir dir;
    dir.touch("a", std::string(16, 'x'));
    dir.touch("c", std::string(15, 'x') + "y");
    const std::string a = dir.path() + "/a", c = dir.path() + "/c";
    const std::string note =
        check_replicas_agree({{"w", view(a, 0, 16, std::nullopt), view(c, 0, 16, std::nullopt)}}, 8);
    EXPECT_EQ(note, "1 replica copies (16 B) not compared with the copy written: their records differ outside the "
                    "tensor (padding) and comparing the tensors would read more than 8 B");
}

}  // namespace
}  // namespace vmerge
