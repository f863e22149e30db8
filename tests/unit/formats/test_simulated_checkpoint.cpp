// Unit tests for simulate_checkpoint (src/formats/simulated/simulated_checkpoint.h): declared layouts
// run through the real backends give exactly the tensors config.json implies, and the plans
// for the example 70B / 671B configs are balanced. Plan numbers and times are printed for
// docs/scaling.md.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/output_layout.h"
#include "mapping/output_rules.h"
#include "plan/rank_work.h"
#include "test_support.h"
#include "formats/simulated/simulated_checkpoint.h"

namespace vmerge {
namespace {
namespace fs = std::filesystem;

HfConfig config_from(const std::string& name, const std::string& json) {
    const fs::path dir = fs::temp_directory_path() / ("vmerge_sim_" + std::to_string(getpid()) + "_" + name);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << json;
    HfConfig config = load_hf_config(dir.string());
    fs::remove_all(dir);
    return config;
}

const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
  "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 3,
  "vocab_size": 250, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

const char* kTinyDeepseek = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
  "moe_intermediate_size": 16, "n_routed_experts": 8, "n_shared_experts": 1, "first_k_dense_replace": 1,
  "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 5,
  "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
  "vocab_size": 300, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "num_nextn_predict_layers": 0})";

const char* kTinyQwen2MoeTied = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
  "moe_intermediate_size": 16, "shared_expert_intermediate_size": 32, "num_experts": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
  "vocab_size": 200, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

// Simulates, applies the output rules as the driver does, and checks the tensor set against
// expected_hf_tensors: same names, same shapes, bf16, every element written once.
TensorMapping simulate_and_check(const HfConfig& config, const std::string& spec) {
    std::vector<std::string> notes;
    TensorMapping mapping = simulate_checkpoint(config, spec, testing::shipped_tables(), notes);
    apply_output_rules(mapping, config, DTypeChoice::Auto, false);
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    std::map<std::string, Shape> got;
    for (const auto& t : mapping.tensors) {
        EXPECT_TRUE(got.emplace(t.name, t.shape).second) << spec << ": " << t.name << " twice";
        EXPECT_EQ(t.dtype, DType::BF16) << spec << ": " << t.name;
        check_copies_tile_output(t, mapping.sources);
    }
    EXPECT_EQ(got, arch.expected.required) << spec;
    for (const auto& note : notes) std::printf("  [%s] %s\n", spec.c_str(), note.c_str());
    return mapping;
}

TEST(SimulatedCheckpoint, FsdpTinyLlama) {
    const HfConfig config = config_from("llama", kTinyLlama);
    const TensorMapping m = simulate_and_check(config, "fsdp:3");
    // Each tensor comes from the three ranks' Shard(0) pieces, read as fp32.
    for (const auto& t : m.tensors) {
        EXPECT_EQ(t.source_dtype, DType::F32);
        EXPECT_EQ(t.copies.size(), 3u) << t.name;
    }
    uint64_t elements = 0;
    for (const auto& t : m.tensors) elements += numel(t.shape);
    EXPECT_EQ(mapping_read_bytes(m), elements * 4);
    EXPECT_EQ(m.sources.front().storage.file, "<simulated>/model_world_size_3_rank_0.pt");
    // 250 rows over 3 ranks: torch.chunk gives 84, 84, 82 in a padded 84-row buffer.
    EXPECT_EQ(m.tensors.front().name, "model.embed_tokens.weight");
}

TEST(SimulatedCheckpoint, MegatronTinyLlamaTp2Pp2) {
    const HfConfig config = config_from("llama", kTinyLlama);
    const TensorMapping m = simulate_and_check(config, "megatron:tp2,pp2");
    // Vocabulary padded to 256 (128 x tp 2); only the 250 real rows are read.
    uint64_t elements = 0;
    for (const auto& t : m.tensors) elements += numel(t.shape);
    EXPECT_EQ(mapping_read_bytes(m), elements * 2);
    bool saw_stage1 = false;
    for (const auto& s : m.sources) saw_stage1 = saw_stage1 || s.storage.file.find("/mp_rank_01_001/") != std::string::npos;
    EXPECT_TRUE(saw_stage1);
}

TEST(SimulatedCheckpoint, MegatronTinyDeepseekMoe) {
    const HfConfig config = config_from("deepseek", kTinyDeepseek);
    simulate_and_check(config, "megatron:tp2,pp2,ep2,vpp2");
    simulate_and_check(config, "megatron:ep4");
    simulate_and_check(config, "fsdp:5");
}

TEST(SimulatedCheckpoint, MegatronTiedQwen2MoeExpertFolders) {
    const HfConfig config = config_from("qwen2moe", kTinyQwen2MoeTied);
    // pp 1, ep 2: folders mp_rank_TT_EEE, the lone second index read back as the expert rank.
    simulate_and_check(config, "megatron:tp2,ep2");
    // pp 2: the last stage's tied output_layer copy is dropped.
    simulate_and_check(config, "megatron:pp2,ep2");
}

TEST(SimulatedCheckpoint, RejectsBadSpecs) {
    const HfConfig config = config_from("llama", kTinyLlama);
    std::vector<std::string> notes;
    for (const char* spec : {"fsdp", "fsdp:0", "fsdp:x", "dcp:4", "megatron:tp2,tp2", "megatron:xp2", "megatron:ep2",
                             "megatron:tp3"})
        EXPECT_THROW(simulate_checkpoint(config, spec, testing::shipped_tables(), notes), Error) << spec;
}

TEST(SimulatedCheckpoint, FsdpMetadataTooLargeIsAnErrorNotAnOutOfMemoryKill) {
    const HfConfig config = config_from("deepseek", kTinyDeepseek);  // 167 tensors
    std::vector<std::string> notes;
    try {
        simulate_checkpoint(config, "fsdp:40000", testing::shipped_tables(), notes);
        ADD_FAILURE() << "no Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("6680000 DTensor shards"), std::string::npos) << e.what();
    }
}

struct PlanNumbers {
    uint64_t total = 0, read = 0, max_rank = 0, min_rank = 0;
    double mean = 0;
    size_t files = 0, tensors = 0;
    double simulate_s = 0, plan_s = 0;
};

PlanNumbers plan_numbers(const HfConfig& config, const std::string& spec, const std::vector<int>& ranks_list) {
    using clock = std::chrono::steady_clock;
    PlanNumbers n;
    const auto t0 = clock::now();
    std::vector<std::string> notes;
    TensorMapping mapping = simulate_checkpoint(config, spec, testing::shipped_tables(), notes);
    apply_output_rules(mapping, config, DTypeChoice::Auto, false);
    const auto t1 = clock::now();
    n.simulate_s = std::chrono::duration<double>(t1 - t0).count();
    for (const auto& note : notes) std::printf("  note: %s\n", note.c_str());
    const OutputLayout layout = plan_safetensors_layout(mapping.tensors, 5000000000ULL);
    n.total = layout.total_size;
    n.read = mapping_read_bytes(mapping);
    n.files = layout.files.size();
    n.tensors = mapping.tensors.size();
    uint64_t largest_file = 0;
    for (const auto& f : layout.files) largest_file = std::max(largest_file, f.size);
    std::printf("%s: %zu tensors, %zu sources, output %.3f GB in %zu files (largest %.3f GB), reads %.3f GB; simulate %.2f s\n",
                spec.c_str(), n.tensors, mapping.sources.size(), n.total / 1e9, n.files, largest_file / 1e9, n.read / 1e9,
                n.simulate_s);
    for (int ranks : ranks_list) {
        const auto p0 = clock::now();
        const auto work = plan_rank_work(mapping.tensors, layout, ranks);
        const auto p1 = clock::now();
        n.plan_s = std::chrono::duration<double>(p1 - p0).count();
        std::vector<uint64_t> bytes(ranks, 0);
        size_t tasks = 0, max_files = 0;
        for (int r = 0; r < ranks; ++r) {
            std::vector<size_t> files;
            for (const auto& task : work[r]) {
                bytes[r] += (task.row_end - task.row_begin) * row_bytes(mapping.tensors[task.tensor]);
                files.push_back(layout.locations[task.tensor].file);
            }
            std::sort(files.begin(), files.end());
            max_files = std::max(max_files, static_cast<size_t>(std::unique(files.begin(), files.end()) - files.begin()));
            tasks += work[r].size();
        }
        std::vector<size_t> writers(layout.files.size(), 0);
        for (int r = 0; r < ranks; ++r) {
            std::vector<size_t> files;
            for (const auto& task : work[r]) files.push_back(layout.locations[task.tensor].file);
            std::sort(files.begin(), files.end());
            files.erase(std::unique(files.begin(), files.end()), files.end());
            for (size_t f : files) ++writers[f];
        }
        n.max_rank = *std::max_element(bytes.begin(), bytes.end());
        n.min_rank = *std::min_element(bytes.begin(), bytes.end());
        n.mean = static_cast<double>(n.total) / ranks;
        std::printf("  %d ranks: mean %.3f GB/rank, max %.3f GB (max/mean-1 = %.4f%%), min %.3f GB, %zu row ranges, "
                    "files per rank <= %zu, writers per file <= %zu; plan %.3f s\n",
                    ranks, n.mean / 1e9, n.max_rank / 1e9, 100.0 * (n.max_rank / n.mean - 1), n.min_rank / 1e9, tasks,
                    max_files, *std::max_element(writers.begin(), writers.end()), n.plan_s);
    }
    return n;
}

std::string example_dir(const std::string& name) { return std::string(VMERGE_SOURCE_DIR) + "/docs/examples/" + name; }

TEST(SimulatedCheckpoint, Llama70BFsdp1024PlanIsBalanced) {
    const auto start = std::chrono::steady_clock::now();
    const HfConfig config = load_hf_config(example_dir("llama-3-70b"));
    const PlanNumbers n = plan_numbers(config, "fsdp:1024", {64, 256, 512});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("70B fsdp:1024 simulate + plan: %.2f s\n", seconds);
    // 70.55 B parameters: 141.1 GB of bf16 output, 282.2 GB of fp32 read.
    EXPECT_NEAR(n.total / 1e9, 141.1, 0.5);
    EXPECT_EQ(n.read, 2 * n.total);
    EXPECT_LT(n.max_rank / n.mean - 1, 0.05);  // the last call above: 512 ranks
}

TEST(SimulatedCheckpoint, DeepseekV3Megatron512RanksPlanIsBalanced) {
    const auto start = std::chrono::steady_clock::now();
    const HfConfig config = load_hf_config(example_dir("deepseek-v3-671b"));
    const PlanNumbers n = plan_numbers(config, "megatron:tp8,pp16,ep8", {64, 512});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("671B megatron:tp8,pp16,ep8 simulate + plan: %.2f s\n", seconds);
    // 671.0 B parameters without MTP: 1.342 TB of bf16 (e_score_correction_bias included).
    EXPECT_NEAR(n.total / 1e12, 1.342, 0.01);
    EXPECT_LT(n.max_rank / n.mean - 1, 0.05);
}

}  // namespace
}  // namespace vmerge
