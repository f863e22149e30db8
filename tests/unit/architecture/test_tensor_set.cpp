// The expressions of an architecture table's tensor set and how a set expands, extends and
// fails (src/architecture/config_expression.h, tensor_set.h).
#include <gtest/gtest.h>

#include "architecture/config_expression.h"
#include "architecture/hf_config.h"
#include "architecture/tensor_set.h"
#include "core/error.h"

namespace vmerge {
namespace {

const nlohmann::json kConfig = nlohmann::json::parse(R"({"hidden_size": 64, "num_attention_heads": 4,
    "head_dim": null, "layer_types": ["linear_attention", "full_attention"], "mlp_only_layers": [1],
    "vision_config": {"depth": 3, "deepstack_visual_indexes": [0, 2]}, "use_qk_norm": true, "name": "x"})");

ConfigValue eval(const std::string& text, std::map<std::string, ConfigValue> bound = {}) {
    static std::map<std::string, ConfigExpression> definitions{
        {"head_dim", ConfigExpression::parse("head_dim ?? hidden_size / num_attention_heads", "t")},
        {"twice", ConfigExpression::parse("2 * head_dim", "t")}};
    ExpressionScope scope;
    scope.config = &kConfig;
    scope.config_path = "/hf/config.json";
    scope.definitions = &definitions;
    scope.bound = std::move(bound);
    return evaluate(ConfigExpression::parse(text, "t"), scope);
}

std::string eval_error(const std::string& text) {
    try {
        eval(text);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ConfigExpression, ArithmeticComparisonsAndLogic) {
    EXPECT_EQ(eval("hidden_size * 3 + 1").integer, 193);
    EXPECT_EQ(eval("(hidden_size - 4) / num_attention_heads % 4").integer, 3);
    EXPECT_EQ(eval("-hidden_size").integer, -64);
    EXPECT_TRUE(eval("hidden_size >= 64 && !(hidden_size < 64) || false").boolean);
    EXPECT_EQ(eval("hidden_size > 100 ? 1 : 2").integer, 2);
    EXPECT_TRUE(eval("use_qk_norm == true && name == 'x' && name != 'y'").boolean);
}

TEST(ConfigExpression, NamesResolveToBindingsThenDefinitionsThenConfig) {
    // head_dim is null in config.json: the definition falls back; `twice` uses the definition.
    EXPECT_EQ(eval("head_dim").integer, 16);
    EXPECT_EQ(eval("twice").integer, 32);
    EXPECT_EQ(eval("head_dim", {{"head_dim", int_value(7)}}).integer, 7);
    EXPECT_EQ(eval("vision_config.depth").integer, 3);
    EXPECT_EQ(eval("len(vision_config.deepstack_visual_indexes)").integer, 2);
    EXPECT_EQ(eval("layer_types[i]", {{"i", int_value(1)}}).string, "full_attention");
    EXPECT_TRUE(eval("i in mlp_only_layers", {{"i", int_value(1)}}).boolean);
    EXPECT_FALSE(eval("i in mlp_only_layers", {{"i", int_value(0)}}).boolean);
    EXPECT_TRUE(eval("has(hidden_size) && !has(head_dim) && !has(vision_config.missing)").boolean);
    EXPECT_EQ(eval("moe_intermediate_size ?? 5").integer, 5);
    // `in` is a word: a name that starts with it is a name.
    EXPECT_EQ(eval("intermediate ?? 1").integer, 1);
}

TEST(ConfigExpression, ErrorsNameTheConfigAndTheExpression) {
    EXPECT_EQ(eval_error("moe_intermediate_size * 2"), "/hf/config.json: moe_intermediate_size * 2: config.json has no "
                                                       "'moe_intermediate_size'");
    EXPECT_EQ(eval_error("hidden_size / (num_attention_heads - 4)"),
              "/hf/config.json: hidden_size / (num_attention_heads - 4): division by zero");
    EXPECT_EQ(eval_error("layer_types[2]"), "/hf/config.json: layer_types[2]: index 2 outside a list of 2");
    EXPECT_EQ(eval_error("hidden_size && true"), "/hf/config.json: hidden_size && true: expected true or false");
    EXPECT_EQ(eval_error("hidden_size * 1125899906842624"), "/hf/config.json: hidden_size * 1125899906842624: a value beyond 2^50");
    auto parse_error = [](const std::string& text) {
        try {
            ConfigExpression::parse(text, "t.json: tensor 'x'");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(parse_error("hidden_size +"), "t.json: tensor 'x': 'hidden_size +': expected a value at column 14");
    EXPECT_EQ(parse_error("(hidden_size"), "t.json: tensor 'x': '(hidden_size': expected ')' at column 13");
    EXPECT_EQ(parse_error("a b"), "t.json: tensor 'x': 'a b': unexpected 'b' at column 3");
    EXPECT_EQ(parse_error("vision_config."), "t.json: tensor 'x': 'vision_config.': a name may not end with '.' at column 15");
}

TensorSet parse_set(const std::string& text) { return parse_tensor_set(nlohmann::json::parse(text), "t.json"); }

HfConfig config_of(const std::string& text) { return parse_hf_config("/hf", text); }

TEST(TensorSet, ExpandsRangesConditionsAndNamedPlaceholders) {
    const TensorSet set = parse_set(R"({"define": {"model": "'model.text'", "moe": "i >= 1"},
        "ranges": {"i": "num_hidden_layers", "e": "experts"},
        "tensors": [{"name": "{model}.layers.{i}.w", "shape": ["hidden_size", 2]},
                    {"name": "{model}.layers.{i}.experts.{e}.w", "shape": ["hidden_size"], "when": "moe"},
                    {"name": "head", "shape": ["hidden_size"], "when": "!tie_word_embeddings", "optional": true}]})");
    const ExpectedTensors got = expand_tensor_set(set, config_of(R"({"num_hidden_layers": 2, "experts": 2,
        "hidden_size": 4})"), {});
    const std::map<std::string, Shape> required{{"model.text.layers.0.w", {4, 2}}, {"model.text.layers.1.w", {4, 2}},
                                                {"model.text.layers.1.experts.0.w", {4}},
                                                {"model.text.layers.1.experts.1.w", {4}}};
    EXPECT_EQ(got.required, required);
    EXPECT_EQ(got.optional, (std::map<std::string, Shape>{{"head", {4}}}));
}

TEST(TensorSet, ExtendingReplacesDefinitionsAndSameNamedEntries) {
    const TensorSet parent = parse_set(R"({"define": {"bias": "false"}, "ranges": {"i": "2"},
        "tensors": [{"name": "l.{i}.w", "shape": [3]}, {"name": "l.{i}.b", "shape": [3], "when": "bias"}]})");
    const TensorSet child = parse_set(R"({"extends": "P", "define": {"bias": "true"},
        "tensors": [{"name": "l.{i}.w", "shape": [5]}, {"name": "l.{i}.sink", "shape": [1]}]})");
    const ExpectedTensors got = expand_tensor_set(extend_tensor_set(parent, child), config_of("{}"), {});
    EXPECT_EQ(got.required, (std::map<std::string, Shape>{{"l.0.w", {5}}, {"l.1.w", {5}}, {"l.0.b", {3}}, {"l.1.b", {3}},
                                                          {"l.0.sink", {1}}, {"l.1.sink", {1}}}));
}

std::string expand_error(const std::string& set, const std::string& config) {
    try {
        expand_tensor_set(parse_set(set), config_of(config), {});
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TensorSet, RefusesWhatConfigJsonCannotMean) {
    EXPECT_EQ(expand_error(R"({"checks": [{"require": "a == b", "message": "a and b disagree"}], "tensors": []})",
                           R"({"a": 1, "b": 2})"),
              "/hf/config.json: a and b disagree (t.json)");
    EXPECT_EQ(expand_error(R"({"tensors": [{"name": "w", "shape": ["a - 5"]}]})", R"({"a": 1})"),
              "/hf/config.json: a - 5 = -4 for 'w': expected 0..1099511627776 (t.json)");
    EXPECT_EQ(expand_error(R"({"tensors": [{"name": "w.{k}", "shape": [1]}]})", "{}"),
              "t.json: tensor 'w.{k}': {k} is neither a range nor a definition");
    EXPECT_EQ(expand_error(R"({"ranges": {"i": "n", "e": "n"}, "tensors": [{"name": "w.{i}.{e}", "shape": [1]}]})",
                           R"({"n": 4096})"),
              "/hf/config.json: implies more than 1048576 tensors (t.json, at 'w.{i}.{e}')");
    EXPECT_EQ(expand_error(R"({"ranges": {"i": "2"}, "tensors": [{"name": "w.{i}", "shape": [1]},
                                                                {"name": "w.{i}x", "shape": [1]}, {"name": "w.1", "shape": [1]}]})", "{}"),
              "t.json: two tensor_set entries give 'w.1'");
}

TEST(TensorSet, ParseErrorsNameTheEntry) {
    auto error = [](const std::string& text) {
        try {
            parse_set(text);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_EQ(error(R"({"tensors": [{"name": "w", "shape": [1]}, {"name": "w", "shape": [2]}]})"),
              "t.json: tensor_set: two entries named 'w'");
    EXPECT_EQ(error(R"({"tensors": [{"name": "w", "shape": ["a +"]}]})"),
              "t.json: tensor_set.tensors[0] ('w') shape: 'a +': expected a value at column 4");
    EXPECT_EQ(error(R"({"tensors": [{"name": "w", "shape": [1], "size": 2}]})"), "t.json: tensor_set.tensors[0]: unknown key 'size'");
    EXPECT_EQ(error(R"({"define": {"value_model": "true"}, "tensors": []})"),
              "t.json: tensor_set.define.value_model: not a name that may be defined");
    EXPECT_EQ(error(R"({"define": {}})"), "t.json: tensor_set: neither 'extends' nor 'tensors'");
}

}  // namespace
}  // namespace vmerge
