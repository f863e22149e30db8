// One rule for what a merge reads: the same bytes under one name on every rank, and never the
// same bytes under two names (a rank file linked to or copied from another rank's).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/free_space.h"
#include "io/input_fingerprint.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::TempDir;

InputFingerprint print(std::string path, uint64_t size, int64_t mtime, uint64_t sample, int rank) {
    InputFingerprint f;
    f.path = std::move(path);
    f.size = size;
    f.mtime_ns = mtime;
    f.sample_hash = sample;
    f.rank = rank;
    f.host = "node" + std::to_string(rank);
    return f;
}

std::string agree_error(const std::vector<InputFingerprint>& prints) {
    try {
        check_ranks_agree(prints);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(InputIdentity, RanksThatSeeDifferentFilesAreNamed) {
    EXPECT_EQ(agree_error({print("a.pt", 10, 5, 1, 0), print("a.pt", 10, 5, 1, 3), print("b.pt", 7, 5, 2, 1)}), "");
    const std::string tail = ": the file changed while the merge read it, or the nodes see different copies; merge from a "
                             "finished checkpoint every node sees alike (copies made with their times kept, e.g. cp -p or rsync -t)";
    EXPECT_EQ(agree_error({print("a.pt", 10, 5, 1, 0), print("a.pt", 11, 5, 1, 2)}),
              "a.pt: rank 0 on node0 and rank 2 on node2 see different files (size 10 against 11 bytes)" + tail);
    EXPECT_EQ(agree_error({print("a.pt", 10, 5, 1, 0), print("a.pt", 10, 6, 1, 1)}),
              "a.pt: rank 0 on node0 and rank 1 on node1 see different files (modification time 5 against 6 ns)" + tail);
    EXPECT_EQ(agree_error({print("a.pt", 10, 5, 1, 0), print("a.pt", 10, 5, 9, 1)}),
              "a.pt: rank 0 on node0 and rank 1 on node1 see different files (the same size and time but different bytes)" + tail);
}

TEST(InputIdentity, CandidatesShareSizeAndSamplesAndAreNotEmpty) {
    const auto pairs = same_input_candidates({print("r0.pt", 10, 1, 7, 0), print("r1.pt", 10, 2, 7, 1), print("r2.pt", 10, 3, 8, 0),
                                              print("r0.pt", 10, 1, 7, 1), print("e0", 0, 1, 0, 0), print("e1", 0, 1, 0, 0)});
    ASSERT_EQ(pairs.size(), 1u);
    EXPECT_EQ(pairs[0].first.path, "r0.pt");
    EXPECT_EQ(pairs[0].second.path, "r1.pt");
}

std::string same_bytes_error(const std::string& a, const std::string& b) {
    try {
        refuse_same_bytes(fingerprint_input(a), fingerprint_input(b));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(InputIdentity, LinksAndCopiesOfARankFileAreRefused) {
    TempDir dir;
    // Larger than the sampled windows: two files that differ only between them sample alike.
    std::string bytes(kInputSampleWindows * kInputSampleBytes * 4, 'w');
    dir.touch("rank0.pt", bytes);
    dir.touch("copy.pt", bytes);
    bytes[kInputSampleBytes + 5] = 'x';
    dir.touch("rank1.pt", bytes);
    const std::string p = dir.path() + "/";
    std::filesystem::create_symlink(p + "rank0.pt", p + "link.pt");
    EXPECT_EQ(fingerprint_input(p + "rank0.pt").sample_hash, fingerprint_input(p + "rank1.pt").sample_hash);
    EXPECT_EQ(same_bytes_error(p + "rank0.pt", p + "rank1.pt"), "");
    const std::string why = ": each input must be a file of its own (a rank file linked to or copied from another rank's merges "
                            "one shard twice and leaves another out)";
    EXPECT_EQ(same_bytes_error(p + "copy.pt", p + "rank0.pt"),
              p + "copy.pt and " + p + "rank0.pt hold the same " + std::to_string(bytes.size()) + " bytes" + why);
    EXPECT_EQ(same_bytes_error(p + "link.pt", p + "rank0.pt"),
              p + "link.pt (a link to " + p + "rank0.pt) and " + p + "rank0.pt are one file" + why);
}

TEST(InputIdentity, FingerprintsCrossRanksIntact) {
    auto a = print("dir/a b.pt", 1ull << 40, -3, UINT64_MAX, 511);
    a.link_target = "../x";
    a.inode = 77;
    a.device = 12;
    const auto back = deserialize_fingerprints(serialize_fingerprints({a, print("c", 0, 0, 0, 0)}));
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0].path, a.path);
    EXPECT_EQ(back[0].size, a.size);
    EXPECT_EQ(back[0].mtime_ns, a.mtime_ns);
    EXPECT_EQ(back[0].sample_hash, a.sample_hash);
    EXPECT_EQ(back[0].link_target, a.link_target);
    EXPECT_EQ(back[0].inode, 77u);
    EXPECT_EQ(back[0].device, 12u);
    EXPECT_EQ(back[0].rank, 511);
    EXPECT_EQ(back[0].host, "node511");
    std::string cut = serialize_fingerprints({a});
    cut.pop_back();
    EXPECT_THROW(deserialize_fingerprints(cut), Error);
}

TEST(FreeSpace, ShortfallNamesEveryNumber) {
    EXPECT_EQ(free_space_shortfall("/t/.stage", 100, 0, 100), "");
    EXPECT_EQ(free_space_shortfall("/t/.stage", 100, 60, 40), "");
    EXPECT_EQ(free_space_shortfall("/t/.stage", 3000000000, 0, 1000000000),
              "/t/.stage: the merge writes 2.8 GiB (3000000000 bytes) but its file system has 953.7 MiB (1000000000 bytes) free; "
              "free space or choose another --target_dir (--skip_free_space_check when the file system reports less than it holds)");
    EXPECT_EQ(free_space_shortfall("/t/.stage", 3000000000, 1000000000, 1000000000),
              "/t/.stage: the merge writes 2.8 GiB (3000000000 bytes), of which 953.7 MiB are already written, but its file system "
              "has 953.7 MiB (1000000000 bytes) free; free space or choose another --target_dir (--skip_free_space_check when the "
              "file system reports less than it holds)");
}

TEST(FreeSpace, AllocatedBytesCountWhatIsOnDisk) {
    TempDir dir;
    dir.touch("a", std::string(10000, 'a'));
    std::filesystem::create_directory(dir.path() + "/sub");
    dir.touch("sub/b", std::string(5000, 'b'));
    EXPECT_GE(allocated_bytes_under(dir.path()), 15000u);
    EXPECT_TRUE(free_bytes(dir.path()).has_value());
}

}  // namespace
}  // namespace vmerge
