// Unit tests for the source accounting (src/formats/source_ledger.h), on hand-built scans.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/box_region.h"
#include "formats/checkpoint.h"
#include "core/error.h"
#include "formats/source_ledger.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::stored;
using testing::scan_of;
using testing::replicate;
using testing::shard;

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

}  // namespace
}  // namespace vmerge
