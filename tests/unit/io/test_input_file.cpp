// InputFile and the opener of io/input_file.h: exact and scattered reads, errors naming the
// path, and every input a regular file (no FIFO or device to hang on), small files bounded.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json_file.h"
#include "test_support.h"

namespace vmerge {
namespace {

using vmerge::testing::TempDir;

using testing::error_of;
TEST(InputFileOpener, RefusesAFifoWithoutWaitingForAWriter) {
    TempDir dir;
    const std::string fifo = dir.path() + "/config.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // A blocking open() would wait here forever: the test would time out, not pass.
    EXPECT_EQ(error_of([&] { InputFile file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { read_json_file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { require_regular_file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { require_regular_file(dir.path()); }),
              dir.path() + ": a directory, not a regular file (vmerge reads only regular files)");
}

TEST(InputFileOpener, RefusesACharacterDeviceWhereAllowed) {
    TempDir dir;
    const std::string device = dir.path() + "/rank.pt";
    if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 5)) != 0) GTEST_SKIP() << "mknod needs root";
    EXPECT_EQ(error_of([&] { InputFile file(device); }),
              device + ": a character device, not a regular file (vmerge reads only regular files)");
}

TEST(InputFileOpener, RegularFilesReadAsBeforeAndSmallFilesAreBounded) {
    TempDir dir;
    dir.touch("t.txt", "1000\n");
    const std::string path = dir.path() + "/t.txt";
    EXPECT_EQ(read_small_file(path, 5, "a tracker"), "1000\n");
    EXPECT_EQ(error_of([&] { read_small_file(path, 4, "a tracker"); }),
              path + ": 5 bytes, more than the 4 bytes a tracker may hold");
    InputFile file(path);
    char c = 0;
    file.read_exact(1, &c, 1);  // O_NONBLOCK leaves a regular file's reads as they were
    EXPECT_EQ(c, '0');
}

}  // namespace
}  // namespace vmerge

namespace {

using vmerge::Error;
using vmerge::InputFile;
using vmerge::testing::read_whole_file;

const std::string kFsdp2Rank2 =
    std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w3/model_world_size_3_rank_2.pt";
const std::string kHsdpRank1 =
    std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/hsdp_2x2/model_world_size_4_rank_1.pt";
TEST(InputFile, ReadsExactRangesAndRejectsOthers) {
    const InputFile file(kFsdp2Rank2);
    EXPECT_EQ(file.size(), read_whole_file(kFsdp2Rank2).size());
    char magic[4];
    file.read_exact(0, magic, 4, "magic");
    EXPECT_EQ(std::string(magic, 4), "PK\x03\x04");
    try {
        file.read_exact(file.size() - 2, magic, 4, "the tail");
        FAIL() << "read past the end";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find(kFsdp2Rank2), std::string::npos) << message;
        EXPECT_NE(message.find("the tail"), std::string::npos) << message;
        EXPECT_NE(message.find(std::to_string(file.size() - 2)), std::string::npos) << message;
        EXPECT_NE(message.find("4 bytes"), std::string::npos) << message;
    }
    EXPECT_THROW(file.read_exact(UINT64_MAX, magic, 1), Error);
    EXPECT_THROW(file.read_exact(1, magic, UINT64_MAX), Error);
}

// More places than one preadv takes (IOV_MAX), empty ones among them: the bytes land in order.
TEST(InputFile, ReadsScatteredIntoPlacesInOrder) {
    const InputFile file(kFsdp2Rank2);
    const std::string whole = read_whole_file(kFsdp2Rank2);
    const size_t pieces = 3000, piece = 3;
    ASSERT_GE(whole.size(), 100 + pieces * piece);
    std::vector<unsigned char> got(pieces * (piece + 1), 0xAB);
    std::vector<iovec> places;
    for (size_t i = 0; i < pieces; ++i) {
        places.push_back({got.data() + i * (piece + 1), piece});  // a gap byte after each piece
        if (i % 7 == 0) places.push_back({got.data(), 0});
    }
    file.read_scattered(100, places.data(), places.size(), "rows");
    for (size_t i = 0; i < pieces; ++i) {
        for (size_t k = 0; k < piece; ++k) ASSERT_EQ(got[i * (piece + 1) + k], static_cast<unsigned char>(whole[100 + i * piece + k])) << i;
        ASSERT_EQ(got[i * (piece + 1) + piece], 0xAB) << i;
    }
    unsigned char tail[8];
    iovec past[2] = {{tail, 4}, {tail + 4, 4}};
    try {
        file.read_scattered(file.size() - 6, past, 2, "the rows");
        FAIL() << "read past the end";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find(kFsdp2Rank2), std::string::npos) << message;
        EXPECT_NE(message.find("the rows"), std::string::npos) << message;
        EXPECT_NE(message.find("8 bytes"), std::string::npos) << message;
    }
}

TEST(InputFile, MissingFileNamesThePath) {
    const std::string path = testing::TempDir() + "vmerge_no_such_file.pt";
    try {
        InputFile file(path);
        FAIL() << "opened a missing file";
    } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
    }
}

TEST(InputFile, MovesOwnership) {
    InputFile first(kFsdp2Rank2);
    InputFile second(std::move(first));
    EXPECT_EQ(second.path(), kFsdp2Rank2);
    char byte;
    second.read_exact(0, &byte, 1);
    EXPECT_EQ(byte, 'P');
    InputFile third(kHsdpRank1);
    third = std::move(second);
    EXPECT_EQ(third.path(), kFsdp2Rank2);
    third.read_exact(1, &byte, 1);
    EXPECT_EQ(byte, 'K');
}

}  // namespace
