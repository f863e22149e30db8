// Unit tests for src/learned_map/: the row layouts, the matching by sampled values and the table
// learned from the matches, on small in-memory models whose fused and permuted layouts are built
// here row by row as Megatron and torchtitan store them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "learned_map/layer_numbers.h"
#include "learned_map/learned_table.h"
#include "learned_map/stacked_experts.h"
#include "learned_map/tensor_matching.h"

namespace vmerge {
namespace {

// A tensor held in memory: rows of doubles.
struct HeldTensor {
    std::string name;
    Shape shape;
    std::vector<std::vector<double>> rows;
};

class HeldRows final : public RowValues {
public:
    explicit HeldRows(const std::vector<HeldTensor>& tensors) : tensors_(tensors) {}
    std::vector<double> row(size_t tensor, int64_t row) override { return tensors_.at(tensor).rows.at(row); }
    int reads = 0;

private:
    const std::vector<HeldTensor>& tensors_;
};

HeldTensor random_tensor(const std::string& name, Shape shape, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> normal;
    HeldTensor t{name, shape, {}};
    const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    t.rows.assign(rows, std::vector<double>(cols));
    for (auto& r : t.rows)
        for (auto& v : r) v = normal(gen);
    return t;
}

// `t` fine-tuned: each element moved by a little noise (its own seed).
HeldTensor tuned(HeldTensor t, const std::string& name, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> normal(0, 0.01);
    t.name = name;
    for (auto& r : t.rows)
        for (auto& v : r) v += normal(gen);
    return t;
}

std::vector<NamedShape> shapes(const std::vector<HeldTensor>& tensors) {
    std::vector<NamedShape> out;
    for (const auto& t : tensors) out.push_back({t.name, t.shape, "", false});
    return out;
}

// Megatron's fused qkv: per query group g, its q heads, then its k head, then its v head.
HeldTensor megatron_qkv(const std::string& name, const HeldTensor& q, const HeldTensor& k, const HeldTensor& v,
                        int64_t heads, int64_t groups, int64_t d) {
    HeldTensor t{name, {(heads + 2 * groups) * d, q.shape[1]}, {}};
    for (int64_t g = 0; g < groups; ++g) {
        for (int64_t h = g * heads / groups; h < (g + 1) * heads / groups; ++h)
            for (int64_t r = 0; r < d; ++r) t.rows.push_back(q.rows[h * d + r]);
        for (int64_t r = 0; r < d; ++r) t.rows.push_back(k.rows[g * d + r]);
        for (int64_t r = 0; r < d; ++r) t.rows.push_back(v.rows[g * d + r]);
    }
    return t;
}

// A vision tower's qkv as Megatron stores it: per head h, [q_h; k_h; v_h], from HF's fused
// [Q; K; V] of `heads` heads.
HeldTensor per_head_qkv(const std::string& name, const HeldTensor& hf, int64_t heads) {
    const int64_t d = hf.shape[0] / (3 * heads);
    HeldTensor t{name, hf.shape, {}};
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t part = 0; part < 3; ++part)
            for (int64_t j = 0; j < d; ++j) t.rows.push_back(hf.rows[part * heads * d + h * d + j]);
    return t;
}

HeldTensor stacked(const std::string& name, const HeldTensor& a, const HeldTensor& b) {
    HeldTensor t{name, {a.shape[0] + b.shape[0], a.shape[1]}, a.rows};
    t.rows.insert(t.rows.end(), b.rows.begin(), b.rows.end());
    return t;
}

// torchtitan's q before to_hf: within each head, HF's rotate-half row j·d/2 + p is row 2p + j.
HeldTensor interleaved_rope(const std::string& name, const HeldTensor& hf, int64_t heads) {
    const int64_t d = hf.shape[0] / heads;
    HeldTensor t{name, hf.shape, hf.rows};
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < 2; ++j)
            for (int64_t p = 0; p < d / 2; ++p) t.rows[h * d + 2 * p + j] = hf.rows[h * d + j * d / 2 + p];
    return t;
}

const ModelShape kHeads{4, 2, 4, 40, 0, {}};  // 4 query heads, 2 groups, head dim 4; hidden 16; vocab 40

struct Model {
    std::vector<HeldTensor> base, checkpoint;
};

// A two-layer Llama-like base and its fine-tuned Megatron canonical tensors.
Model megatron_llama() {
    Model m;
    unsigned seed = 1;
    m.base.push_back(random_tensor("model.embed_tokens.weight", {40, 16}, seed++));
    HeldTensor embedding = m.base.back();
    embedding.rows.resize(48, std::vector<double>(16, 0.5));  // padded vocabulary rows
    embedding.shape = {48, 16};
    m.checkpoint.push_back(tuned(embedding, "embedding.word_embeddings.weight", 100));
    for (int layer = 0; layer < 2; ++layer) {
        const std::string hf = "model.layers." + std::to_string(layer) + ".";
        const std::string mc = "decoder.layers." + std::to_string(layer) + ".";
        auto add = [&](const std::string& name, Shape shape) {
            m.base.push_back(random_tensor(hf + name, shape, seed++));
            return m.base.back();
        };
        const HeldTensor q = add("self_attn.q_proj.weight", {16, 16}), k = add("self_attn.k_proj.weight", {8, 16}),
                         v = add("self_attn.v_proj.weight", {8, 16}), o = add("self_attn.o_proj.weight", {16, 16}),
                         gate = add("mlp.gate_proj.weight", {24, 16}), up = add("mlp.up_proj.weight", {24, 16}),
                         down = add("mlp.down_proj.weight", {16, 24}), norm1 = add("input_layernorm.weight", {16}),
                         norm2 = add("post_attention_layernorm.weight", {16});
        m.checkpoint.push_back(tuned(megatron_qkv(mc + "self_attention.linear_qkv.weight", q, k, v, 4, 2, 4), "", seed++));
        m.checkpoint.back().name = mc + "self_attention.linear_qkv.weight";
        m.checkpoint.push_back(tuned(o, mc + "self_attention.linear_proj.weight", seed++));
        m.checkpoint.push_back(tuned(stacked("", gate, up), mc + "mlp.linear_fc1.weight", seed++));
        m.checkpoint.push_back(tuned(down, mc + "mlp.linear_fc2.weight", seed++));
        m.checkpoint.push_back(tuned(norm1, mc + "self_attention.linear_qkv.layer_norm_weight", seed++));
        m.checkpoint.push_back(tuned(norm2, mc + "mlp.linear_fc1.layer_norm_weight", seed++));
    }
    m.base.push_back(random_tensor("model.norm.weight", {16}, seed++));
    m.checkpoint.push_back(tuned(m.base.back(), "decoder.final_layernorm.weight", seed++));
    return m;
}

LearnedTable learn(const Model& m, TableSource source, bool tied = false, const ModelShape& heads = kHeads) {
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    const auto matches = match_tensors(shapes(m.checkpoint), checkpoint_rows, shapes(m.base), base_rows, heads, source, tied);
    return learn_table(matches, shapes(m.checkpoint), shapes(m.base));
}

const LearnedRule* rule_from(const LearnedTable& t, const std::string& from) {
    for (const auto& r : t.rules)
        if (r.from == from) return &r;
    return nullptr;
}

TEST(RowLayout, SamplesAreSpreadAndInclusive) {
    EXPECT_EQ(sample_rows(10, 4), (std::vector<int64_t>{0, 3, 6, 9}));
    EXPECT_EQ(sample_rows(3, 8), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(sample_rows(0, 8), std::vector<int64_t>{});
    EXPECT_EQ(sample_count(1), 64);
    EXPECT_EQ(sample_count(4096), 8);
}

TEST(RowLayout, QkvRowsFollowTheQueryGroups) {
    // 4 heads in 2 groups of head dim 2: group rows [q0 q0 q1 q1 k0 k0 v0 v0 | q2 q2 q3 q3 k1 k1 v1 v1].
    const ModelShape heads{4, 2, 2, 0, 0, {}};
    const LayoutGuess g{RowLayout::Qkv, {0, 1, 2}, 0, ""};
    const std::vector<int64_t> rows{8, 4, 4};
    EXPECT_EQ(source_row_of(g, heads, rows, 0, 3), 3);
    EXPECT_EQ(source_row_of(g, heads, rows, 0, 4), 8);
    EXPECT_EQ(source_row_of(g, heads, rows, 1, 1), 5);
    EXPECT_EQ(source_row_of(g, heads, rows, 1, 2), 12);
    EXPECT_EQ(source_row_of(g, heads, rows, 2, 3), 15);
}

TEST(NamePatterns, LayerThenExpert) {
    EXPECT_EQ(numbered_pattern("decoder.layers.3.mlp.experts.local_experts.5.linear_fc1.weight"),
              "decoder.layers.{i}.mlp.experts.local_experts.{e}.linear_fc1.weight");
    EXPECT_EQ(numbered_pattern("norm.weight"), "norm.weight");
    EXPECT_EQ(name_numbers("layers.12.linear_fc1.weight"), (std::vector<std::string>{"12"}));
}

TEST(RowLayout, LongRowsAreComparedOnSpreadLines) {
    // Rows of up to kRowElements elements are compared whole (every existing case's rows).
    const auto whole = compared_spans({8, 256, 256});
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_EQ(whole[0].extent, (Shape{256, 256}));
    EXPECT_EQ(compared_spans({16})[0].extent, Shape{});
    // GPT-OSS-120B's gate_up experts compared whole, [E, 2880, 5760] rows of 16.6M elements:
    // 11 lines of 5760, spread over the 2880, first and last included.
    const auto lines = compared_spans({128, 2880, 5760});
    ASSERT_EQ(lines.size(), 11u);
    int64_t elements = 0;
    for (const auto& span : lines) elements += numel(span.extent);
    EXPECT_LE(elements, kRowElements);
    EXPECT_EQ(lines.front().start, (Shape{0, 0}));
    EXPECT_EQ(lines.back().start, (Shape{2879, 0}));
    EXPECT_EQ(lines.back().extent, (Shape{1, 5760}));
    EXPECT_EQ(row_offset({128, 2880, 5760}, lines.back()), 2879 * 5760);
    // A last axis longer than the cap: one line, its first kRowElements elements.
    const auto wide = compared_spans({4, 3, 100000});
    ASSERT_EQ(wide.size(), 1u);
    EXPECT_EQ(wide[0].extent, (Shape{1, kRowElements}));
    // Four axes: the line's index runs over both middle axes.
    const auto deep = compared_spans({2, 4, 100, 1000});
    EXPECT_EQ(deep.back().start, (Shape{3, 99, 0}));
    EXPECT_EQ(row_offset({2, 4, 100, 1000}, deep.back()), (3 * 100 + 99) * 1000);
}

TEST(RowLayout, QkvPerHeadRowsFollowTheHeads) {
    // 2 heads of head dim 2: checkpoint rows [q0 q0 k0 k0 v0 v0 | q1 q1 k1 k1 v1 v1], HF [Q; K; V].
    const LayoutGuess g{RowLayout::QkvPerHead, {0}, 2, "vision_config.num_heads"};
    const std::vector<int64_t> rows{12};
    EXPECT_EQ(source_row_of(g, kHeads, rows, 0, 0), 0);
    EXPECT_EQ(source_row_of(g, kHeads, rows, 0, 2), 6);
    EXPECT_EQ(source_row_of(g, kHeads, rows, 0, 4), 2);
    EXPECT_EQ(source_row_of(g, kHeads, rows, 0, 9), 5);
    EXPECT_EQ(source_row_of(g, kHeads, rows, 0, 11), 11);
}

TEST(NamePatterns, SequentialIndicesStayInTheName) {
    const LayerNumbers numbers({"visual.merger.mlp.0.weight", "visual.merger.mlp.0.bias", "visual.merger.mlp.2.weight",
                                "visual.blocks.0.attn.qkv.weight", "visual.blocks.1.attn.qkv.weight",
                                "model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.experts.0.w",
                                "model.layers.1.mlp.experts.1.w", "head.5.weight"});
    EXPECT_EQ(numbers.pattern("visual.merger.mlp.2.weight"), "visual.merger.mlp.2.weight");
    EXPECT_TRUE(numbers.numbers("visual.merger.mlp.2.weight").empty());
    EXPECT_EQ(numbers.pattern("visual.blocks.1.attn.qkv.weight"), "visual.blocks.{i}.attn.qkv.weight");
    // Layer 1 alone has experts: the layers' numbers are those of every name after model.layers.
    EXPECT_EQ(numbers.pattern("model.layers.1.mlp.experts.1.w"), "model.layers.{i}.mlp.experts.{e}.w");
    EXPECT_EQ(numbers.numbers("model.layers.1.mlp.experts.1.w"), (std::vector<std::string>{"1", "1"}));
    EXPECT_EQ(numbers.pattern("head.5.weight"), "head.5.weight");  // a list of one starts at 0
}

TEST(LearnedMap, MegatronFusedLayoutsAreRecognised) {
    const LearnedTable t = learn(megatron_llama(), TableSource::Megatron);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    EXPECT_TRUE(t.unmapped_base.empty()) << learned_table_report(t);
    const LearnedRule* qkv = rule_from(t, "decoder.layers.{i}.self_attention.linear_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->layout, RowLayout::Qkv);
    EXPECT_EQ(qkv->to, (std::vector<std::string>{"model.layers.{i}.self_attn.q_proj.weight",
                                                 "model.layers.{i}.self_attn.k_proj.weight",
                                                 "model.layers.{i}.self_attn.v_proj.weight"}));
    EXPECT_EQ(qkv->tensors, 2u);
    EXPECT_LT(qkv->worst_distance, 0.05);
    const LearnedRule* fc1 = rule_from(t, "decoder.layers.{i}.mlp.linear_fc1.weight");
    ASSERT_NE(fc1, nullptr);
    EXPECT_EQ(fc1->layout, RowLayout::GateUp);
    EXPECT_EQ(fc1->to[0], "model.layers.{i}.mlp.gate_proj.weight");
    const LearnedRule* embedding = rule_from(t, "embedding.word_embeddings.weight");
    ASSERT_NE(embedding, nullptr);
    EXPECT_EQ(embedding->layout, RowLayout::Vocab);
    EXPECT_EQ(rule_from(t, "decoder.layers.{i}.mlp.linear_fc1.layer_norm_weight")->to[0],
              "model.layers.{i}.post_attention_layernorm.weight");
    // The table vmerge reads back.
    TableIdentity id{"learned", TableSource::Megatron, "LlamaForCausalLM", "", "test"};
    const auto doc = learned_table_json(t, id);
    const ArchitectureTable parsed = parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump()));
    EXPECT_EQ(parsed.rules.size(), t.rules.size());
}

TEST(LearnedMap, RanksSharingTheGroupsDecideAsOne) {
    const Model m = megatron_llama();
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    std::vector<SourceDecision> gathered;
    for (int rank = 0; rank < 3; ++rank) {
        const auto mine = decide_tensors(shapes(m.checkpoint), checkpoint_rows, shapes(m.base), base_rows, kHeads,
                                         TableSource::Megatron, rank, 3);
        for (auto& d : decisions_from_json(nlohmann::json::parse(decisions_json(mine).dump()))) gathered.push_back(d);
    }
    const MatchResult shared = settle_matches(gathered, shapes(m.checkpoint), shapes(m.base), false);
    const LearnedTable one = learn(m, TableSource::Megatron);
    const TableIdentity id{"learned", TableSource::Megatron, "LlamaForCausalLM", "", ""};
    EXPECT_EQ(learned_table_json(learn_table(shared, shapes(m.checkpoint), shapes(m.base)), id).dump(),
              learned_table_json(one, id).dump());
    EXPECT_EQ(learned_table_report(learn_table(shared, shapes(m.checkpoint), shapes(m.base))), learned_table_report(one));
}

TEST(LearnedMap, TorchtitanRopeRowsAreRecognised) {
    Model m;
    m.base.push_back(random_tensor("model.layers.0.self_attn.q_proj.weight", {16, 16}, 1));
    m.base.push_back(random_tensor("model.layers.0.self_attn.k_proj.weight", {8, 16}, 2));
    m.base.push_back(random_tensor("model.layers.0.self_attn.v_proj.weight", {8, 16}, 3));
    m.checkpoint.push_back(tuned(interleaved_rope("", m.base[0], 4), "layers.0.attention.wq.weight", 11));
    m.checkpoint.push_back(tuned(interleaved_rope("", m.base[1], 2), "layers.0.attention.wk.weight", 12));
    m.checkpoint.push_back(tuned(m.base[2], "layers.0.attention.wv.weight", 13));
    const LearnedTable t = learn(m, TableSource::Torchtitan);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    EXPECT_EQ(rule_from(t, "layers.{i}.attention.wq.weight")->layout, RowLayout::RopePermute);
    EXPECT_EQ(rule_from(t, "layers.{i}.attention.wq.weight")->heads_key, "num_attention_heads");
    EXPECT_EQ(rule_from(t, "layers.{i}.attention.wk.weight")->heads_key, "num_key_value_heads");
    EXPECT_EQ(rule_from(t, "layers.{i}.attention.wv.weight")->layout, RowLayout::Same);
}

TEST(LearnedMap, TorchtitanMtpLayersGetTheLayerOffset) {
    // Two decoder layers; torchtitan's mtp_layers.0 is HF layer 2.
    Model m;
    for (int layer = 0; layer < 3; ++layer)
        m.base.push_back(random_tensor("model.layers." + std::to_string(layer) + ".input_layernorm.weight", {16}, 1 + layer));
    m.checkpoint.push_back(tuned(m.base[0], "layers.0.attention_norm.weight", 10));
    m.checkpoint.push_back(tuned(m.base[1], "layers.1.attention_norm.weight", 11));
    m.checkpoint.push_back(tuned(m.base[2], "mtp_layers.0.attention_norm.weight", 12));
    ModelShape shape = kHeads;
    shape.layers = 2;
    const LearnedTable t = learn(m, TableSource::Torchtitan, false, shape);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    EXPECT_EQ(rule_from(t, "layers.{i}.attention_norm.weight")->layer_offset, 0);
    EXPECT_EQ(rule_from(t, "mtp_layers.{i}.attention_norm.weight")->layer_offset, 2);
    EXPECT_TRUE(t.unmapped_base.empty());
    const auto doc = learned_table_json(t, {"learned", TableSource::Torchtitan, "DeepseekV3ForCausalLM", "", ""});
    ASSERT_EQ(doc["rules"].size(), 2u);
    EXPECT_EQ(doc["rules"][1]["from"], "mtp_layers.{i}.attention_norm.weight");
    EXPECT_EQ(doc["rules"][1]["layer_offset"], "num_hidden_layers");
    EXPECT_NO_THROW(parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump())));
}

// A legacy Megatron fc1 of tp 2 joined two ways: rank r holds [gate_r; up_r], so joining the
// pieces on dim 0 gives [gate_0; up_0; gate_1; up_1], as glu_halves [gate; up].
HeldTensor joined_on_dim0(const std::string& name, const HeldTensor& gate, const HeldTensor& up) {
    const int64_t half = gate.shape[0] / 2;
    HeldTensor t{name, {2 * gate.shape[0], gate.shape[1]}, {}};
    for (int64_t r = 0; r < 2; ++r) {
        t.rows.insert(t.rows.end(), gate.rows.begin() + r * half, gate.rows.begin() + (r + 1) * half);
        t.rows.insert(t.rows.end(), up.rows.begin() + r * half, up.rows.begin() + (r + 1) * half);
    }
    return t;
}

TEST(LearnedMap, TensorParallelAssembliesAreChosenByTheValues) {
    Model m;
    const HeldTensor gate = random_tensor("model.layers.0.mlp.gate_proj.weight", {24, 16}, 1);
    const HeldTensor up = random_tensor("model.layers.0.mlp.up_proj.weight", {24, 16}, 2);
    m.base = {gate, up};
    const std::string fc1 = "decoder.layers.0.mlp.linear_fc1.weight";
    m.checkpoint.push_back(tuned(joined_on_dim0("", gate, up), fc1, 10));
    m.checkpoint.push_back(tuned(stacked("", gate, up), fc1, 11));
    auto source = shapes(m.checkpoint);
    source[0].tp = "dim0";
    source[1].tp = "glu_halves";
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    const auto matches =
        match_tensors(source, checkpoint_rows, shapes(m.base), base_rows, kHeads, TableSource::Megatron, false);
    EXPECT_TRUE(matches.decisions[0].other_assembly);
    const LearnedTable t = learn_table(matches, source, shapes(m.base));
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    ASSERT_EQ(t.rules.size(), 1u);
    EXPECT_EQ(t.rules[0].tp, "glu_halves");
    EXPECT_EQ(t.rules[0].layout, RowLayout::GateUp);
    const auto doc = learned_table_json(t, {"learned", TableSource::Megatron, "LlamaForCausalLM", "", ""});
    EXPECT_EQ(doc["rules"][0]["tp"], "glu_halves");
    const ArchitectureTable parsed = parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump()));
    EXPECT_EQ(parsed.rules[0].tp, TpRule::GluHalves);
}

TEST(LearnedMap, TensorParallelAssembliesThatFitAlikeAreRefused) {
    Model m;
    const HeldTensor gate = random_tensor("model.layers.0.mlp.gate_proj.weight", {24, 16}, 1);
    const HeldTensor up = random_tensor("model.layers.0.mlp.up_proj.weight", {24, 16}, 2);
    m.base = {gate, up};
    const std::string fc1 = "decoder.layers.0.mlp.linear_fc1.weight";
    m.checkpoint.push_back(tuned(stacked("", gate, up), fc1, 10));
    m.checkpoint.push_back(tuned(stacked("", gate, up), fc1, 11));
    auto source = shapes(m.checkpoint);
    source[0].tp = "dim0";
    source[1].tp = "glu_halves";
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    const auto matches =
        match_tensors(source, checkpoint_rows, shapes(m.base), base_rows, kHeads, TableSource::Megatron, false);
    const LearnedTable t = learn_table(matches, source, shapes(m.base));
    ASSERT_EQ(t.refusals.size(), 1u) << learned_table_report(t);
    EXPECT_NE(t.refusals[0].find("fit alike: the values cannot say how they join"), std::string::npos) << t.refusals[0];
    EXPECT_NE(t.refusals[0].find(fc1), std::string::npos);
}

// GPT-OSS's grouped experts: torchtitan stores [E, a, b], transformers [E, b, a]. map offers the
// tensor whole transposed and expert by expert; the transposed whole matches, the views do not.
TEST(LearnedMap, TransposedGroupedExpertsBecomeATransposeRule) {
    const int64_t experts = 3, a = 6, b = 4;
    HeldTensor base{"model.layers.0.mlp.experts.gate_up_proj", {experts, b, a}, {}};
    std::mt19937 gen(7);
    std::normal_distribution<double> normal;
    for (int64_t e = 0; e < experts; ++e) {
        base.rows.emplace_back(b * a);
        for (auto& v : base.rows.back()) v = normal(gen);
    }
    const std::string grouped = "layers.0.moe.experts.mlp1_weight";
    Model m;
    m.base = {base};
    m.checkpoint.push_back(tuned(base, grouped, 20));  // the whole, transposed back: [E, b, a]
    for (int64_t e = 0; e < experts; ++e) {  // expert e's view [a, b]: base expert e transposed
        HeldTensor view{grouped + "." + std::to_string(e), {a, b}, {}};
        for (int64_t i = 0; i < a; ++i) {
            view.rows.emplace_back(b);
            for (int64_t j = 0; j < b; ++j) view.rows.back()[j] = base.rows[e][j * a + i];
        }
        m.checkpoint.push_back(tuned(view, view.name, 30 + e));
    }
    auto source = shapes(m.checkpoint);
    source[0].transposed = true;
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    MatchResult matches =
        match_tensors(source, checkpoint_rows, shapes(m.base), base_rows, kHeads, TableSource::Torchtitan, false);
    settle_expert_forms(matches, 0, {1, 2, 3});
    LearnedTable t = learn_table(matches, source, shapes(m.base));
    join_expert_views(t, {grouped + ".0", grouped + ".1", grouped + ".2"});
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    ASSERT_EQ(t.rules.size(), 1u) << learned_table_report(t);
    EXPECT_TRUE(t.rules[0].transposed);
    EXPECT_EQ(t.rules[0].from, "layers.{i}.moe.experts.mlp1_weight");
    EXPECT_TRUE(t.unmapped_base.empty());
    const auto doc = learned_table_json(t, {"learned", TableSource::Torchtitan, "GptOssForCausalLM", "", ""});
    EXPECT_EQ(doc["rules"][0]["transform"], "transpose");
    const ArchitectureTable parsed = parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump()));
    EXPECT_EQ(parsed.rules[0].transform, TableTransform::Transpose);
}

TEST(LearnedMap, TiedHeadKeptAsACopyOfTheEmbeddingIsTheTiedHead) {
    Model m;
    m.base.push_back(random_tensor("model.embed_tokens.weight", {40, 16}, 1));
    m.checkpoint.push_back(tuned(m.base[0], "embedding.word_embeddings.weight", 2));
    m.checkpoint.push_back(m.checkpoint[0]);  // Megatron-LM's last stage keeps a copy
    m.checkpoint[1].name = "output_layer.weight";
    const LearnedTable tied = learn(m, TableSource::Megatron, true);
    ASSERT_TRUE(tied.refusals.empty()) << learned_table_report(tied);
    EXPECT_EQ(rule_from(tied, "embedding.word_embeddings.weight")->to[0], "model.embed_tokens.weight");
    EXPECT_TRUE(rule_from(tied, "output_layer.weight")->tied_head);
    // Untied, one base tensor cannot be two.
    const LearnedTable untied = learn(m, TableSource::Megatron, false);
    ASSERT_EQ(untied.refusals.size(), 1u) << learned_table_report(untied);
    EXPECT_NE(untied.refusals[0].find("one base tensor cannot be two"), std::string::npos);
}

TEST(LearnedMap, ReplicatedIsNoAssemblyOfPiecesThatDiffer) {
    // A vocabulary of 40 rows padded to 96 in tp 2 pieces of 48 rows: rank 0's piece alone holds
    // every base row, so "replicated" fits as well as "dim0"; the pieces differ, so it is not.
    Model m;
    m.base.push_back(random_tensor("model.embed_tokens.weight", {40, 16}, 1));
    HeldTensor padded = tuned(m.base[0], "embedding.word_embeddings.weight", 2);
    for (int r = 40; r < 96; ++r) padded.rows.push_back(random_tensor("", {1, 16}, 100 + r).rows[0]);
    padded.shape = {96, 16};
    HeldTensor rank0 = padded;
    rank0.rows.resize(48);
    rank0.shape = {48, 16};
    m.checkpoint = {rank0, padded};
    auto source = shapes(m.checkpoint);
    source[0].tp = "replicated";
    source[1].tp = "dim0";
    HeldRows checkpoint_rows(m.checkpoint), base_rows(m.base);
    ModelShape heads = kHeads;
    heads.vocab = 40;
    const auto matches =
        match_tensors(source, checkpoint_rows, shapes(m.base), base_rows, heads, TableSource::Megatron, false);
    const LearnedTable t = learn_table(matches, source, shapes(m.base));
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    ASSERT_EQ(t.rules.size(), 1u);
    EXPECT_EQ(t.rules[0].tp, "dim0");
    EXPECT_EQ(t.rules[0].layout, RowLayout::Vocab);
}

TEST(LearnedMap, IdenticalBaseTensorsAreRefused) {
    Model m;
    m.base.push_back(random_tensor("model.layers.0.input_layernorm.weight", {16}, 1));
    m.base.push_back(m.base[0]);
    m.base[1].name = "model.layers.0.post_attention_layernorm.weight";
    m.checkpoint.push_back(tuned(m.base[0], "layers.0.attention_norm.weight", 5));
    const LearnedTable t = learn(m, TableSource::Torchtitan);
    ASSERT_EQ(t.refusals.size(), 1u);
    EXPECT_NE(t.refusals[0].find("layers.0.attention_norm.weight matches"), std::string::npos) << t.refusals[0];
    EXPECT_NE(t.refusals[0].find("input_layernorm"), std::string::npos);
    EXPECT_NE(t.refusals[0].find("post_attention_layernorm"), std::string::npos);
}

TEST(LearnedMap, AllZeroBaseTensorIsRefused) {
    Model m;
    m.base.push_back(HeldTensor{"model.layers.0.self_attn.q_proj.bias", {8}, std::vector<std::vector<double>>(8, {0.0})});
    m.checkpoint.push_back(m.base[0]);
    m.checkpoint[0].name = "layers.0.attention.wq.bias";
    const LearnedTable t = learn(m, TableSource::Torchtitan);
    ASSERT_EQ(t.refusals.size(), 1u);
    EXPECT_NE(t.refusals[0].find("all zeros"), std::string::npos) << t.refusals[0];
}

TEST(LearnedMap, AllZeroCheckpointBufferIsDroppedNotGuessed) {
    // torchtitan's expert_bias_E (a load-balancing buffer, zeros) beside a router bias of its shape.
    Model m;
    m.base.push_back(random_tensor("model.layers.0.mlp.router.bias", {8}, 1));
    m.checkpoint.push_back(HeldTensor{"layers.0.moe.expert_bias_E", {8}, std::vector<std::vector<double>>(8, {0.0})});
    m.checkpoint.push_back(tuned(m.base[0], "layers.0.moe.router.gate.bias", 2));
    const LearnedTable t = learn(m, TableSource::Torchtitan);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    const LearnedRule* buffer = rule_from(t, "layers.{i}.moe.expert_bias_E");
    ASSERT_NE(buffer, nullptr);
    EXPECT_NE(buffer->drop.find("all zeros"), std::string::npos) << buffer->drop;
    EXPECT_EQ(rule_from(t, "layers.{i}.moe.router.gate.bias")->to[0], "model.layers.{i}.mlp.router.bias");
}

TEST(LearnedMap, UnmatchedTensorsAreDroppedOrTiedAndBaseLeftoversReported) {
    Model m;
    m.base.push_back(random_tensor("model.embed_tokens.weight", {40, 16}, 1));
    m.base.push_back(random_tensor("model.norm.weight", {16}, 2));
    m.checkpoint.push_back(tuned(m.base[0], "tok_embeddings.weight", 3));
    m.checkpoint.push_back(random_tensor("lm_head.weight", {40, 16}, 4));  // an untrained head of a tied model
    m.checkpoint.push_back(random_tensor("layers.0.moe.expert_bias_E", {4}, 5));
    const LearnedTable t = learn(m, TableSource::Torchtitan, true);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    EXPECT_TRUE(rule_from(t, "lm_head.weight")->tied_head);
    EXPECT_NE(rule_from(t, "layers.{i}.moe.expert_bias_E")->drop.find("no base tensor holds its values"), std::string::npos);
    EXPECT_EQ(t.unmapped_base, std::vector<std::string>{"model.norm.weight"});
}

TEST(LearnedMap, LayersThatDisagreeAreRefused) {
    Model m;
    for (int layer = 0; layer < 2; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + ".";
        m.base.push_back(random_tensor(p + "input_layernorm.weight", {16}, 10 + layer));
        m.base.push_back(random_tensor(p + "post_attention_layernorm.weight", {16}, 20 + layer));
    }
    // Layer 1 of the fork swapped its two norms' names.
    m.checkpoint.push_back(tuned(m.base[0], "blocks.0.norm_a.weight", 1));
    m.checkpoint.push_back(tuned(m.base[1], "blocks.0.norm_b.weight", 2));
    m.checkpoint.push_back(tuned(m.base[3], "blocks.1.norm_a.weight", 3));
    m.checkpoint.push_back(tuned(m.base[2], "blocks.1.norm_b.weight", 4));
    const LearnedTable t = learn(m, TableSource::Torchtitan);
    ASSERT_EQ(t.refusals.size(), 2u) << learned_table_report(t);
    EXPECT_NE(t.refusals[0].find("pattern blocks.{i}.norm_a.weight: blocks.0.norm_a.weight"), std::string::npos)
        << t.refusals[0];
}

TEST(LearnedMap, ExpertViewsBecomeOneSplitExpertsRule) {
    // Two experts' views of torchtitan's grouped w1 [E, F, H], matched with the per-expert base tensors.
    Model m;
    std::vector<std::string> views;
    for (int e = 0; e < 2; ++e) {
        m.base.push_back(random_tensor("model.layers.0.mlp.experts." + std::to_string(e) + ".gate_proj.weight", {8, 16}, 1 + e));
        std::string view = expert_view_pattern("layers.0.moe.experts.w1_EFD");
        views.push_back(view.replace(view.find("{e}"), 3, std::to_string(e)));
        m.checkpoint.push_back(tuned(m.base.back(), views.back(), 10 + e));
    }
    LearnedTable t = learn(m, TableSource::Torchtitan);
    join_expert_views(t, views);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    ASSERT_EQ(t.rules.size(), 1u);
    EXPECT_EQ(t.rules[0].from, "layers.{i}.moe.experts.w1_EFD");
    EXPECT_EQ(t.rules[0].to[0], "model.layers.{i}.mlp.experts.{e}.gate_proj.weight");
    const auto doc = learned_table_json(t, {"learned", TableSource::Torchtitan, "Qwen3MoeForCausalLM", "", ""});
    EXPECT_EQ(doc["rules"][0]["transform"], "split_experts");
    EXPECT_NO_THROW(parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump())));
}

// transformers 5's stacked experts [E, ...] as map compares them: one base tensor per expert's
// slice (stacked_view_name), each [rows, cols] of `stacked`'s trailing axes.
std::vector<HeldTensor> stacked_views(const std::string& stacked, int64_t experts, Shape slice, unsigned seed,
                                      std::vector<std::string>& views) {
    std::vector<HeldTensor> out;
    for (int64_t e = 0; e < experts; ++e) {
        out.push_back(random_tensor(stacked_view_name(stacked, e), slice, seed + static_cast<unsigned>(e)));
        views.push_back(out.back().name);
    }
    return out;
}

TEST(StackedExperts, OnlyThreeAxesLedByTheExpertCountAreStacked) {
    EXPECT_TRUE(is_stacked_experts({4, 8, 6}, 4));
    EXPECT_FALSE(is_stacked_experts({4, 6}, 4));     // a router [E, H] stays whole
    EXPECT_FALSE(is_stacked_experts({5, 8, 6}, 4));  // another leading axis
    EXPECT_FALSE(is_stacked_experts({4, 8, 6}, 0));  // config.json names no experts
    EXPECT_EQ(stacked_view_name("model.layers.1.mlp.experts.down_proj", 3), "model.layers.1.mlp.experts.down_proj.3");
}

TEST(StackedExperts, PerExpertTensorsBecomeOneStackExpertsRule) {
    // Qwen3-VL-MoE: the base's gate_up_proj [E, 2F, H] and down_proj [E, H, F]; Megatron's
    // per-expert linear_fc1 [2F, H] ([gate; up], as the slice holds it) and linear_fc2 [H, F].
    const int64_t experts = 3;
    Model m;
    std::vector<std::string> views;
    for (int layer = 0; layer < 2; ++layer) {
        const std::string hf = "model.language_model.layers." + std::to_string(layer) + ".mlp.experts.";
        const std::string mc = "language_model.decoder.layers." + std::to_string(layer) + ".mlp.experts.";
        const auto gate_up = stacked_views(hf + "gate_up_proj", experts, {8, 6}, 10 * layer + 1, views);
        const auto down = stacked_views(hf + "down_proj", experts, {6, 4}, 10 * layer + 5, views);
        for (int64_t e = 0; e < experts; ++e) {
            m.base.push_back(gate_up[e]);
            m.base.push_back(down[e]);
            const std::string expert = mc + std::to_string(e) + ".";
            m.checkpoint.push_back(tuned(gate_up[e], expert + "linear_fc1.weight", 100 + 10 * layer + e));
            m.checkpoint.push_back(tuned(down[e], expert + "linear_fc2.weight", 200 + 10 * layer + e));
        }
    }
    LearnedTable t = learn(m, TableSource::Megatron);
    join_stacked_views(t, shapes(m.base), views);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    ASSERT_EQ(t.rules.size(), 2u) << learned_table_report(t);
    const LearnedRule* fc1 = rule_from(t, "language_model.decoder.layers.{i}.mlp.experts.{e}.linear_fc1.weight");
    ASSERT_NE(fc1, nullptr);
    EXPECT_EQ(fc1->to, std::vector<std::string>{"model.language_model.layers.{i}.mlp.experts.gate_up_proj"});
    EXPECT_EQ(fc1->layout, RowLayout::Same);  // [gate; up] as the slice holds it: no split
    EXPECT_EQ(fc1->stack_experts, kStackedExpertCount);
    EXPECT_EQ(fc1->tensors, 6u);
    EXPECT_TRUE(t.unmapped_base.empty());
    const auto doc = learned_table_json(t, {"learned", TableSource::Megatron, "Qwen3VLMoeForConditionalGeneration", "", ""});
    EXPECT_EQ(doc["rules"][1]["to"], "model.language_model.layers.{i}.mlp.experts.down_proj");
    EXPECT_EQ(doc["rules"][1]["stack_experts"], kStackedExpertCount);
    const ArchitectureTable parsed = parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump()));
    ASSERT_TRUE(parsed.rules[0].stack_experts.has_value());
    EXPECT_EQ(parsed.rules[0].stack_experts->text(), kStackedExpertCount);
}

TEST(StackedExperts, SlicesTheValuesCannotTellApartAreRefused) {
    // Two stacked tensors of one shape whose expert-0 slices hold the same values.
    Model m;
    std::vector<std::string> views;
    const std::string hf = "model.layers.0.mlp.experts.";
    for (const auto& t : stacked_views(hf + "gate_up_proj", 2, {8, 6}, 1, views)) m.base.push_back(t);
    for (const auto& t : stacked_views(hf + "gate_up_proj_copy", 2, {8, 6}, 1, views)) m.base.push_back(t);
    m.checkpoint.push_back(tuned(m.base[0], "decoder.layers.0.mlp.experts.0.linear_fc1.weight", 5));
    LearnedTable t = learn(m, TableSource::Megatron);
    join_stacked_views(t, shapes(m.base), views);
    ASSERT_EQ(t.refusals.size(), 1u) << learned_table_report(t);
    EXPECT_NE(t.refusals[0].find("gate_up_proj.0"), std::string::npos) << t.refusals[0];
    EXPECT_NE(t.refusals[0].find("gate_up_proj_copy.0"), std::string::npos) << t.refusals[0];
}

TEST(StackedExperts, ASliceTakenAsHalfOfAFusedTensorIsRefused) {
    // A base that stacks gate and up apart ([E, F, H] each): each expert's fc1 is [gate; up] of two
    // slices, which stack_experts (one whole tensor per expert) cannot state.
    Model m;
    std::vector<std::string> views;
    const auto gate = stacked_views("model.layers.0.mlp.experts.gate_proj", 2, {4, 6}, 1, views);
    const auto up = stacked_views("model.layers.0.mlp.experts.up_proj", 2, {4, 6}, 3, views);
    for (int e = 0; e < 2; ++e) {
        m.base.push_back(gate[e]);
        m.base.push_back(up[e]);
        m.checkpoint.push_back(
            tuned(stacked("", gate[e], up[e]), "decoder.layers.0.mlp.experts." + std::to_string(e) + ".linear_fc1.weight", 7 + e));
    }
    LearnedTable t = learn(m, TableSource::Megatron);
    join_stacked_views(t, shapes(m.base), views);
    ASSERT_EQ(t.refusals.size(), 1u) << learned_table_report(t);
    EXPECT_NE(t.refusals[0].find("stack_experts stacks whole per-expert tensors only"), std::string::npos) << t.refusals[0];
    EXPECT_TRUE(t.rules.empty());
}

TEST(StackedExperts, AStackedTensorNothingMapsToIsReportedOnce) {
    // The checkpoint holds layer 0's experts only: layer 1's stacked tensor is left whole.
    Model m;
    std::vector<std::string> views;
    const auto layer0 = stacked_views("model.layers.0.mlp.experts.down_proj", 2, {6, 4}, 1, views);
    const auto layer1 = stacked_views("model.layers.1.mlp.experts.down_proj", 2, {6, 4}, 3, views);
    for (int e = 0; e < 2; ++e) {
        m.base.push_back(layer0[e]);
        m.base.push_back(layer1[e]);
        m.checkpoint.push_back(tuned(layer0[e], "decoder.layers.0.mlp.experts." + std::to_string(e) + ".linear_fc2.weight", 9 + e));
    }
    m.base.push_back(random_tensor("model.norm.weight", {4}, 77));
    LearnedTable t = learn(m, TableSource::Megatron);
    join_stacked_views(t, shapes(m.base), views);
    EXPECT_EQ(t.unmapped_base, (std::vector<std::string>{"model.layers.1.mlp.experts.down_proj (stacked experts: 2 slices)",
                                                         "model.norm.weight"}))
        << learned_table_report(t);
}

// A fork that fuses q, k and v one after another ([Q; K; V], 2 query groups) instead of per
// query group: recognised, and refused, since no table rule states that layout.
TEST(LearnedMap, UngroupedFusedQkvIsRecognisedAndRefused) {
    Model m;
    m.base.push_back(random_tensor("model.layers.0.self_attn.q_proj.weight", {16, 16}, 1));
    m.base.push_back(random_tensor("model.layers.0.self_attn.k_proj.weight", {8, 16}, 2));
    m.base.push_back(random_tensor("model.layers.0.self_attn.v_proj.weight", {8, 16}, 3));
    m.checkpoint.push_back(tuned(stacked("", stacked("", m.base[0], m.base[1]), m.base[2]), "layers.0.attn.qkv.weight", 4));
    const LearnedTable t = learn(m, TableSource::Megatron);
    ASSERT_EQ(t.refusals.size(), 1u) << learned_table_report(t);
    EXPECT_NE(t.refusals[0].find("layers.0.attn.qkv.weight holds model.layers.0.self_attn.q_proj.weight, "
                                 "model.layers.0.self_attn.k_proj.weight and model.layers.0.self_attn.v_proj.weight "
                                 "one after another, [Q; K; V]"),
              std::string::npos)
        << t.refusals[0];
    // With one query group [Q; K; V] is Megatron's grouped layout: a split "qkv" rule.
    Model mqa;
    mqa.base = {m.base[0], random_tensor("model.layers.0.self_attn.k_proj.weight", {4, 16}, 5),
                random_tensor("model.layers.0.self_attn.v_proj.weight", {4, 16}, 6)};
    mqa.checkpoint.push_back(
        tuned(stacked("", stacked("", mqa.base[0], mqa.base[1]), mqa.base[2]), "layers.0.attn.qkv.weight", 7));
    const LearnedTable one_group = learn(mqa, TableSource::Megatron, false, ModelShape{4, 1, 4, 40, 0, {}});
    ASSERT_TRUE(one_group.refusals.empty()) << learned_table_report(one_group);
    EXPECT_EQ(rule_from(one_group, "layers.{i}.attn.qkv.weight")->layout, RowLayout::Qkv);
}

// mbridge's Qwen2.5-VL vision tower: the qkv grouped per head, the merger's Sequential
// (mlp.0, GELU, mlp.2) renamed projection.encoder.linear_fc1 / linear_fc2.
TEST(LearnedMap, VisionTowerPerHeadQkvAndSequentialMerger) {
    Model m;
    unsigned seed = 1;
    for (int block = 0; block < 2; ++block) {
        const std::string hf = "visual.blocks." + std::to_string(block) + ".attn.qkv.";
        const std::string mc = "vision_model.decoder.layers." + std::to_string(block) + ".self_attention.linear_qkv.";
        m.base.push_back(random_tensor(hf + "weight", {48, 16}, seed++));
        m.checkpoint.push_back(tuned(per_head_qkv(mc + "weight", m.base.back(), 4), mc + "weight", seed++));
        m.base.push_back(random_tensor(hf + "bias", {48}, seed++));
        m.checkpoint.push_back(tuned(per_head_qkv(mc + "bias", m.base.back(), 4), mc + "bias", seed++));
    }
    m.base.push_back(random_tensor("visual.merger.mlp.0.weight", {32, 16}, seed++));
    m.checkpoint.push_back(tuned(m.base.back(), "vision_model.projection.encoder.linear_fc1.weight", seed++));
    m.base.push_back(random_tensor("visual.merger.mlp.2.weight", {16, 32}, seed++));
    m.checkpoint.push_back(tuned(m.base.back(), "vision_model.projection.encoder.linear_fc2.weight", seed++));
    ModelShape shape = kHeads;
    shape.tower_heads = {{4, "vision_config.num_heads"}};
    const LearnedTable t = learn(m, TableSource::Megatron, false, shape);
    ASSERT_TRUE(t.refusals.empty()) << learned_table_report(t);
    EXPECT_TRUE(t.unmapped_base.empty()) << learned_table_report(t);
    const LearnedRule* qkv = rule_from(t, "vision_model.decoder.layers.{i}.self_attention.linear_qkv.weight");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->layout, RowLayout::QkvPerHead);
    EXPECT_EQ(qkv->to, std::vector<std::string>{"visual.blocks.{i}.attn.qkv.weight"});
    EXPECT_EQ(rule_from(t, "vision_model.decoder.layers.{i}.self_attention.linear_qkv.bias")->layout, RowLayout::QkvPerHead);
    EXPECT_EQ(rule_from(t, "vision_model.projection.encoder.linear_fc2.weight")->to,
              std::vector<std::string>{"visual.merger.mlp.2.weight"});
    const auto doc = learned_table_json(t, {"learned", TableSource::Megatron, "Qwen2_5_VLForConditionalGeneration", "", ""});
    EXPECT_EQ(doc["rules"][0]["split"], "qkv_per_head");
    EXPECT_EQ(doc["rules"][0]["groups"], "vision_config.num_heads");
    EXPECT_NO_THROW(parse_architecture_table("learned.json", nlohmann::json::parse(doc.dump())));
    // Without the tower's head count no layout holds the per-head rows: not matched, never guessed.
    const LearnedTable blind = learn(m, TableSource::Megatron);
    EXPECT_FALSE(rule_from(blind, "vision_model.decoder.layers.{i}.self_attention.linear_qkv.weight")->drop.empty());
}

}  // namespace
}  // namespace vmerge
