// Unit tests for simulate_checkpoint (src/formats/simulated/simulated_checkpoint.h): declared layouts
// run through the real backends give exactly the tensors config.json implies, and the plans
// for the example 70B / 671B configs are balanced. Plan numbers and times are printed for
// docs/scaling.md.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
#include "architecture/architecture_table.h"
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
TensorMapping simulate_and_check(const HfConfig& config, const std::string& spec,
                                 const ArchitectureTables& tables = testing::shipped_tables()) {
    std::vector<std::string> notes;
    TensorMapping mapping = simulate_checkpoint(config, spec, tables, notes);
    apply_output_rules(mapping, config, DTypeChoice::Auto, false);
    const ArchitectureInfo arch = architecture_for(config, false, false, tables);
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

// A multimodal Megatron model as mbridge / Megatron-Bridge save it: the text GPTModel under
// language_model.* (written model.language_model.layers.{i}), the vision tower under
// vision_model.* (written model.visual.blocks.{i}, and a {*} rule for the rest). Neither HF
// name starts with model.layers: the inversion matches the rules' `to` patterns themselves.
const char* kTinyVlTables = R"json([
  {"vmerge_architecture_table": 1, "name": "tiny vl (HF)", "source": "hf", "architectures": ["TinyVlForConditionalGeneration"],
   "tensor_set": {"extends": "LlamaForCausalLM",
     "define": {"model": "'model.language_model'", "vh": "vision_config.hidden_size"},
     "ranges": {"v": "vision_config.depth"},
     "tensors": [
       {"name": "model.visual.patch_embed.weight", "shape": ["vh", 12]},
       {"name": "model.visual.blocks.{v}.norm1.weight", "shape": ["vh"]},
       {"name": "model.visual.blocks.{v}.attn.proj.weight", "shape": ["vh", "vh"]},
       {"name": "model.visual.blocks.{v}.attn.proj.bias", "shape": ["vh"]},
       {"name": "model.visual.merger.fc.weight", "shape": ["hidden_size", "vh"]}]}},
  {"vmerge_architecture_table": 1, "name": "tiny vl (megatron)", "source": "megatron", "architectures": ["TinyVlForConditionalGeneration"],
   "rules": [
     {"from": "language_model.embedding.word_embeddings.weight", "to": "model.language_model.embed_tokens.weight", "split": "vocab", "tp": "dim0"},
     {"from": "language_model.decoder.final_layernorm.weight", "to": "model.language_model.norm.weight"},
     {"from": "language_model.output_layer.weight", "to": "lm_head.weight", "split": "vocab", "tp": "dim0", "tied_head": true},
     {"from": "language_model.decoder.layers.{i}.self_attention.linear_qkv.layer_norm_weight", "to": "model.language_model.layers.{i}.input_layernorm.weight"},
     {"from": "language_model.decoder.layers.{i}.self_attention.linear_qkv.weight", "to": ["model.language_model.layers.{i}.self_attn.q_proj.weight", "model.language_model.layers.{i}.self_attn.k_proj.weight", "model.language_model.layers.{i}.self_attn.v_proj.weight"], "split": "qkv", "tp": "dim0"},
     {"from": "language_model.decoder.layers.{i}.self_attention.linear_proj.weight", "to": "model.language_model.layers.{i}.self_attn.o_proj.weight", "tp": "dim1"},
     {"from": "language_model.decoder.layers.{i}.mlp.linear_fc1.layer_norm_weight", "to": "model.language_model.layers.{i}.post_attention_layernorm.weight"},
     {"from": "language_model.decoder.layers.{i}.mlp.linear_fc1.weight", "to": ["model.language_model.layers.{i}.mlp.gate_proj.weight", "model.language_model.layers.{i}.mlp.up_proj.weight"], "split": "gate_up", "tp": "glu_halves"},
     {"from": "language_model.decoder.layers.{i}.mlp.linear_fc2.weight", "to": "model.language_model.layers.{i}.mlp.down_proj.weight", "tp": "dim1"},
     {"from": "vision_model.decoder.layers.{i}.input_layernorm.weight", "to": "model.visual.blocks.{i}.norm1.weight"},
     {"from": "vision_model.decoder.layers.{i}.self_attention.linear_proj.weight", "to": "model.visual.blocks.{i}.attn.proj.weight", "tp": "dim1"},
     {"from": "vision_model.decoder.layers.{i}.self_attention.linear_proj.bias", "to": "model.visual.blocks.{i}.attn.proj.bias"},
     {"from": "vision_model.{*}", "to": "model.visual.{*}"}]}
])json";

const char* kTinyVl = R"({
  "architectures": ["TinyVlForConditionalGeneration"], "hidden_size": 64, "intermediate_size": 96,
  "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 4,
  "vocab_size": 250, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "vision_config": {"hidden_size": 32, "depth": 3}})";

TEST(SimulatedCheckpoint, MegatronVlPartsOnTheirStages) {
    ArchitectureTables tables = testing::shipped_tables();
    for (const auto& doc : nlohmann::json::parse(kTinyVlTables)) tables.push_back(parse_architecture_table("tiny_vl.json", doc));
    const HfConfig config = config_from("tiny_vl", kTinyVl);
    simulate_and_check(config, "megatron:tp2,pp2,vpp2", tables);
    const TensorMapping m = simulate_and_check(config, "megatron:tp2,pp2", tables);
    // The vision tower sits whole on the first pipeline stage; the text layers 2 and 3 on the second.
    for (const auto& t : m.tensors)
        for (const auto& c : t.copies) {
            const std::string& file = m.sources[c.source].storage.file;
            if (t.name.starts_with("model.visual.") || t.name.starts_with("model.language_model.layers.0.") ||
                t.name.starts_with("model.language_model.embed_tokens.")) {
                EXPECT_NE(file.find("_000/"), std::string::npos) << t.name << " from " << file;
            }
            if (t.name.starts_with("model.language_model.layers.3.") || t.name.starts_with("model.language_model.norm.")) {
                EXPECT_NE(file.find("_001/"), std::string::npos) << t.name << " from " << file;
            }
        }
}

// GPT-OSS's experts: one HF tensor [E, ...] stacked from E per-expert Megatron keys, transposed
// (down_proj) or transposed and gate/up interleaved (gate_up_proj).
const char* kTinyGptOss = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "head_dim": 16, "hidden_size": 64,
  "intermediate_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 258, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

TEST(SimulatedCheckpoint, MegatronGptOssStackedExperts) {
    const HfConfig config = config_from("gpt_oss", kTinyGptOss);
    simulate_and_check(config, "megatron:tp2,pp2");
    const TensorMapping m = simulate_and_check(config, "megatron:pp2,ep2");
    int found = 0;
    for (const auto& t : m.tensors)
        if (t.name == "model.layers.1.mlp.experts.down_proj") {
            ++found;
            EXPECT_EQ(t.shape, (Shape{4, 48, 64}));
        }
    EXPECT_EQ(found, 1);
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
