// Unit tests for the source accounting (src/formats/source_ledger.h), the output-name
// collision check (OutputNames, fsdp_model_name) and the FSDP/DCP check against config.json
// (check_output_against_config), on hand-built scans.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/box_region.h"
#include "formats/checkpoint.h"
#include "core/error.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/registry.h"
#include "formats/source_ledger.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::replicate;
using testing::shard;

// A plain tensor in its own storage record at `offset` of `file`.
TensorRef stored(Shape shape, const std::string& file, uint64_t offset) {
    TensorRef t;
    t.dtype = DType::F32;
    t.shape = shape;
    t.stride = contiguous_strides(shape);
    t.storage = {file, "data/" + std::to_string(offset), offset, static_cast<uint64_t>(numel(shape)) * 4, std::nullopt};
    return t;
}

using testing::error_of;
using testing::contains;
// An output tensor that copies `source` whole.
OutputTensor whole(const std::string& name, TensorMapping& m, const TensorRef& source) {
    OutputTensor t = testing::tensor(name, source.dtype, source.shape);
    const uint32_t index = static_cast<uint32_t>(m.sources.size());
    m.sources.push_back(source);
    add_copy(t, index, Shape(source.shape.size(), 0), Shape(source.shape.size(), 0), source.shape);
    return t;
}

ScannedFile scan_of(const std::string& path, std::vector<StateDictEntry> tensors, std::vector<SkippedEntry> skipped = {}) {
    ScannedFile f;
    f.path = path;
    f.tensors = std::move(tensors);
    f.skipped = std::move(skipped);
    return f;
}

// --- SourceLedger --------------------------------------------------------------------------

// 200k views of one storage, each written by its own copy and half of them dropped as well: each
// storage's views are marked once (before, every copy walked every view: 4e10 steps).
TEST(SourceLedger, ManyViewsOfOneStorageSettleOnce) {
    constexpr int kViews = 200000;
    std::vector<StateDictEntry> entries;
    TensorMapping m;
    for (int i = 0; i < kViews; ++i) {
        TensorRef view = stored({1}, "/c/r0.pt", 64);
        view.storage_offset = i;
        view.storage.byte_size = kViews * 4;
        entries.push_back({"v" + std::to_string(i), view, 0});
    }
    const std::vector<ScannedFile> scans{scan_of("/c/r0.pt", entries)};
    SourceLedger ledger(scans);
    for (int i = 0; i < kViews; ++i) {
        m.tensors.push_back(whole("v" + std::to_string(i), m, entries[i].tensor));
        if (i % 2) ledger.drop(entries[i].tensor, DropReason::Replica);
    }
    const SourceAccount account = ledger.settle(m);
    EXPECT_EQ(account.written, static_cast<size_t>(kViews));
    EXPECT_EQ(account.total_dropped(), 0u);
}

TEST(SourceLedger, WrittenDroppedAndEmptyAreCountedByReason) {
    const TensorRef a = stored({4, 2}, "/c/r0.pt", 64), b = stored({4, 2}, "/c/r0.pt", 128),
                    empty = stored({0, 2}, "/c/r0.pt", 192), extra = stored({3}, "/c/r0.pt", 256);
    const std::vector<ScannedFile> scans{scan_of("/c/r0.pt", {{"a", a, 0}, {"b", b, 0}, {"e", empty, 0},
                                                              {"x._extra_state", extra, 0}},
                                                 {{"step", "int"}, {"layer._extra_state", "_io.BytesIO(...)"}})};
    SourceLedger ledger(scans);
    TensorMapping m;
    m.tensors.push_back(whole("a", m, a));
    ledger.drop(b, DropReason::Replica);
    const SourceAccount account = ledger.settle(m);
    EXPECT_EQ(account.written, 1u);
    EXPECT_EQ(account.dropped.at("replica (other DP/EP/TP rank)"), 1u);
    EXPECT_EQ(account.dropped.at("empty shard"), 1u);
    EXPECT_EQ(account.dropped.at("_extra_state"), 2u);  // the tensor one and the BytesIO one
    EXPECT_EQ(account.dropped.at("not a tensor"), 1u);
    EXPECT_EQ(account.total_dropped(), 5u);
    EXPECT_EQ(account.examples.at("not a tensor"), std::vector<std::string>{"/c/r0.pt key 'step' (int)"});
    // std::map order: the reasons sorted by their text.
    EXPECT_EQ(account.dropped_text(),
              "5 source entries: 2 _extra_state, 1 empty shard, 1 not a tensor, 1 replica (other DP/EP/TP rank)");
    EXPECT_EQ(dropped_summary(account).rfind("dropped 5 source entries: ", 0), 0u);
}

TEST(SourceLedger, AnEntryNeitherWrittenNorDroppedIsAnErrorNamingFileAndKey) {
    const TensorRef a = stored({4}, "/c/r0.pt", 64), lost = stored({4}, "/c/r0.pt", 128);
    const std::vector<ScannedFile> scans{scan_of("/c/r0.pt", {{"a", a, 0}, {"lm_head.weight", lost, 0}})};
    SourceLedger ledger(scans);
    TensorMapping m;
    m.tensors.push_back(whole("a", m, a));
    const std::string msg = error_of([&] { ledger.settle(m); });
    EXPECT_TRUE(contains(msg, "/c/r0.pt key 'lm_head.weight': neither written nor dropped")) << msg;
}

TEST(SourceLedger, AnUnknownObjectWhereATensorBelongsIsAnError) {
    const std::vector<ScannedFile> scans{scan_of("/c/r1.pt", {}, {{"lm_head.weight", "evil.Thing(...)"}})};
    const std::string msg = error_of([&] { SourceLedger ledger(scans); });
    EXPECT_TRUE(contains(msg, "/c/r1.pt key 'lm_head.weight': holds evil.Thing(...) where a tensor is expected")) << msg;
}

TEST(SourceLedger, DcpItemsAreNamedByTheirFqn) {
    const TensorRef chunk = stored({4}, "/c/__0_0.distcp", 4096);
    const std::vector<ScannedFile> scans{scan_of("/c/__0_0.distcp", {{"", chunk, 0}})};
    SourceLedger ledger(scans, {"'model.w' chunk [0]"});
    EXPECT_TRUE(contains(error_of([&] { ledger.settle(TensorMapping{}); }),
                         "/c/__0_0.distcp 'model.w' chunk [0]: neither written nor dropped"));
}

TEST(SourceLedger, DroppedOutputDropsItsSourcesAndWrittenWins) {
    // Tied weights saved in one storage: one key written, the other dropped, both accounted.
    const TensorRef emb = stored({6, 2}, "/c/r0.pt", 64), head = stored({6, 2}, "/c/r0.pt", 64),
                    opt = stored({6}, "/c/r0.pt", 512);
    const std::vector<ScannedFile> scans{scan_of("/c/r0.pt", {{"embed", emb, 0}, {"head", head, 0}, {"opt", opt, 0}})};
    SourceLedger ledger(scans);
    TensorMapping m;
    m.tensors.push_back(whole("embed", m, emb));
    TensorMapping other;
    const OutputTensor optimizer = whole("opt", other, opt);
    ledger.drop_output(optimizer, other.sources, DropReason::OutsideModel);
    ledger.drop(head, DropReason::TiedHead);
    ledger.drop_unscanned("/c/.metadata 'optim.step'", DropReason::BytesItem);
    const SourceAccount account = ledger.settle(m);
    EXPECT_EQ(account.written, 2u);
    EXPECT_EQ(account.dropped.count("tied output layer"), 0u);
    EXPECT_EQ(account.dropped.at("outside the model state dict (optimizer, ...)"), 1u);
    EXPECT_EQ(account.dropped.at("DCP bytes item"), 1u);
    EXPECT_EQ(account.examples.at("outside the model state dict (optimizer, ...)"),
              std::vector<std::string>{"/c/r0.pt key 'opt'"});
}

// --- OutputNames and fsdp_model_name ------------------------------------------------------------

TEST(OutputNames, TwoKeysForOneNameNameBothKeys) {
    OutputNames names("/c/r0.pt");
    names.claim("model.norm.weight", "model.norm.weight");
    const std::string msg = error_of([&] { names.claim("model.norm.weight", "_fsdp_wrapped_module.model.norm.weight"); });
    EXPECT_EQ(msg, "/c/r0.pt: keys 'model.norm.weight' and '_fsdp_wrapped_module.model.norm.weight' both become "
                   "output tensor 'model.norm.weight'");
}

TEST(OutputNames, MetadataAndEmptyNamesAreRefused) {
    OutputNames names("/c/r0.pt");
    EXPECT_TRUE(contains(error_of([&] { names.claim("__metadata__", "module.__metadata__"); }),
                         "key 'module.__metadata__' becomes the output tensor name '__metadata__'"));
    EXPECT_TRUE(contains(error_of([&] { names.claim("", "module."); }), "key 'module.' becomes an empty output tensor name"));
}

TEST(FsdpModelName, StripsWrapperSegmentsOnly) {
    EXPECT_EQ(fsdp_model_name("_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.mlp.w"), "model.layers.0.mlp.w");
    EXPECT_EQ(fsdp_model_name("module._orig_mod.model.norm.weight"), "model.norm.weight");
    EXPECT_EQ(fsdp_model_name("model.layers.0._checkpoint_wrapped_module.mlp.w"), "model.layers.0.mlp.w");
    EXPECT_EQ(fsdp_model_name("model.my_fsdp_wrapped_module.w"), "model.my_fsdp_wrapped_module.w");  // not a segment
    EXPECT_EQ(fsdp_model_name("model.module.w"), "model.module.w");  // only a leading DDP module.
}

TEST(MapFsdp, WrapperStripCollisionIsAnError) {
    const std::string path = "/c/model_world_size_1_rank_0.pt";
    const std::vector<ScannedFile> files{scan_of(path, {{"model.w", stored({2}, path, 64), 0},
                                                        {"_fsdp_wrapped_module.model.w", stored({2}, path, 128), 0}})};
    EXPECT_EQ(error_of([&] { map_fsdp(files); }),
              path + ": keys 'model.w' and '_fsdp_wrapped_module.model.w' both become output tensor 'model.w'");
}

TEST(MapFsdp, HsdpReplicasAreDroppedInTheLedger) {
    // Mesh (2, 2) (Replicate, Shard(0)) of a [4] tensor: ranks with coordinate 1 on dim 0 repeat.
    std::vector<ScannedFile> files;
    for (int r = 0; r < 4; ++r) {
        const std::string path = "/c/model_world_size_4_rank_" + std::to_string(r) + ".pt";
        TensorRef t = stored({2}, path, 64);
        t.dtensor = testing::layout({4}, {2, 2}, {r / 2, r % 2}, {replicate(), shard(0)});
        files.push_back(scan_of(path, {{"w", t, 0}}));
    }
    SourceLedger ledger(files);
    const TensorMapping m = map_fsdp(files, &ledger);
    const SourceAccount account = ledger.settle(m);
    EXPECT_EQ(account.written, 2u);
    EXPECT_EQ(account.dropped.at("replica (other DP/EP/TP rank)"), 2u);
}

// --- check_output_against_config -----------------------------------------------------------

HfConfig tiny_config(bool tied, const std::string& architecture = "LlamaForCausalLM") {
    HfConfig c;
    c.dir = "/hf";
    c.tie_word_embeddings = tied;
    c.architectures = {architecture};
    c.json = {{"architectures", c.architectures}, {"hidden_size", 4}, {"num_attention_heads", 2},
              {"num_key_value_heads", 1}, {"vocab_size", 10}, {"num_hidden_layers", 1},
              {"intermediate_size", 6}, {"tie_word_embeddings", tied}};
    return c;
}

// The tensors of a 1-layer Llama of tiny_config, listed here by hand (head_dim 2).
MappedCheckpoint tiny_llama(bool with_head) {
    MappedCheckpoint m;
    auto add = [&](const std::string& name, Shape shape) { m.mapping.tensors.push_back(testing::tensor(name, DType::F32, shape)); };
    add("model.embed_tokens.weight", {10, 4});
    add("model.layers.0.self_attn.q_proj.weight", {4, 4});
    add("model.layers.0.self_attn.k_proj.weight", {2, 4});
    add("model.layers.0.self_attn.v_proj.weight", {2, 4});
    add("model.layers.0.self_attn.o_proj.weight", {4, 4});
    add("model.layers.0.mlp.gate_proj.weight", {6, 4});
    add("model.layers.0.mlp.up_proj.weight", {6, 4});
    add("model.layers.0.mlp.down_proj.weight", {4, 6});
    add("model.layers.0.input_layernorm.weight", {4});
    add("model.layers.0.post_attention_layernorm.weight", {4});
    add("model.norm.weight", {4});
    if (with_head) add("lm_head.weight", {10, 4});
    return m;
}

// Map options with the shipped architecture tables loaded, as a merge loads them.
MapOptions shipped() {
    MapOptions options;
    options.tables = std::make_shared<const ArchitectureTables>(testing::shipped_tables());
    return options;
}

DetectedCheckpoint fsdp_layout() {
    DetectedCheckpoint d;
    d.source = find_layout("fsdp");
    return d;
}

TEST(FsdpConfigCheck, CompleteModelPassesAndTiedNeedsNoHead) {
    MappedCheckpoint untied = tiny_llama(true);
    EXPECT_NO_THROW(check_output_against_config(untied, fsdp_layout(), tiny_config(false), shipped(), false));
    MappedCheckpoint tied = tiny_llama(false);
    EXPECT_NO_THROW(check_output_against_config(tied, fsdp_layout(), tiny_config(true), shipped(), false));
}

TEST(FsdpConfigCheck, MissingHeadOfAnUntiedModelIsNamed) {
    MappedCheckpoint m = tiny_llama(false);
    const std::string msg = error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); });
    EXPECT_TRUE(contains(msg, "/hf/config.json (LlamaForCausalLM) implies:")) << msg;
    EXPECT_TRUE(contains(msg, "missing: lm_head.weight")) << msg;
}

TEST(FsdpConfigCheck, ExtraAndMisshapenTensorsAreNamed) {
    MappedCheckpoint m = tiny_llama(true);
    m.mapping.tensors.push_back(testing::tensor("model.layers.0.mlp.extra.weight", DType::F32, {2}));
    m.mapping.tensors[5].shape = {7, 4};  // gate_proj
    const std::string msg = error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); });
    EXPECT_TRUE(contains(msg, "not part of LlamaForCausalLM: model.layers.0.mlp.extra.weight")) << msg;
    EXPECT_TRUE(contains(msg, "wrong shape: model.layers.0.mlp.gate_proj.weight [7, 4] (config.json implies [6, 4])")) << msg;
}

TEST(FsdpConfigCheck, ACriticWithTheActorsCausalLmConfigIsCheckedAsAValueModel) {
    MappedCheckpoint m = tiny_llama(false);
    m.mapping.tensors.push_back(testing::tensor("score.weight", DType::F32, {1, 4}));
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false));
    m.mapping.tensors.back().shape = {1, 5};
    EXPECT_TRUE(contains(error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); }),
                         "wrong shape: score.weight [1, 5] (config.json implies [1, 4])"));
}

TEST(FsdpConfigCheck, AdapterTensorsAreNotPartOfTheModel) {
    MappedCheckpoint m = tiny_llama(true);
    OutputTensor adapter = testing::tensor("base_model.model.lora_A.weight", DType::F32, {2, 4});
    adapter.adapter = true;
    m.mapping.tensors.push_back(adapter);
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false));
}

TEST(FsdpConfigCheck, UnknownArchitectureIsNotCheckedAndSaysSo) {
    MappedCheckpoint m = tiny_llama(false);
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false, "FooForCausalLM"), shipped(), false));
    ASSERT_EQ(m.notes.size(), 1u);
    EXPECT_TRUE(contains(m.notes[0], "not checked against /hf/config.json: no tensor table for architecture FooForCausalLM"));
}

// --- map_checkpoint -------------------------------------------------------------------------

TEST(MapCheckpoint, FsdpBuffersAndNonTensorsAreDroppedAndCounted) {
    const std::string path = "/c/model_world_size_1_rank_0.pt";
    DetectedCheckpoint ckpt = fsdp_layout();
    FsdpCheckpoint fsdp;
    fsdp.world_size = 1;
    ckpt.keep(fsdp);
    const std::vector<ScannedFile> scans{scan_of(path,
                                                 {{"model.w", stored({2}, path, 64), 0},
                                                  {"model.layers.0.self_attn.rotary_emb.inv_freq", stored({2}, path, 128), 0},
                                                  {"model.layers.0.mlp.fc._extra_state", stored({8}, path, 192), 0}},
                                                 {{"model.version", "int"}})};
    const MappedCheckpoint m = map_checkpoint(ckpt, scans, tiny_config(false), shipped());
    ASSERT_EQ(m.mapping.tensors.size(), 1u);
    EXPECT_EQ(m.mapping.tensors[0].name, "model.w");
    EXPECT_EQ(m.account.written, 1u);
    EXPECT_EQ(m.account.dropped.at("rotary inv_freq buffer"), 1u);
    EXPECT_EQ(m.account.dropped.at("_extra_state"), 1u);
    EXPECT_EQ(m.account.dropped.at("not a tensor"), 1u);
    EXPECT_EQ(m.notes.back(), "dropped 3 source entries: 1 _extra_state, 1 not a tensor, 1 rotary inv_freq buffer");
}

}  // namespace
}  // namespace vmerge
