// The report module: text and JSON come from one model, so they state the same facts.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "report/inspect_report.h"
#include "report/merge_summary.h"

namespace vmerge {
namespace {

InspectReport sample_inspect() {
    InspectReport r;
    r.facts = {{"backend", "megatron"}, {"tp", 2}, {"pp", 1}, {"vpp", 1}, {"ep", 1}};
    r.backend = "megatron";
    r.description = "Megatron-LM legacy (iteration 20)";
    r.local_dir = "/ckpt";
    r.hf_config = "/ckpt/huggingface";
    r.architecture = "LlamaForCausalLM";
    r.states_parallelism = true;
    r.scanned_archives = 2;
    r.notes = {"a note"};
    r.source_entries_written = 3;
    r.dropped = nlohmann::ordered_json::object();
    r.tensors = {{"model.embed_tokens.weight", {8, 4}, "torch.float32", "torch.bfloat16", 64, 2},
                 {"lm_head.weight", {8, 4}, "torch.float32", "torch.bfloat16", 64, 2}};
    r.total_bytes = 128;
    r.files = {{"model.safetensors", 128, 2}};
    r.ranks = 2;
    r.per_rank = {{0, 96, 2}, {1, 32, 1}};
    r.max_memory = 64ull << 20;
    r.max_memory_automatic = false;
    r.lora = InspectReport::Lora{true, 7, {8, 16}, 32, "--lora_alpha"};
    r.plan_seconds = 0.5;
    r.total_seconds = 1.25;
    return r;
}

TEST(InspectReport, TextAndJsonStateTheSameFacts) {
    const InspectReport r = sample_inspect();
    const auto j = inspect_json(r);
    std::ostringstream text;
    print_inspect_text(r, text);
    const std::string t = text.str();
    EXPECT_EQ(j["tensors"].size(), 2u);
    EXPECT_NE(t.find("tensors      2, "), std::string::npos) << t;
    EXPECT_EQ(j["tp"], 2);
    EXPECT_NE(t.find("parallelism  tp 2, pp 1, vpp 1, ep 1\n"), std::string::npos) << t;
    EXPECT_EQ(j["notes"][0], "a note");
    EXPECT_NE(t.find("note         a note\n"), std::string::npos);
    EXPECT_EQ(j["lora"]["modules"], 7);
    EXPECT_EQ(j["lora"]["mode"], "merge");
    EXPECT_NE(t.find("lora         7 adapted modules, r 8/16, lora_alpha 32 (--lora_alpha): folded into"), std::string::npos)
        << t;
    // The balance is computed once: largest 96 over a mean of 64 is 50% over.
    EXPECT_EQ(j["plan"]["largest_rank_bytes"], 96u);
    EXPECT_DOUBLE_EQ(j["plan"]["mean_rank_bytes"].get<double>(), 64.0);
    EXPECT_DOUBLE_EQ(j["plan"]["largest_over_mean"].get<double>(), 0.5);
    EXPECT_NE(t.find("(50.000% over the mean)"), std::string::npos) << t;
    EXPECT_NE(t.find("  rank 0: 96 B in 2 row ranges\n  rank 1: 32 B in 1 row ranges\n"), std::string::npos) << t;
    EXPECT_EQ(j["plan"]["per_rank"].size(), 2u);
    EXPECT_FALSE(j.contains("shardings"));
    EXPECT_FALSE(j.contains("quantization"));
    EXPECT_EQ(t.find("quantized"), std::string::npos);
}

// inspect --quantize states each scheme's own parameters in JSON and text alike, not the int
// scheme's --bits/--group_size defaults (docs/quantization.md).
// A spec of one scheme with the defaults (designated initialisers would name every member).
QuantizeSpec spec_of(QuantScheme scheme) {
    QuantizeSpec spec;
    spec.scheme = scheme;
    return spec;
}

TEST(InspectReport, QuantizationStatesEachSchemesParameters) {
    OutputTensor scale;
    scale.role = OutputTensor::Role::QuantScale;
    scale.dtype = DType::BF16;
    const std::vector<OutputTensor> tensors{scale};
    struct Case {
        QuantizeSpec spec;
        const char* element;
        int bits;
        const char* strategy;
        nlohmann::ordered_json group_size, block_size;
        const char* scale_dtype;
        nlohmann::ordered_json scale_format, global_scale;
        const char* text;
    };
    QuantizeSpec int8;
    int8.bits = 8;
    int8.group_size = 32;
    int8.symmetric = false;
    QuantizeSpec ue8m0 = spec_of(QuantScheme::Fp8Block);
    ue8m0.scale_format = Fp8ScaleFormat::Ue8m0;
    const nlohmann::ordered_json null, block = {128, 128};
    const std::vector<Case> cases{
        {spec_of(QuantScheme::Fp8Block), "float8_e4m3fn", 8, "block", null, block, "float32", "float", null,
         "float8_e4m3fn, a scale per 128x128 block (block), float32 scales, scale format float"},
        {ue8m0, "float8_e4m3fn", 8, "block", null, block, "float32", "ue8m0", null,
         "float8_e4m3fn, a scale per 128x128 block (block), float32 scales, scale format ue8m0"},
        {spec_of(QuantScheme::Fp8CtBlock), "float8_e4m3fn", 8, "block", null, block, "bfloat16", null, null,
         "float8_e4m3fn, a scale per 128x128 block (block), bfloat16 scales"},
        {spec_of(QuantScheme::Fp8Dynamic), "float8_e4m3fn", 8, "channel", null, null, "bfloat16", null, null,
         "float8_e4m3fn, a scale per output channel (channel), bfloat16 scales"},
        {spec_of(QuantScheme::Nvfp4), "float4_e2m1", 4, "tensor_group", 16, null, "float8_e4m3fn", null,
         "float32", "float4_e2m1, a scale per 16 inputs (tensor_group), float8_e4m3fn scales, a float32 global scale per weight"},
        {spec_of(QuantScheme::Mxfp4), "float4_e2m1", 4, "group", 32, null, "ue8m0", null, null,
         "float4_e2m1, a scale per 32 inputs (group), ue8m0 scales"},
        {int8, "int8", 8, "group", 32, null, "bfloat16", null, null,
         "int8, a scale per 32 inputs (group), bfloat16 scales, zero points"},
    };
    for (const Case& c : cases) {
        InspectReport r = sample_inspect();
        r.quantization = inspect_quantization(c.spec, QuantizationPlan{{"lm_head"}, {}, {}, 100, 40}, tensors);
        const auto q = inspect_json(r)["quantization"];
        const std::string scheme = quant_scheme_name(c.spec.scheme);
        EXPECT_EQ(q["scheme"], scheme);
        EXPECT_EQ(q["element"], c.element) << scheme;
        EXPECT_EQ(q["bits"], c.bits) << scheme;
        EXPECT_EQ(q["strategy"], c.strategy) << scheme;
        EXPECT_EQ(q["group_size"], c.group_size) << scheme;
        EXPECT_EQ(q["block_size"], c.block_size) << scheme;
        EXPECT_EQ(q["scale_dtype"], c.scale_dtype) << scheme;
        EXPECT_EQ(q["scale_format"], c.scale_format) << scheme;
        EXPECT_EQ(q["global_scale"], c.global_scale) << scheme;
        EXPECT_EQ(q["symmetric"], c.spec.scheme != QuantScheme::Int || c.spec.symmetric) << scheme;
        EXPECT_EQ(q["bytes_after"], 40u);
        std::ostringstream text;
        print_inspect_text(r, text);
        EXPECT_NE(text.str().find("quant scheme " + std::string(c.text) + "\n"), std::string::npos) << text.str();
        EXPECT_NE(text.str().find("quantized    " + quantization_description(c.spec) + ": 100 B -> 40 B"),
                  std::string::npos) << text.str();
    }
    // Nothing quantized: no scale tensor to name the weight dtype by.
    EXPECT_EQ(inspect_quantization(spec_of(QuantScheme::Fp8Dynamic), {}, {}).parameters.scale_dtype,
              "the weight dtype");
}

TEST(InspectReport, LongPlansShowTheFirstAndLastRanks) {
    InspectReport r = sample_inspect();
    r.ranks = 40;
    r.per_rank.clear();
    for (int k = 0; k < 40; ++k) r.per_rank.push_back({k, 10, 1});
    std::ostringstream text;
    print_inspect_text(r, text);
    EXPECT_NE(text.str().find("  rank 7: "), std::string::npos);
    EXPECT_NE(text.str().find("  ...\n  rank 32: "), std::string::npos);
    EXPECT_EQ(text.str().find("  rank 8: "), std::string::npos);
    EXPECT_EQ(inspect_json(r)["plan"]["per_rank"].size(), 40u);
}

TEST(MergeSummary, LogJsonAndSummaryLinesFromOneModel) {
    MergeSummary s;
    s.local_dir = "/ckpt";
    s.target_dir = "/out";
    s.ranks = 2;
    s.wall_seconds = 2.0;
    s.total_bytes = 4'000'000'000;
    s.files = 1;
    s.max_memory = 1 << 30;
    s.tensors = 5;
    s.adapter_tensors = 2;
    s.archives = 2;
    s.resumed = true;
    for (int rank = 0; rank < 2; ++rank) {
        RankMergeRecord record;
        record.rank = rank;
        record.host = "node";
        record.stats.bytes_skipped = 1'000'000'000;
        record.stats.quantization_error["mlp"] = {1.0, 0.5 + rank, 2};
        record.peak_rss_bytes = (rank + 1) * 1024;
        s.per_rank.push_back(rank_record_json(record));
    }
    s.quantize = QuantizeSpec{};
    const MergeTotals totals = merge_totals(s);
    EXPECT_EQ(totals.resumed_bytes, 2'000'000'000u);
    EXPECT_EQ(totals.quantization_error.at("mlp").count, 4u);
    EXPECT_DOUBLE_EQ(totals.quantization_error.at("mlp").max, 1.5);

    const auto log = merge_log_json(s);
    EXPECT_EQ(log["ranks"], 2);
    EXPECT_EQ(log["per_rank"].size(), 2u);
    EXPECT_EQ(log["per_rank"][1]["peak_rss_bytes"], 2048u);
    std::ostringstream text;
    print_merge_summary(s, text);
    const std::string t = text.str();
    EXPECT_NE(t.find("vmerge: resumed: "), std::string::npos) << t;
    EXPECT_NE(t.find("vmerge: merged 3 tensors and 2 adapter tensors ("), std::string::npos) << t;
    EXPECT_NE(t.find("from 2 archives into /out (1 file) with 2 ranks in 2.00 s (953.7 MiB/s written)"), std::string::npos)
        << t;
    EXPECT_NE(t.find("  mlp: 5.000e-01, 1.500e+00\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace vmerge
