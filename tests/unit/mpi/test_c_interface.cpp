// The C interface (include/vmerge/vmerge.h) and the C++ calls under it (mpi/library_calls.cpp):
// a merge of the example checkpoint and its result document, the command's own error and usage
// messages, options JSON that is not an object of flags, and a merge cancelled from the progress
// callback: no target, a staging folder that --resume completes.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "driver.h"
#include "mpi/parse_options.h"
#include "output/output_folder.h"
#include "single_rank_comm.h"
#include "test_support.h"
#include "vmerge/vmerge.h"
#include "vmerge/vmerge.hpp"

namespace vmerge {
namespace {

const std::string kExample = std::string(VMERGE_SOURCE_DIR) + "/examples/tiny-qwen2-fsdp/global_step_1/actor";

// One vmerge_run, its result read and freed.
struct CallOutcome {
    int code = -1;
    int result_code = -1;
    std::string error, json, output;
};

CallOutcome call(const char* command, const std::string& options, vmerge_progress_fn progress = nullptr,
                 void* user = nullptr) {
    vmerge_result* result = nullptr;
    CallOutcome o;
    o.code = vmerge_run(command, options.c_str(), progress, user, &result);
    EXPECT_NE(result, nullptr);
    o.result_code = vmerge_result_exit_code(result);
    o.error = vmerge_result_error(result);
    o.json = vmerge_result_json(result);
    o.output = vmerge_result_output(result);
    vmerge_result_free(result);
    return o;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the command prints on stderr for these arguments (the driver run as main runs it).
std::string command_error(const std::vector<std::string>& args) {
    const Options o = testing::parse_options(args);
    SingleRankComm comm;
    std::ostringstream out, err;
    EXPECT_NE(run_command(o, comm, out, err), 0);
    std::string text = err.str();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

TEST(CInterface, MergeWritesTheFolderAndReturnsTheLogJson) {
    testing::TempDir dir;
    const std::string target = dir.path() + "/out";
    const nlohmann::json options = {{"local_dir", kExample}, {"target_dir", target}, {"quiet", true}};
    const CallOutcome merged = call("merge", options.dump());
    ASSERT_EQ(merged.code, 0) << merged.error;
    EXPECT_EQ(merged.result_code, 0);
    EXPECT_EQ(merged.error, "");
    const auto log = nlohmann::json::parse(merged.json);
    EXPECT_EQ(log.at("command"), "merge");
    EXPECT_EQ(log.at("target_dir"), target);
    EXPECT_EQ(log.at("files"), 1);
    EXPECT_EQ(log.at("per_rank").at(0).at("bytes_written"), log.at("bytes"));
    EXPECT_EQ(log.at("ranks"), 1);
    EXPECT_TRUE(std::filesystem::exists(target + "/model.safetensors"));
    // The same merge through the C++ call writes the same bytes.
    const api::Result again = api::merge({{"local_dir", kExample}, {"target_dir", dir.path() + "/again"}, {"quiet", "true"}});
    EXPECT_EQ(again.exit_code, 0);
    EXPECT_EQ(read_bytes(target + "/model.safetensors"), read_bytes(dir.path() + "/again/model.safetensors"));
    const CallOutcome verified = call("verify", nlohmann::json{{"target_dir", target}}.dump());
    EXPECT_EQ(verified.code, 0) << verified.error;
    EXPECT_NE(verified.output.find("vmerge verify: OK"), std::string::npos) << verified.output;
    EXPECT_EQ(verified.json, "{}");
}

TEST(CInterface, InspectReturnsWhatInspectJsonPrints) {
    const CallOutcome printed = call("inspect", nlohmann::json{{"local_dir", kExample}, {"json", true}}.dump());
    ASSERT_EQ(printed.code, 0) << printed.error;
    EXPECT_EQ(nlohmann::json::parse(printed.json), nlohmann::json::parse(printed.output));
    EXPECT_EQ(nlohmann::json::parse(printed.json).at("backend"), "fsdp");
}

TEST(CInterface, ErrorsAreTheCommandsMessages) {
    testing::TempDir dir;
    const std::string missing = dir.path() + "/no-such-checkpoint";
    const CallOutcome failed =
        call("merge", nlohmann::json{{"local_dir", missing}, {"target_dir", dir.path() + "/out"}}.dump());
    EXPECT_EQ(failed.code, 1);
    EXPECT_EQ(failed.result_code, 1);
    EXPECT_EQ(failed.error, command_error({"merge", "--local_dir", missing, "--target_dir", dir.path() + "/out"}));
    EXPECT_TRUE(failed.error.starts_with("vmerge-mpi: error: ")) << failed.error;
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out"));

    const CallOutcome usage = call("merge", nlohmann::json{{"local_dir", kExample}}.dump());
    EXPECT_EQ(usage.code, 2);
    EXPECT_EQ(usage.error, "vmerge-mpi: usage error: merge needs --target_dir (see --help)");
    const CallOutcome unknown = call("merge", R"({"local_dir": "x", "target_dir": "y", "bogus_flag": 1})");
    EXPECT_EQ(unknown.code, 2);
    EXPECT_NE(unknown.error.find("bogus_flag"), std::string::npos) << unknown.error;
    EXPECT_EQ(call("fold", "{}").error, "vmerge-mpi: usage error: unknown command 'fold' (merge, test, inspect, verify, watch or map) (see --help)");
}

TEST(CInterface, OptionsMustBeAJsonObjectOfFlags) {
    EXPECT_EQ(call("inspect", "[1, 2]").error,
              "vmerge-mpi: usage error: options JSON: expected an object of flags by name, not array (see --help)");
    EXPECT_EQ(call("inspect", R"({"local_dir": {"a": 1}})").error,
              "vmerge-mpi: usage error: options JSON: \"local_dir\": expected a string, number, boolean or a list of "
              "them, not object (see --help)");
    EXPECT_TRUE(call("inspect", "{not json").error.starts_with("vmerge-mpi: usage error: options JSON: ["));
    // A name is one flag: no second argument or value hidden in it.
    EXPECT_EQ(call("inspect", R"({"local_dir=x --json": true})").error,
              "vmerge-mpi: usage error: option 'local_dir=x --json': expected a flag name (letters, digits, _ and -, "
              "no dashes before it) (see --help)");
    EXPECT_EQ(call("inspect", R"({"--local_dir": "x"})").code, 2);
}

struct ProgressSeen {
    int calls = 0;
    uint64_t done = 0, total = 0;
    bool cancel = false;
};

int record_progress(uint64_t done, uint64_t total, void* user) {
    auto* seen = static_cast<ProgressSeen*>(user);
    ++seen->calls;
    seen->done = done;
    seen->total = total;
    return seen->cancel ? 1 : 0;
}

TEST(CInterface, ProgressReachesTheTotal) {
    testing::TempDir dir;
    ProgressSeen seen;
    const auto options = nlohmann::json{{"local_dir", kExample}, {"target_dir", dir.path() + "/out"}, {"quiet", true}};
    const CallOutcome merged = call("merge", options.dump(), record_progress, &seen);
    ASSERT_EQ(merged.code, 0) << merged.error;
    EXPECT_GE(seen.calls, 1);
    EXPECT_GT(seen.total, 0u);
    EXPECT_EQ(seen.done, seen.total);
    EXPECT_EQ(nlohmann::json::parse(merged.json).at("bytes"), seen.total);
}

TEST(CInterface, CancelLeavesNoTargetAndAResumableStagingFolder) {
    testing::TempDir dir;
    const std::string target = dir.path() + "/out";
    ProgressSeen seen;
    seen.cancel = true;
    const auto options = nlohmann::json{{"local_dir", kExample}, {"target_dir", target}, {"quiet", true}};
    const CallOutcome cancelled = call("merge", options.dump(), record_progress, &seen);
    EXPECT_EQ(cancelled.code, 1);
    EXPECT_EQ(seen.calls, 1);
    EXPECT_EQ(cancelled.error, "vmerge-mpi: error: step 'copy' failed: cancelled by the progress callback\nthe "
                               "unfinished output is kept in " + staging_path(target) +
                               "; rerun the same command with --resume to continue it");
    EXPECT_FALSE(std::filesystem::exists(target));
    EXPECT_TRUE(std::filesystem::is_directory(staging_path(target)));
    // --resume completes it, and the result is the merge an uncancelled call writes.
    auto resumed_options = options;
    resumed_options["resume"] = true;
    const CallOutcome resumed = call("merge", resumed_options.dump());
    ASSERT_EQ(resumed.code, 0) << resumed.error;
    EXPECT_FALSE(std::filesystem::exists(staging_path(target)));
    const CallOutcome whole = call("merge", nlohmann::json{{"local_dir", kExample}, {"target_dir", dir.path() + "/whole"}}.dump());
    ASSERT_EQ(whole.code, 0) << whole.error;
    EXPECT_EQ(read_bytes(target + "/model.safetensors"), read_bytes(dir.path() + "/whole/model.safetensors"));
}

void count_signal(int) {}

// A merge's lock handling must not outlive the call: the caller's SIGINT/SIGTERM/SIGHUP handlers
// are its own again afterwards (Python's KeyboardInterrupt).
TEST(CInterface, TheCallersSignalHandlersAreKept) {
    struct sigaction mine {};
    mine.sa_handler = count_signal;
    struct sigaction before[3], after[3];
    const int signals[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; ++i) ::sigaction(signals[i], &mine, &before[i]);
    testing::TempDir dir;
    const CallOutcome merged =
        call("merge", nlohmann::json{{"local_dir", kExample}, {"target_dir", dir.path() + "/out"}, {"quiet", true}}.dump());
    EXPECT_EQ(merged.code, 0) << merged.error;
    for (int i = 0; i < 3; ++i) {
        ::sigaction(signals[i], &before[i], &after[i]);
        EXPECT_EQ(after[i].sa_handler, count_signal) << "signal " << signals[i];
    }
}

TEST(CInterface, VersionAndAbi) {
    EXPECT_STREQ(vmerge_version(), api::version());
    EXPECT_EQ(vmerge_c_api_version(), VMERGE_C_API_VERSION);
    EXPECT_EQ(vmerge_run("inspect", "{}", nullptr, nullptr, nullptr), 2);  // no result asked for
}

}  // namespace
}  // namespace vmerge
