// End-to-end tests: real torch 2.11 FSDP2 files (tests/fixtures/torch2) through the driver's
// run_command with a one-rank Comm, compared with the Hugging Face references saved by torch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "mpi/parse_options.h"
#include "driver.h"
#include "single_rank_comm.h"
#include "io/input_file.h"
#include "safetensors/safetensors_file.h"
#include "test_support.h"

namespace vmerge {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

const std::string kFixtures = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2";

using testing::parse_options;

Options parse(std::vector<std::string> args) { return parse_options(std::move(args)); }

struct Result {
    int code;
    std::string out;
    std::string err;
};

Result run(const std::vector<std::string>& args) {
    const Options o = parse(args);
    SingleRankComm comm;
    std::ostringstream out, err;
    const int code = run_command(o, comm, out, err);
    return {code, out.str(), err.str()};
}

std::vector<unsigned char> read_entry(const SafetensorsFile& f, const SafetensorsEntry& e) {
    InputFile in(f.path);
    std::vector<unsigned char> bytes(e.end - e.begin);
    in.read_exact(e.begin, bytes.data(), bytes.size(), "test");
    return bytes;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        std::ifstream in(e.path(), std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        files[fs::relative(e.path(), dir).string()] = s.str();
    }
    return files;
}

std::string staging_of(const std::string& target) {
    const fs::path t(target);
    return (t.parent_path() / ("." + t.filename().string() + ".vmerge-staging")).string();
}

TEST(EndToEnd, MergeFsdp2W3MatchesReferenceByteForByte) {
    TempDir tmp;
    const std::string target = tmp.path() + "/merged";
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(fs::exists(staging_of(target)));

    const HfWeights got = read_hf_weights(target);
    const HfWeights want = read_hf_weights(kFixtures + "/reference_fp32");
    ASSERT_FALSE(want.by_name.empty());
    ASSERT_EQ(got.by_name.size(), want.by_name.size());
    for (const auto& [name, where] : want.by_name) {
        SCOPED_TRACE(name);
        auto it = got.by_name.find(name);
        ASSERT_NE(it, got.by_name.end()) << "missing from the merge";
        const SafetensorsFile& wf = want.files[where.first];
        const SafetensorsEntry& we = wf.entries[where.second];
        const SafetensorsFile& gf = got.files[it->second.first];
        const SafetensorsEntry& ge = gf.entries[it->second.second];
        EXPECT_EQ(ge.dtype, we.dtype);
        EXPECT_EQ(ge.shape, we.shape);
        EXPECT_EQ(read_entry(gf, ge), read_entry(wf, we));
    }
    // The non-weight files of huggingface/ come along.
    EXPECT_TRUE(fs::exists(target + "/config.json"));
}

TEST(EndToEnd, TestCommandAgainstReferences) {
    const Result ok = run({"test", "--local_dir", kFixtures + "/fsdp2_w3", "--test_hf_dir",
                           kFixtures + "/reference_fp32", "--dtype", "keep"});
    EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
    const Result bad = run({"test", "--local_dir", kFixtures + "/fsdp2_w3", "--test_hf_dir",
                            kFixtures + "/reference_tied_fp32", "--dtype", "keep"});
    EXPECT_EQ(bad.code, 1) << bad.out << bad.err;
}

TEST(EndToEnd, ExistingTargetWithoutForceIsLeftAlone) {
    TempDir tmp;
    const std::string target = tmp.path() + "/existing";
    fs::create_directories(target + "/sub");
    std::ofstream(target + "/model.safetensors") << "not really a model";
    std::ofstream(target + "/sub/notes.txt") << "keep me";
    const auto before = snapshot(target);
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep"});
    EXPECT_EQ(r.code, 1);
    EXPECT_FALSE(r.err.empty());
    EXPECT_EQ(snapshot(target), before);
    EXPECT_FALSE(fs::exists(staging_of(target)));
}

TEST(EndToEnd, StagingIsRemovedAfterAFailedMerge) {
    TempDir tmp;
    const std::string input = tmp.path() + "/fsdp2_w2";
    fs::copy(kFixtures + "/fsdp2_w2", input, fs::copy_options::recursive);
    const std::string rank1 = input + "/model_world_size_2_rank_1.pt";
    fs::resize_file(rank1, fs::file_size(rank1) / 2);
    const std::string target = tmp.path() + "/out";
    const Result r = run({"merge", "--local_dir", input, "--target_dir", target, "--dtype", "keep"});
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("model_world_size_2_rank_1.pt"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(target));
    EXPECT_FALSE(fs::exists(staging_of(target)));
    // Nothing else was left beside the target either.
    for (const auto& e : fs::directory_iterator(tmp.path()))
        EXPECT_EQ(e.path().filename().string(), "fsdp2_w2") << e.path();
}

TEST(EndToEnd, AFailureInTheCommitStepKeepsStagingAndResumeFinishes) {
    // A truncated rank file fails while scanning, before the staging folder exists. This one
    // fails after every byte was written: huggingface/ holds a folder named like the output
    // file, so copying its content into the staging folder cannot work. The written data stay
    // in the staging folder, the message says where, and --resume finishes without redoing it.
    TempDir tmp;
    const std::string input = tmp.path() + "/fsdp2_w2";
    fs::copy(kFixtures + "/fsdp2_w2", input, fs::copy_options::recursive);
    fs::create_directories(input + "/huggingface/model.safetensors");
    std::ofstream(input + "/huggingface/model.safetensors/x") << "x";
    const std::string target = tmp.path() + "/out";
    const Result r = run({"merge", "--local_dir", input, "--target_dir", target, "--dtype", "keep"});
    EXPECT_EQ(r.code, 1);
    EXPECT_FALSE(fs::exists(target));
    EXPECT_TRUE(fs::exists(staging_of(target)));
    EXPECT_NE(r.err.find(staging_of(target)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;

    fs::remove_all(input + "/huggingface/model.safetensors");
    const Result resumed = run({"merge", "--local_dir", input, "--target_dir", target, "--dtype", "keep", "--resume"});
    ASSERT_EQ(resumed.code, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("written now"), std::string::npos) << resumed.out;
    EXPECT_NE(resumed.out.find(", 0 B written now"), std::string::npos) << resumed.out;
    EXPECT_FALSE(fs::exists(staging_of(target)));
    EXPECT_EQ(run({"test", "--local_dir", input, "--test_hf_dir", kFixtures + "/reference_fp32", "--dtype", "keep"}).code, 0);
    EXPECT_EQ(run({"verify", "--target_dir", target}).code, 0);
}

TEST(EndToEnd, ForceReplacesAnEarlierVmergeOutputOnly) {
    TempDir tmp;
    const std::string target = tmp.path() + "/existing";
    ASSERT_EQ(run({"merge", "--local_dir", kFixtures + "/fsdp2_w2", "--target_dir", target, "--dtype", "keep", "--quiet"}).code, 0);
    const Result again = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep", "--quiet"});
    EXPECT_EQ(again.code, 1);
    EXPECT_NE(again.err.find("already exists (an earlier vmerge output); pass --force"), std::string::npos) << again.err;
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep",
                          "--force", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(target + "/model.safetensors"));
    EXPECT_TRUE(fs::exists(target + "/vmerge.manifest.json"));
    EXPECT_EQ(run({"test", "--local_dir", kFixtures + "/fsdp2_w3", "--test_hf_dir", target, "--dtype", "keep"}).code, 0);
    for (const auto& e : fs::directory_iterator(tmp.path()))
        EXPECT_EQ(e.path().filename().string(), "existing") << e.path();
}

TEST(EndToEnd, ForceNeverRemovesFilesVmergeDidNotWrite) {
    TempDir tmp;
    const std::string target = tmp.path() + "/existing";
    ASSERT_EQ(run({"merge", "--local_dir", kFixtures + "/fsdp2_w2", "--target_dir", target, "--dtype", "keep", "--quiet"}).code, 0);
    std::ofstream(target + "/README.md") << "the user's model card";
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep",
                          "--force", "--quiet"});
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("holds files vmerge did not write (not in its vmerge.manifest.json): README.md"), std::string::npos)
        << r.err;
    EXPECT_TRUE(fs::exists(target + "/README.md"));
}

TEST(EndToEnd, MissingParentFoldersOfTheTargetAreCreated) {
    TempDir tmp;
    const std::string target = tmp.path() + "/runs/step1/merged";
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(target + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(tmp.path() + "/runs/step1/.merged.vmerge-lock"));
}

TEST(EndToEnd, AnEmptyTargetFolderIsFilledWithoutForce) {
    TempDir tmp;
    const std::string target = tmp.path() + "/empty";
    fs::create_directories(target);
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(target + "/model.safetensors"));
}

TEST(EndToEnd, SmallShardSizeWritesAnIndexAndStillMatches) {
    TempDir tmp;
    const std::string target = tmp.path() + "/sharded";
    const Result r = run({"merge", "--local_dir", kFixtures + "/fsdp2_w3", "--target_dir", target, "--dtype", "keep",
                          "--max_shard_size", "20KB", "--quiet"});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(target + "/model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(target + "/model.safetensors"));
    const HfWeights got = read_hf_weights(target);
    EXPECT_GT(got.files.size(), 1u);
    const HfWeights want = read_hf_weights(kFixtures + "/reference_fp32");
    ASSERT_EQ(got.by_name.size(), want.by_name.size());
    for (const auto& [name, where] : want.by_name) {
        SCOPED_TRACE(name);
        auto it = got.by_name.find(name);
        ASSERT_NE(it, got.by_name.end());
        EXPECT_EQ(read_entry(got.files[it->second.first], got.files[it->second.first].entries[it->second.second]),
                  read_entry(want.files[where.first], want.files[where.first].entries[where.second]));
    }
}

}  // namespace
}  // namespace vmerge
