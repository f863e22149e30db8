// merge --reuse: blocks compared with the previous output's bytes, the ranks' findings pooled,
// skipped blocks of changed files copied in, unchanged files hard-linked. Files written here by
// hand; expected bytes are the ones written, not recomputed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "output/safetensors/previous_output.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::TempDir;

const unsigned char* bytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::binary) << content;
}

ino_t inode(const std::string& path) {
    struct stat st {};
    ::stat(path.c_str(), &st);
    return st.st_ino;
}

// Two files, a "base" and an "adapter", each a 4-byte header and 8 bytes of data written in
// two 4-byte blocks; the previous folder holds them with `previous_adapter` as the adapter's data.
struct TwoFiles {
    TempDir dir;
    std::string previous = dir.path() + "/previous", staging = dir.path() + "/staging";
    OutputLayout layout;
    explicit TwoFiles(const std::string& previous_adapter = "ADAPTER1") {
        std::filesystem::create_directories(previous);
        std::filesystem::create_directories(staging);
        for (const char* name : {"base.safetensors", "adapter.safetensors"}) {
            OutputFile f;
            f.name = name;
            f.header = std::string("H") + name[0] + "..";
            f.size = 12;
            layout.files.push_back(f);
            write_file(staging + "/" + name, f.header + std::string(8, '\0'));
        }
        write_file(previous + "/base.safetensors", "Hb..BASEBASE");
        write_file(previous + "/adapter.safetensors", "Ha.." + previous_adapter);
    }
};

TEST(PreviousOutput, EqualBlocksAreSkippedAndTheirFileLinked) {
    TwoFiles t;
    PreviousOutput p(t.previous, t.staging, t.layout);
    EXPECT_TRUE(p.same_as_previous(0, 4, bytes("BASE"), 4));
    EXPECT_TRUE(p.same_as_previous(0, 8, bytes("BASE"), 4));
    EXPECT_TRUE(p.same_as_previous(1, 4, bytes("ADAP"), 4));
    EXPECT_FALSE(p.same_as_previous(1, 8, bytes("TER2"), 4));  // the adapter trained on
    // Letters, byte counts, and what each opened file was (mtime:inode) when compared.
    EXPECT_TRUE(p.reuse_state().starts_with("sw 4 12 ")) << p.reuse_state();
    const auto notes = p.complete({p.reuse_state()});
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_TRUE(testing::contains(notes[0], "1 of 2 files unchanged (8 B, hard-linked), 4 B of unchanged blocks "
                                            "copied into changed files, 4 B written"))
        << notes[0];
    // The adapter's skipped block is copied in; the block it wrote is the caller's to write.
    EXPECT_EQ(read_all(t.staging + "/adapter.safetensors"), std::string("Ha..ADAP") + std::string(4, '\0'));
    p.link_unchanged();
    EXPECT_EQ(inode(t.staging + "/base.safetensors"), inode(t.previous + "/base.safetensors"));
    EXPECT_NE(inode(t.staging + "/adapter.safetensors"), inode(t.previous + "/adapter.safetensors"));
}

TEST(PreviousOutput, ARankThatWroteMakesTheFileChangedForAll) {
    TwoFiles t;
    PreviousOutput rank0(t.previous, t.staging, t.layout), rank1(t.previous, t.staging, t.layout);
    EXPECT_TRUE(rank0.same_as_previous(1, 4, bytes("ADAP"), 4));  // rank 0 saw its half unchanged
    EXPECT_TRUE(rank0.same_as_previous(0, 4, bytes("BASE"), 4));
    EXPECT_FALSE(rank1.same_as_previous(1, 8, bytes("XXXX"), 4));
    EXPECT_TRUE(rank1.same_as_previous(0, 8, bytes("BASE"), 4));
    const std::vector<std::string> states{rank0.reuse_state(), rank1.reuse_state()};
    rank0.complete(states);
    rank1.complete(states);
    rank0.link_unchanged();
    EXPECT_EQ(read_all(t.staging + "/adapter.safetensors"), std::string("Ha..ADAP") + std::string(4, '\0'));
    EXPECT_EQ(inode(t.staging + "/base.safetensors"), inode(t.previous + "/base.safetensors"));
}

TEST(PreviousOutput, AnotherHeaderOrSizeIsNeverCompared) {
    TwoFiles t;
    write_file(t.previous + "/base.safetensors", "Hx..BASEBASE");    // other tensors or offsets
    write_file(t.previous + "/adapter.safetensors", "Ha..ADAPTER1!");  // one byte longer
    PreviousOutput p(t.previous, t.staging, t.layout);
    EXPECT_FALSE(p.same_as_previous(0, 4, bytes("BASE"), 4));
    EXPECT_FALSE(p.same_as_previous(1, 4, bytes("ADAP"), 4));
    EXPECT_EQ(p.reuse_state(), "ww 8 0 - -");
}

TEST(PreviousOutput, AFileChangedBeforeTheLinkIsAnError) {
    TwoFiles t;
    PreviousOutput p(t.previous, t.staging, t.layout);
    EXPECT_TRUE(p.same_as_previous(0, 4, bytes("BASEBASE"), 8));
    EXPECT_FALSE(p.same_as_previous(1, 4, bytes("ADAPTER2"), 8));
    p.complete({p.reuse_state()});
    write_file(t.previous + "/base.safetensors", "Hb..BASE");  // truncated meanwhile
    EXPECT_TRUE(testing::contains(testing::error_of([&] { p.link_unchanged(); }), "changed during the merge"));
}

// Replaced by a file of the same size and header after its blocks were compared (another
// inode): the file linked would not be the one compared.
TEST(PreviousOutput, AFileReplacedBeforeTheLinkIsAnError) {
    TwoFiles t;
    PreviousOutput p(t.previous, t.staging, t.layout);
    EXPECT_TRUE(p.same_as_previous(0, 4, bytes("BASEBASE"), 8));
    EXPECT_FALSE(p.same_as_previous(1, 4, bytes("ADAPTER2"), 8));
    p.complete({p.reuse_state()});
    write_file(t.dir.path() + "/other", "Hb..BASEBASE");
    std::filesystem::rename(t.dir.path() + "/other", t.previous + "/base.safetensors");
    EXPECT_EQ(testing::error_of([&] { p.link_unchanged(); }),
              t.previous + "/base.safetensors: changed during the merge (size, header, modification time or inode); "
                           "rerun without --reuse");
}

TEST(PreviousOutput, LinkingRemovesOnlyTheStagingFileNeverWhatItPointsAt) {
    TwoFiles t;
    // Someone put a link at the staging file's place, pointing at a file of the user's.
    const std::string mine = t.dir.path() + "/mine.txt";
    write_file(mine, "the user's bytes");
    std::filesystem::remove(t.staging + "/base.safetensors");
    std::filesystem::create_symlink(mine, t.staging + "/base.safetensors");
    PreviousOutput p(t.previous, t.staging, t.layout);
    EXPECT_TRUE(p.same_as_previous(0, 4, bytes("BASEBASE"), 8));
    EXPECT_FALSE(p.same_as_previous(1, 4, bytes("ADAPTER2"), 8));
    p.complete({p.reuse_state()});
    p.link_unchanged();
    EXPECT_EQ(read_all(mine), "the user's bytes");
    EXPECT_EQ(read_all(t.previous + "/base.safetensors"), "Hb..BASEBASE");
    EXPECT_EQ(read_all(t.previous + "/adapter.safetensors"), "Ha..ADAPTER1");
    EXPECT_EQ(inode(t.staging + "/base.safetensors"), inode(t.previous + "/base.safetensors"));
}

TEST(PreviousOutput, OnlyAFolderVmergeWroteIsReused) {
    TwoFiles t;
    EXPECT_TRUE(testing::contains(testing::error_of([&] { check_reusable(t.previous, t.dir.path() + "/out"); }),
                                  "not a folder vmerge wrote"));
}

}  // namespace
}  // namespace vmerge
