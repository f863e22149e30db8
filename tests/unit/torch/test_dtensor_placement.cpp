// Unit tests for src/torch/dtensor_placement.h. Expected ranges follow the torch rules of
// docs/reference/torch-formats.md §3.1 (c = ceil(N/W), rank r gets [min(N, r*c), min(N, (r+1)*c)))
// and §3.2.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "torch/dtensor_placement.h"
#include "core/error.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::layout;
using testing::replicate;
using testing::shard;
using testing::strided;

Placement partial() {
    Placement p;
    p.kind = Placement::Kind::Partial;
    p.reduce_op = "sum";
    return p;
}

using P = std::pair<int64_t, int64_t>;

void expect_run(const DimRun& r, int64_t local, int64_t global, int64_t length) {
    EXPECT_EQ(r.local, local);
    EXPECT_EQ(r.global, global);
    EXPECT_EQ(r.length, length);
}

// --- chunk_range ---------------------------------------------------------------------------

TEST(ChunkRange, TenOverFour) {
    EXPECT_EQ(chunk_range(10, 4, 0), P(0, 3));
    EXPECT_EQ(chunk_range(10, 4, 1), P(3, 3));
    EXPECT_EQ(chunk_range(10, 4, 2), P(6, 3));
    EXPECT_EQ(chunk_range(10, 4, 3), P(9, 1));
}

TEST(ChunkRange, FiveOverFour) {
    EXPECT_EQ(chunk_range(5, 4, 0), P(0, 2));
    EXPECT_EQ(chunk_range(5, 4, 1), P(2, 2));
    EXPECT_EQ(chunk_range(5, 4, 2), P(4, 1));
    EXPECT_EQ(chunk_range(5, 4, 3), P(5, 0));  // empty piece starts at N
}

TEST(ChunkRange, EightOverSixteen) {
    for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(chunk_range(8, 16, r), P(r, 1)) << r;
    for (int64_t r = 8; r < 16; ++r) EXPECT_EQ(chunk_range(8, 16, r), P(8, 0)) << r;
}

TEST(ChunkRange, EvenAndDegenerate) {
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(chunk_range(12, 4, r), P(3 * r, 3));
    EXPECT_EQ(chunk_range(7, 1, 0), P(0, 7));
    EXPECT_EQ(chunk_range(0, 3, 0), P(0, 0));
    EXPECT_EQ(chunk_range(0, 3, 2), P(0, 0));
    // Not numpy's array_split: 6 over 4 is 2,2,2,0 (not 2,2,1,1).
    EXPECT_EQ(chunk_range(6, 4, 2), P(4, 2));
    EXPECT_EQ(chunk_range(6, 4, 3), P(6, 0));
}

TEST(ChunkRange, PiecesTileTheDimension) {
    for (int64_t n = 0; n <= 40; ++n)
        for (int64_t w = 1; w <= 17; ++w) {
            int64_t next = 0;
            bool seen_short = false;
            for (int64_t r = 0; r < w; ++r) {
                auto [start, len] = chunk_range(n, w, r);
                const int64_t c = (n + w - 1) / w;
                ASSERT_GE(len, 0);
                ASSERT_LE(len, c);
                if (len > 0) {
                    ASSERT_FALSE(seen_short) << "a non-empty piece after a short one, n=" << n << " w=" << w;
                    ASSERT_EQ(start, next);
                } else {
                    ASSERT_EQ(start, n);
                }
                if (len < c) seen_short = true;
                next = start + len;
            }
            ASSERT_EQ(next, n) << "n=" << n << " w=" << w;
        }
}

// --- dtensor_runs --------------------------------------------------------------------------

TEST(DTensorRuns, Shard0OneDimMesh) {
    // N=10 on W=4: 3,3,3,1. Dim 1 is untouched.
    const int64_t starts[] = {0, 3, 6, 9}, lengths[] = {3, 3, 3, 1};
    for (int64_t r = 0; r < 4; ++r) {
        const auto runs = dtensor_runs(layout({10, 6}, {4}, {r}, {shard(0)}), "t");
        ASSERT_EQ(runs.size(), 2u);
        ASSERT_EQ(runs[0].size(), 1u);
        expect_run(runs[0][0], 0, starts[r], lengths[r]);
        ASSERT_EQ(runs[1].size(), 1u);
        expect_run(runs[1][0], 0, 0, 6);
    }
}

TEST(DTensorRuns, EmptyShardHasNoRows) {
    const auto runs = dtensor_runs(layout({5, 2}, {4}, {3}, {shard(0)}), "t");
    ASSERT_EQ(runs.size(), 2u);
    int64_t held = 0;
    for (const DimRun& r : runs[0]) held += r.length;
    EXPECT_EQ(held, 0);
}

TEST(DTensorRuns, ShardOnDimOne) {
    // Shard(1) of a (4, 10) tensor over 4 ranks: columns 3,3,3,1.
    const auto runs = dtensor_runs(layout({4, 10}, {4}, {2}, {shard(1)}), "t");
    ASSERT_EQ(runs[0].size(), 1u);
    expect_run(runs[0][0], 0, 0, 4);
    ASSERT_EQ(runs[1].size(), 1u);
    expect_run(runs[1][0], 0, 6, 3);
}

TEST(DTensorRuns, HsdpReplicateThenShard) {
    // mesh (replicate=2, shard=2), N=10: the shard coordinate alone decides the rows.
    for (int64_t rep = 0; rep < 2; ++rep) {
        for (int64_t s = 0; s < 2; ++s) {
            const auto l = layout({10, 3}, {2, 2}, {rep, s}, {replicate(), shard(0)});
            const auto runs = dtensor_runs(l, "t");
            ASSERT_EQ(runs[0].size(), 1u);
            expect_run(runs[0][0], 0, 5 * s, 5);
            expect_run(runs[1][0], 0, 0, 3);
            EXPECT_EQ(shard_position(l), (Shape{0, s}));
        }
    }
}

// Every copy of one shard has one position: the replicate dims' coordinates set to 0.
TEST(DTensorRuns, ShardPositionIgnoresReplicateDims) {
    EXPECT_EQ(shard_position(layout({8}, {4}, {3}, {shard(0)})), (Shape{3}));
    EXPECT_EQ(shard_position(layout({8}, {2, 4}, {1, 3}, {replicate(), shard(0)})), (Shape{0, 3}));
    EXPECT_EQ(shard_position(layout({8}, {4, 2}, {2, 1}, {shard(0), replicate()})), (Shape{2, 0}));
    EXPECT_EQ(shard_position(layout({8}, {2}, {1}, {replicate()})), (Shape{0}));
}

TEST(DTensorRuns, TwoDimMeshShardBothDims) {
    // (Shard(0), Shard(1)) on mesh (2, 3), tensor (4, 7): rows 2,2; columns 3,3,1.
    const int64_t col_start[] = {0, 3, 6}, col_len[] = {3, 3, 1};
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) {
            const auto runs = dtensor_runs(layout({4, 7}, {2, 3}, {i, j}, {shard(0), shard(1)}), "t");
            ASSERT_EQ(runs[0].size(), 1u);
            expect_run(runs[0][0], 0, 2 * i, 2);
            ASSERT_EQ(runs[1].size(), 1u);
            expect_run(runs[1][0], 0, col_start[j], col_len[j]);
        }
}

TEST(DTensorRuns, TwoMeshDimsOnTheSameTensorDimRechunk) {
    // (Shard(0), Shard(0)) on mesh (2, 2), N=10: mesh dim 0 gives 5 and 5, mesh dim 1
    // re-chunks each 5 into 3 and 2.
    const int64_t expected_start[2][2] = {{0, 3}, {5, 8}};
    const int64_t expected_len[2][2] = {{3, 2}, {3, 2}};
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
            const auto runs = dtensor_runs(layout({10}, {2, 2}, {i, j}, {shard(0), shard(0)}), "t");
            ASSERT_EQ(runs[0].size(), 1u);
            expect_run(runs[0][0], 0, expected_start[i][j], expected_len[i][j]);
        }
}

TEST(DTensorRuns, StridedShardFsdpTpEven) {
    // (_StridedShard(0, sf=2), Shard(0)) on (dp=2, tp=2), N=32: rank (dp=i, tp=j) holds
    // rows j*16 + i*8 .. +8 (docs/reference/torch-formats.md §3.2).
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
            const auto runs =
                dtensor_runs(layout({32, 5}, {2, 2}, {i, j}, {strided(0, 2), shard(0)}), "t");
            ASSERT_EQ(runs[0].size(), 1u) << i << "," << j;
            expect_run(runs[0][0], 0, j * 16 + i * 8, 8);
            ASSERT_EQ(runs[1].size(), 1u);
            expect_run(runs[1][0], 0, 0, 5);
        }
}

TEST(DTensorRuns, StridedShardAloneGivesInterleavedPieces) {
    // dp=2, sf=2, N=32: 4 pieces of 8; rank 0 holds pieces 0 and 2, rank 1 pieces 1 and 3.
    auto r0 = dtensor_runs(layout({32}, {2}, {0}, {strided(0, 2)}), "t");
    ASSERT_EQ(r0[0].size(), 2u);
    expect_run(r0[0][0], 0, 0, 8);
    expect_run(r0[0][1], 8, 16, 8);
    auto r1 = dtensor_runs(layout({32}, {2}, {1}, {strided(0, 2)}), "t");
    ASSERT_EQ(r1[0].size(), 2u);
    expect_run(r1[0][0], 0, 8, 8);
    expect_run(r1[0][1], 8, 24, 8);
}

TEST(DTensorRuns, AdjacentPiecesMerge) {
    // dp=1, sf=2: both pieces belong to the one rank and are adjacent: one run.
    auto r = dtensor_runs(layout({9}, {1}, {0}, {strided(0, 2)}), "t");
    ASSERT_EQ(r[0].size(), 1u);
    expect_run(r[0][0], 0, 0, 9);
}

// Every element is held by exactly one primary-replica rank (coordinate 0 on each replicate
// dim), and local positions run 0..
// without gaps.
void expect_partition(Shape global, Shape mesh, std::vector<Placement> placements) {
    const int64_t ranks = numel(mesh);
    std::vector<int> count(static_cast<size_t>(numel(global)), 0);
    for (int64_t flat = 0; flat < ranks; ++flat) {
        Shape coords(mesh.size());
        int64_t rest = flat;
        for (size_t m = mesh.size(); m-- > 0;) {
            coords[m] = rest % mesh[m];
            rest /= mesh[m];
        }
        const auto l = layout(global, mesh, coords, placements);
        if (shard_position(l) != coords) continue;  // a replica: its primary holds these rows
        const auto runs = dtensor_runs(l, "t");
        ASSERT_EQ(runs.size(), global.size());
        // The global indices this rank holds on each dim.
        std::vector<std::vector<int64_t>> indices(global.size());
        for (size_t d = 0; d < runs.size(); ++d) {
            int64_t local = 0;
            for (const DimRun& r : runs[d]) {
                ASSERT_EQ(r.local, local);
                ASSERT_GT(r.length, 0);
                ASSERT_GE(r.global, 0);
                ASSERT_LE(r.global + r.length, global[d]);
                for (int64_t k = 0; k < r.length; ++k) indices[d].push_back(r.global + k);
                local += r.length;
            }
        }
        // Mark every element of the cartesian product.
        std::vector<size_t> pos(global.size(), 0);
        bool empty = false;
        for (const auto& v : indices) empty = empty || v.empty();
        while (!empty) {
            int64_t linear = 0;
            for (size_t d = 0; d < global.size(); ++d) linear = linear * global[d] + indices[d][pos[d]];
            ++count[static_cast<size_t>(linear)];
            size_t d = global.size();
            while (d > 0 && ++pos[d - 1] == indices[d - 1].size()) pos[--d] = 0;
            if (d == 0) break;
        }
    }
    for (size_t i = 0; i < count.size(); ++i)
        ASSERT_EQ(count[i], 1) << "element " << i << " of " << shape_to_string(global);
}

TEST(DTensorRuns, ShardsPartitionTheTensor) {
    expect_partition({10, 3}, {4}, {shard(0)});
    expect_partition({5, 3}, {4}, {shard(0)});
    expect_partition({8}, {16}, {shard(0)});
    expect_partition({10, 7}, {2, 3}, {replicate(), shard(1)});
    expect_partition({9, 7}, {2, 3}, {shard(0), shard(1)});
    expect_partition({32, 4}, {2, 2}, {strided(0, 2), shard(0)});
    expect_partition({10, 4}, {2, 2}, {strided(0, 2), shard(0)});
    expect_partition({13}, {3, 2}, {strided(0, 2), shard(0)});
    expect_partition({11, 4}, {2, 2, 2}, {replicate(), strided(0, 2), shard(0)});
}

TEST(DTensorRuns, PartialIsAnError) {
    const auto l = layout({4, 4}, {2}, {0}, {partial()});
    EXPECT_THROW(dtensor_runs(l, "w.pt key 'x'"), Error);
    try {
        dtensor_runs(l, "w.pt key 'x'");
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("w.pt key 'x'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(dtensor_runs(layout({4}, {2, 2}, {0, 0}, {shard(0), partial()}), "t"), Error);
}

TEST(DTensorRuns, CoordinateOutOfRangeIsAnError) {
    EXPECT_THROW(dtensor_runs(layout({8}, {4}, {4}, {shard(0)}), "t"), Error);
    EXPECT_THROW(dtensor_runs(layout({8}, {4}, {-1}, {shard(0)}), "t"), Error);
    EXPECT_THROW(dtensor_runs(layout({8}, {2, 2}, {2, 0}, {replicate(), shard(0)}), "t"), Error);
    EXPECT_THROW(dtensor_runs(layout({8}, {2, 2}, {0, 5}, {replicate(), shard(0)}), "t"), Error);
}

TEST(DTensorRuns, ShardDimOutsideTheTensorIsAnError) {
    EXPECT_THROW(dtensor_runs(layout({8}, {2}, {0}, {shard(1)}), "t"), Error);
}

// The bounds of a DTensor layout read from a checkpoint (split factor, mesh).
using testing::error_of;

DTensorLayout strided_layout(Shape mesh, int64_t split_factor) {
    DTensorLayout l;
    l.global_shape = {8};
    l.mesh_shape = mesh;
    l.coordinates = Shape(mesh.size(), 0);
    l.placements = {vmerge::testing::strided(0, split_factor)};
    while (l.placements.size() < mesh.size()) l.placements.push_back(vmerge::testing::shard(0));
    return l;
}

TEST(DTensorLayoutBounds, SplitFactorAndMeshBounded) {
    EXPECT_NO_THROW(check_dtensor_layout(strided_layout({2, 2}, 2), "w"));
    EXPECT_EQ(error_of([] { check_dtensor_layout(strided_layout({2, 2}, 1000000000000), "w"); }),
              "w: placement _StridedShard(dim=0): split factor 1000000000000: expected 1..1048576");
    EXPECT_EQ(error_of([] { dtensor_runs(strided_layout({2, 2}, 1000000000000), "w"); }),
              "w: placement _StridedShard(dim=0): split factor 1000000000000: expected 1..1048576");
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({2, 2}, 0), "w"); }).empty());
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({1 << 11, 1 << 10}, 2), "w"); }).empty());
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({0}, 1), "w"); }).empty());
}

}  // namespace
}  // namespace vmerge
