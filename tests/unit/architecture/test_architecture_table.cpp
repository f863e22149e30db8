// Architecture tables (share/vmerge/architectures/*.json, architecture/architecture_table.h): rules
// match layer numbers, schema errors name file and rule, the shipped tables parse, a later table
// takes its architectures from earlier ones.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <map>

#include "core/error.h"
#include "architecture/architecture_table.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "test_support.h"

namespace vmerge {
namespace {

std::string error_of(const std::string& text) {
    try {
        parse_architecture_table("t.json", nlohmann::json::parse(text));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

const char* kMinimal = R"({"vmerge_architecture_table": 1, "name": "n", "source": "torchtitan",
    "architectures": ["A"], "rules": [RULES]})";

std::string with_rules(const std::string& rules) {
    std::string text = kMinimal;
    text.replace(text.find("RULES"), 5, rules);
    return text;
}

TEST(ArchitectureTable, RulesMatchLayerNumbers) {
    const auto table = parse_architecture_table("t.json", nlohmann::json::parse(with_rules(
        R"({"from": "layers.{i}.attention.wq.weight", "to": "model.layers.{i}.self_attn.q_proj.weight"},
           {"from": "norm.weight", "to": "model.norm.weight"})")));
    auto m = match_table_rule(table, "layers.12.attention.wq.weight");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->layer, "12");
    EXPECT_EQ(fill_table_pattern(m->rule->to, m->layer, ""), "model.layers.12.self_attn.q_proj.weight");
    EXPECT_FALSE(match_table_rule(table, "layers.x.attention.wq.weight"));
    EXPECT_FALSE(match_table_rule(table, "layers.1.attention.wq.weight.extra"));
    EXPECT_TRUE(match_table_rule(table, "norm.weight"));
}

TEST(ArchitectureTable, SchemaErrorsNameTheFileAndRule) {
    EXPECT_EQ(error_of(with_rules(R"({"from": "a.{i}", "to": "b.{i}", "transform": "rotate"})")),
              "t.json: rule 0 (from 'a.{i}'): unknown transform 'rotate' (expected none, rope_permute, split_experts, "
              "split_experts_gate_up, transpose, interleave_gate_up or transpose_interleave_gate_up)");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b.{i}"})")), "t.json: rule 0 (from 'a'): 'to' uses {i}, which 'from' does not bind");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "drop": "why"})")),
              "t.json: rule 0 (from 'a'): give exactly one of 'to' (its HF name) and 'drop' (why)");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "transform": "rope_permute"})")),
              "t.json: rule 0 (from 'a'): 'heads' (the config.json key of the head count) goes with transform rope_permute, "
              "and only there");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b"}, {"from": "a", "to": "c"})")),
              "t.json: rule 1 (from 'a'): same 'from' as rule 0");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a.{j}", "to": "b"})")),
              "t.json: rule 0 (from 'a.{j}'): 'a.{j}': only {i} (layer), {e} (expert) and {*} (the rest of "
              "the name) may stand in braces");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "colour": 1})")).substr(0, 44),
              "t.json: rule 0 (from 'a'): unknown key 'colo");
    EXPECT_EQ(error_of(with_rules(R"({"from": "w", "to": "b.{e}", "transform": "split_experts"})")), "");
    EXPECT_EQ(error_of(R"({"name": "n"})"), "t.json: 'vmerge_architecture_table' must be 1 (the table format version)");
    EXPECT_EQ(error_of(R"({"vmerge_architecture_table": 1, "name": "n", "source": "deepspeed", "architectures": ["A"],
                           "rules": [{"from": "a", "to": "b"}]})"),
              "t.json: source 'deepspeed': expected torchtitan, megatron or hf");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "tp": "dim0"})")),
              "t.json: rule 0 (from 'a'): 'tp' belongs to source 'megatron' tables");
}

std::string megatron_error(const std::string& rules, const std::string& more = "") {
    std::string text = R"({"vmerge_architecture_table": 1, "name": "n", "source": "megatron", "architectures": ["A"],)" +
                       more + R"( "rules": [)" + rules + "]}";
    return error_of(text);
}

TEST(ArchitectureTable, MegatronSchemaErrorsNameTheFileAndRule) {
    EXPECT_EQ(megatron_error(R"({"from": "x.{i}.qkv", "to": ["q.{i}", "k.{i}", "v.{i}"], "split": "qkv", "tp": "dim0"})"), "");
    EXPECT_EQ(megatron_error(R"({"from": "x.{i}.qkv", "to": ["q.{i}", "k.{i}"], "split": "qkv"})"),
              "t.json: rule 0 (from 'x.{i}.qkv'): 'to' must be a list of 3 HF names (split qkv: q, k, v)");
    EXPECT_EQ(megatron_error(R"({"from": "fc1", "to": "gate", "split": "gate_up"})"),
              "t.json: rule 0 (from 'fc1'): 'to' must be a list of 2 HF names (split gate_up: gate, up)");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": ["b", "c"]})"),
              "t.json: rule 0 (from 'a'): 'to' must be one HF name (a string)");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b", "tp": "rows"})"),
              "t.json: rule 0 (from 'a'): unknown tp 'rows' (expected dim0, dim1, replicated, glu_halves, replicated_if_full or "
              "sections)");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b", "split": "halves"})"),
              "t.json: rule 0 (from 'a'): unknown split 'halves' (expected none, qkv, qkv_per_head, qkv_gated, gate_up, "
              "grouped_sections or vocab)");
    EXPECT_EQ(megatron_error(R"({"from": "v.{i}.qkv", "to": "b.{i}", "split": "qkv_per_head", "groups": "vision_config.num_heads"})"), "");
    EXPECT_EQ(megatron_error(R"({"from": "v.{i}.qkv", "to": "b.{i}", "split": "qkv_per_head"})"),
              "t.json: rule 0 (from 'v.{i}.qkv'): 'groups' (an expression over config.json giving the group count) goes "
              "with split qkv_per_head or grouped_sections, and only there");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b", "groups": "num_heads"})"),
              "t.json: rule 0 (from 'a'): 'groups' (an expression over config.json giving the group count) goes with "
              "split qkv_per_head or grouped_sections, and only there");
    EXPECT_NE(megatron_error(R"({"from": "a", "to": "b", "split": "qkv_per_head", "groups": "num_heads +"})"), "");
    EXPECT_EQ(megatron_error(R"({"from": "l.{i}.experts.{e}.fc2", "to": "b.{i}.down", "tp": "dim1", "stack_experts": "num_experts"})"), "");
    EXPECT_EQ(megatron_error(R"({"from": "l.{i}.fc2", "to": "b.{i}.down", "stack_experts": "num_experts"})"),
              "t.json: rule 0 (from 'l.{i}.fc2'): stack_experts takes per-expert tensors ({e} in 'from') into one fused "
              "tensor (a 'to' without {e})");
    EXPECT_NE(megatron_error(R"({"from": "l.{e}.fc2", "to": "b.{e}.down", "stack_experts": "num_experts"})"), "");
    EXPECT_NE(megatron_error(R"({"from": "l.{e}.fc2", "to": "b.down", "stack_experts": "num_experts +"})"), "");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a.{e}", "to": "b", "stack_experts": "n"})")),
              "t.json: rule 0 (from 'a.{e}'): 'stack_experts' belongs to source 'megatron' tables");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "groups": "h"})")),
              "t.json: rule 0 (from 'a'): 'groups' belongs to source 'megatron' tables");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b", "transform": "rope_permute", "heads": "h"})"),
              "t.json: rule 0 (from 'a'): 'heads' belongs to source 'torchtitan' tables");
    // A megatron rule transforms only the tensor stack_experts fuses (GPT-OSS's experts).
    const std::string fused_only = "t.json: rule 0 (from 'l.{e}.fc1'): a megatron rule's transform (transpose, "
                                   "interleave_gate_up or transpose_interleave_gate_up) applies to the tensor "
                                   "stack_experts fuses, and needs it";
    EXPECT_EQ(megatron_error(R"({"from": "l.{e}.fc1", "to": "b.{e}", "transform": "transpose"})"), fused_only);
    EXPECT_EQ(megatron_error(R"({"from": "l.{e}.fc1", "to": "b", "transform": "split_experts", "stack_experts": "n"})"),
              fused_only);
    for (const std::string t : {"transpose", "interleave_gate_up", "transpose_interleave_gate_up"}) {
        const std::string rule = R"({"from": "l.{e}.fc1", "to": "b", "stack_experts": "n", "transform": ")" + t + R"("})";
        EXPECT_EQ(megatron_error(rule), "") << t;
    }
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b.{e}"})"), "t.json: rule 0 (from 'a'): 'to' uses {e}, which 'from' does not bind");
    // A value model's head may share `from` with the causal LM's; two plain rules may not.
    EXPECT_EQ(megatron_error(R"({"from": "o", "to": "score", "value_head": true}, {"from": "o", "to": "lm_head"})"), "");
    EXPECT_EQ(megatron_error(R"({"from": "o", "to": "s"}, {"from": "o", "to": "lm_head"})"), "t.json: rule 1 (from 'o'): same 'from' as rule 0");
    EXPECT_EQ(megatron_error(R"({"from": "a", "to": "b"})", R"( "tensor_set": {"extends": "X"},)"),
              "t.json: 'tensor_set' belongs to source 'hf' tables (a fact of the HF architecture)");
}

// The Qwen3-Next rule kinds parse: split qkv_gated, split grouped_sections with its groups and
// sections (rows, part, to), tp sections on its own, and add.
TEST(ArchitectureTable, MegatronSectionRulesParse) {
    const std::string text = R"({"vmerge_architecture_table": 1, "name": "n", "source": "megatron", "architectures": ["A"],
        "rules": [{"from": "x.{i}.qkv", "to": ["q.{i}", "k.{i}", "v.{i}"], "split": "qkv_gated", "tp": "dim0"},
                  {"from": "x.{i}.in", "to": ["a.{i}", "b.{i}"], "split": "grouped_sections", "groups": "nk",
                   "tp": "sections", "sections": [{"rows": "nk * 2", "part": "query", "to": 0},
                                                  {"rows": 4, "part": "beta", "to": 1}]},
                  {"from": "x.{i}.conv", "to": "c.{i}", "tp": "sections", "sections": [{"rows": 2}, {"rows": "nk"}]},
                  {"from": "x.{i}.norm", "to": "n.{i}", "add": 1},
                  {"from": "x.{i}.half", "to": "h.{i}", "add": -0.5}]})";
    const auto table = parse_architecture_table("t.json", nlohmann::json::parse(text));
    ASSERT_EQ(table.rules.size(), 5u);
    EXPECT_EQ(table.rules[0].split, NameSplit::QkvGated);
    EXPECT_EQ(table.rules[0].to, "q.{i}|k.{i}|v.{i}");
    const TableRule& grouped = table.rules[1];
    EXPECT_EQ(grouped.split, NameSplit::GroupedSections);
    EXPECT_EQ(grouped.tp, TpRule::Sections);
    ASSERT_TRUE(grouped.groups);
    EXPECT_EQ(grouped.groups->text(), "nk");
    ASSERT_EQ(grouped.sections.size(), 2u);
    EXPECT_EQ(grouped.sections[0].rows.text(), "nk * 2");
    EXPECT_EQ(grouped.sections[0].part, "query");
    EXPECT_EQ(grouped.sections[0].to, 0u);
    EXPECT_EQ(grouped.sections[1].rows.text(), "4");
    EXPECT_EQ(grouped.sections[1].part, "beta");
    EXPECT_EQ(grouped.sections[1].to, 1u);
    EXPECT_EQ(table.rules[2].split, NameSplit::None);
    EXPECT_EQ(table.rules[2].tp, TpRule::Sections);
    EXPECT_EQ(table.rules[2].sections.size(), 2u);
    EXPECT_TRUE(table.rules[2].sections[0].part.empty());
    EXPECT_EQ(table.rules[3].add, 1.0);
    EXPECT_EQ(table.rules[4].add, -0.5);
    EXPECT_EQ(table.rules[2].add, 0.0);  // no 'add': copied as it is
}

// Each misuse of sections, groups and add is refused by a message that names it.
TEST(ArchitectureTable, MegatronSectionRulesRefuseWhatDoesNotFit) {
    const std::string two = R"("sections": [{"rows": 2}, {"rows": 3}])";
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", )" + two + "}"),
              "t.json: rule 0 (from 'c'): 'sections' go with tp sections or split grouped_sections, and those need them");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections"})"),
              "t.json: rule 0 (from 'c'): 'sections' go with tp sections or split grouped_sections, and those need them");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": ["a", "b"], "split": "grouped_sections", "tp": "sections",
                                 "sections": [{"rows": 2, "to": 0}, {"rows": 2, "to": 1}]})"),
              "t.json: rule 0 (from 'c'): 'groups' (an expression over config.json giving the group count) goes with "
              "split qkv_per_head or grouped_sections, and only there");
    // A section going to 'to' 2 needs three names; three names with none going to 1 leave one unused.
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": ["a", "b"], "split": "grouped_sections", "groups": "g",
                                 "sections": [{"rows": 2, "to": 0}, {"rows": 2, "to": 2}]})"),
              "t.json: rule 0 (from 'c'): 'to' must be a list of 3 HF names (split grouped_sections: one for each 'to' "
              "its sections name)");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": ["a", "b", "e"], "split": "grouped_sections", "groups": "g",
                                 "sections": [{"rows": 2, "to": 0}, {"rows": 2, "to": 2}]})"),
              "t.json: rule 0 (from 'c'): no section goes to 'to' 1");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": ["a", "b", "e"], "split": "grouped_sections", "groups": "g",
                                 "sections": [{"rows": 2, "to": 0}, {"rows": 2, "to": 1}]})"),
              "t.json: rule 0 (from 'c'): 'to' must be a list of 2 HF names (split grouped_sections: one for each 'to' "
              "its sections name)");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections", "sections": [{"rows": 2}, {"rows": 2, "to": 1}]})"),
              "t.json: rule 0 (from 'c'): section 1: 'to' is for split grouped_sections");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections", "sections": [{"rows": 2}, {"rows": 2, "to": -1}]})"),
              "t.json: rule 0 (from 'c'): section 1: 'to' must be an index into the rule's 'to' list");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections",
                                 "sections": [{"rows": 2, "part": "q"}, {"rows": 2}]})"),
              "t.json: rule 0 (from 'c'): give every section a 'part' (its torch_dist tensor's suffix) or none");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections", "sections": [{"rows": 2}]})"),
              "t.json: rule 0 (from 'c'): 'sections' must be a list of at least two objects");
    EXPECT_EQ(megatron_error(R"({"from": "c", "to": "d", "tp": "sections", "sections": [{"rows": 2}, {"part": "k"}]})"),
              "t.json: rule 0 (from 'c'): section 1: 'rows' (an expression over config.json, or a number) missing");
    for (const std::string add : {R"("1")", "true", "[1]", "null"})
        EXPECT_EQ(megatron_error(R"({"from": "n", "to": "m", "add": )" + add + "}"),
                  "t.json: rule 0 (from 'n'): 'add' must be a number (added to every value)")
            << add;
    // JSON text cannot hold infinity (the parser refuses 1e400), a document built in code can.
    auto infinite = nlohmann::json::parse(R"({"vmerge_architecture_table": 1, "name": "n", "source": "megatron",
        "architectures": ["A"], "rules": [{"from": "n", "to": "m"}]})");
    infinite["rules"][0]["add"] = std::numeric_limits<double>::infinity();
    EXPECT_EQ(testing::error_of([&] { parse_architecture_table("t.json", infinite); }),
              "t.json: rule 0 (from 'n'): 'add' must be a number (added to every value)");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", )" + two + "}")),
              "t.json: rule 0 (from 'a'): 'sections' belongs to source 'megatron' tables");
    EXPECT_EQ(error_of(with_rules(R"({"from": "a", "to": "b", "add": 1})")),
              "t.json: rule 0 (from 'a'): 'add' belongs to source 'megatron' tables");
}

// A family written from scratch as an 'hf' table (no extends): GQA with biases, a dense first
// layer, then routed experts with a router bias and summed shared experts. Its tensor set is
// the one listed here by hand, for a config of two layers.
TEST(ArchitectureTable, LayerOffsetNeedsALayerNumberAndAnExpression) {
    EXPECT_EQ(error_of(with_rules(R"({"from": "m.{i}.x", "to": "l.{i}.x", "layer_offset": "num_hidden_layers"})")), "");
    EXPECT_EQ(error_of(with_rules(R"({"from": "m.x", "to": "l.x", "layer_offset": "num_hidden_layers"})")),
              "t.json: rule 0 (from 'm.x'): 'layer_offset' moves the layer number {i}, which 'from' and 'to' must "
              "both hold");
    EXPECT_EQ(error_of(with_rules(R"({"from": "m.{i}.x", "drop": "why", "layer_offset": "num_hidden_layers"})")),
              "t.json: rule 0 (from 'm.{i}.x'): 'layer_offset' moves the layer number {i}, which 'from' and 'to' must "
              "both hold");
    EXPECT_NE(error_of(with_rules(R"({"from": "m.{i}.x", "to": "l.{i}.x", "layer_offset": "num_hidden_layers +"})")),
              "");
    EXPECT_EQ(megatron_error(R"({"from": "m.{i}.x", "to": "l.{i}.x", "layer_offset": "num_hidden_layers"})"),
              "t.json: rule 0 (from 'm.{i}.x'): 'layer_offset' belongs to source 'torchtitan' tables");
}

TEST(ArchitectureTable, ANewFamilyIsAJsonFile) {
    testing::TempDir dir;
    const std::string file = dir.path() + "/glm_like.json";
    std::ofstream(file) << R"({"vmerge_architecture_table": 1, "name": "glm_like", "source": "hf",
        "architectures": ["GlmLikeForCausalLM"], "tensor_set": {
          "define": {"d": "hidden_size / num_attention_heads", "kv": "num_key_value_heads * d",
                     "moe": "i >= first_k_dense_replace", "shared": "moe_intermediate_size * n_shared_experts"},
          "ranges": {"i": "num_hidden_layers", "e": "n_routed_experts"},
          "tensors": [
            {"name": "model.embed_tokens.weight", "shape": ["vocab_size", "hidden_size"]},
            {"name": "model.norm.weight", "shape": ["hidden_size"]},
            {"name": "lm_head.weight", "shape": ["vocab_size", "hidden_size"], "when": "!tie_word_embeddings"},
            {"name": "model.layers.{i}.input_layernorm.weight", "shape": ["hidden_size"]},
            {"name": "model.layers.{i}.post_attention_layernorm.weight", "shape": ["hidden_size"]},
            {"name": "model.layers.{i}.self_attn.q_proj.weight", "shape": ["hidden_size", "hidden_size"]},
            {"name": "model.layers.{i}.self_attn.k_proj.weight", "shape": ["kv", "hidden_size"]},
            {"name": "model.layers.{i}.self_attn.v_proj.weight", "shape": ["kv", "hidden_size"]},
            {"name": "model.layers.{i}.self_attn.o_proj.weight", "shape": ["hidden_size", "hidden_size"]},
            {"name": "model.layers.{i}.self_attn.q_proj.bias", "shape": ["hidden_size"]},
            {"name": "model.layers.{i}.self_attn.k_proj.bias", "shape": ["kv"]},
            {"name": "model.layers.{i}.self_attn.v_proj.bias", "shape": ["kv"]},
            {"name": "model.layers.{i}.mlp.gate_proj.weight", "shape": ["intermediate_size", "hidden_size"], "when": "!moe"},
            {"name": "model.layers.{i}.mlp.up_proj.weight", "shape": ["intermediate_size", "hidden_size"], "when": "!moe"},
            {"name": "model.layers.{i}.mlp.down_proj.weight", "shape": ["hidden_size", "intermediate_size"], "when": "!moe"},
            {"name": "model.layers.{i}.mlp.gate.weight", "shape": ["n_routed_experts", "hidden_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.gate.e_score_correction_bias", "shape": ["n_routed_experts"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.experts.{e}.gate_proj.weight", "shape": ["moe_intermediate_size", "hidden_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.experts.{e}.up_proj.weight", "shape": ["moe_intermediate_size", "hidden_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.experts.{e}.down_proj.weight", "shape": ["hidden_size", "moe_intermediate_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.shared_experts.gate_proj.weight", "shape": ["shared", "hidden_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.shared_experts.up_proj.weight", "shape": ["shared", "hidden_size"], "when": "moe"},
            {"name": "model.layers.{i}.mlp.shared_experts.down_proj.weight", "shape": ["hidden_size", "shared"], "when": "moe"}
          ]}})";
    const HfConfig config = parse_hf_config("/hf", R"({"architectures": ["GlmLikeForCausalLM"], "hidden_size": 8,
        "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2, "vocab_size": 16,
        "intermediate_size": 12, "moe_intermediate_size": 4, "n_routed_experts": 2, "n_shared_experts": 1,
        "first_k_dense_replace": 1})");
    const auto got = expected_tensors_for(config, load_architecture_tables({file}), "GlmLikeForCausalLM", false, false);
    ASSERT_TRUE(got);
    std::map<std::string, Shape> expected{{"model.embed_tokens.weight", {16, 8}}, {"model.norm.weight", {8}},
                                          {"lm_head.weight", {16, 8}}};
    for (int i = 0; i < 2; ++i) {
        const std::string l = "model.layers." + std::to_string(i) + ".";
        for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) expected[l + norm] = {8};
        expected[l + "self_attn.q_proj.weight"] = {8, 8};
        expected[l + "self_attn.k_proj.weight"] = {4, 8};
        expected[l + "self_attn.v_proj.weight"] = {4, 8};
        expected[l + "self_attn.o_proj.weight"] = {8, 8};
        expected[l + "self_attn.q_proj.bias"] = {8};
        expected[l + "self_attn.k_proj.bias"] = {4};
        expected[l + "self_attn.v_proj.bias"] = {4};
    }
    expected["model.layers.0.mlp.gate_proj.weight"] = {12, 8};  // first_k_dense_replace 1: layer 0 is dense
    expected["model.layers.0.mlp.up_proj.weight"] = {12, 8};
    expected["model.layers.0.mlp.down_proj.weight"] = {8, 12};
    expected["model.layers.1.mlp.gate.weight"] = {2, 8};
    expected["model.layers.1.mlp.gate.e_score_correction_bias"] = {2};
    for (const std::string prefix : {"model.layers.1.mlp.experts.0.", "model.layers.1.mlp.experts.1.",
                                     "model.layers.1.mlp.shared_experts."}) {
        expected[prefix + "gate_proj.weight"] = {4, 8};
        expected[prefix + "up_proj.weight"] = {4, 8};
        expected[prefix + "down_proj.weight"] = {8, 4};
    }
    EXPECT_EQ(got->required, expected);
    EXPECT_TRUE(got->optional.empty());
}

TEST(ArchitectureTable, ShippedTablesParse) {
    for (const char* name : {"torchtitan_llama3.json", "torchtitan_qwen3.json", "torchtitan_qwen3_moe.json",
                             "torchtitan_deepseek_v3.json"}) {
        const auto table = read_architecture_table(std::string(VMERGE_SOURCE_DIR) + "/share/vmerge/architectures/" + name);
        EXPECT_EQ(table.source, "torchtitan") << name;
        EXPECT_FALSE(table.config_check.empty()) << name;
    }
}

TEST(ArchitectureTable, ALaterTableTakesItsArchitecturesFromEarlierOnes) {
    testing::TempDir dir;
    const std::string file = dir.path() + "/mine.json";
    std::ofstream(file) << R"({"vmerge_architecture_table": 1, "name": "mine", "source": "torchtitan",
        "architectures": ["LlamaForCausalLM", "MyLlama"], "rules": [{"from": "a", "to": "b"}]})";
    const auto tables = load_architecture_tables({file});
    const ArchitectureTable* llama = find_architecture_table(tables, "torchtitan", "LlamaForCausalLM");
    ASSERT_TRUE(llama);
    EXPECT_EQ(llama->name, "mine");
    EXPECT_EQ(find_architecture_table(tables, "torchtitan", "MyLlama"), llama);
    EXPECT_EQ(find_architecture_table(tables, "megatron", "MyLlama"), nullptr);
}

}  // namespace
}  // namespace vmerge
