// Unit tests for the scan all-gather's binary encoding (torch/scan_serialization.h): a round
// trip keeps every field, the bytes of a small scan are the ones the format states, every
// truncated or corrupt message is one Error, and the messages of P ranks come back in file
// order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/binary_message.h"
#include "core/error.h"
#include "torch/scan_serialization.h"
#include "torch/scan_entries.h"

namespace vmerge {
namespace {

using testing::entry;

DTensorLayout fsdp_layout(Shape global, int64_t coordinate) {
    DTensorLayout d;
    d.global_shape = std::move(global);
    d.mesh_shape = {2, 4};
    d.mesh_dim_names = {"dp", "tp"};
    d.coordinates = {1, coordinate};
    Placement shard;
    shard.kind = Placement::Kind::Shard;
    shard.dim = 0;
    Placement strided;
    strided.kind = Placement::Kind::StridedShard;
    strided.dim = 1;
    strided.split_factor = 3;
    d.placements = {shard, strided};
    return d;
}

// Every kind of field: shared key prefixes, strides that are not contiguous, a storage
// offset, a CRC, a storage in another file, DTensors repeating and changing their mesh, a
// Partial placement, 0-d and 0-sized tensors, skipped keys and backend metadata.
ScannedFile rich_scan() {
    ScannedFile s;
    s.path = "/ckpt/model_world_size_8_rank_3.pt";
    s.chunks = 2;
    s.metadata = R"({"param_shapes": [1, 2]})";
    s.skipped = {{"iteration", "int"}, {"args", "argparse.Namespace(...)"}};
    s.tensors.push_back(entry("decoder.layers.0.self_attention.linear_qkv.weight", s.path, "data/0", {48, 16}, 64, 1536));
    s.tensors.back().tensor.storage.crc32 = 0xDEADBEEF;
    s.tensors.back().tensor.dtensor = fsdp_layout({96, 16}, 2);
    s.tensors.push_back(entry("decoder.layers.0.self_attention.linear_proj.weight", s.path, "data/1", {16, 16}, 1664, 512));
    s.tensors.back().tensor.dtensor = fsdp_layout({32, 16}, 2);  // the same mesh as the entry before
    s.tensors.push_back(entry("decoder.layers.0.mlp.linear_fc1.weight", "/ckpt/other.distcp", "data/10", {4, 8}, 9, 64));
    s.tensors.back().tensor.stride = {1, 4};  // a transposed view
    s.tensors.back().tensor.storage_offset = 3;
    s.tensors.back().chunk = 1;
    s.tensors.back().tensor.dtensor = fsdp_layout({8, 8}, 3);  // another coordinate
    s.tensors.back().tensor.dtensor->placements[1].kind = Placement::Kind::Partial;
    s.tensors.back().tensor.dtensor->placements[1].reduce_op = "sum";
    s.tensors.push_back(entry("decoder.final_layernorm.weight", s.path, "data/2", {}, 4096, 2));
    s.tensors.back().tensor.dtype = DType::F32;
    s.tensors.push_back(entry("decoder.empty", s.path, "data/3", {0, 5}, 4160, 0));
    return s;
}

void expect_same(const ScannedFile& got, const ScannedFile& want) {
    EXPECT_EQ(got.path, want.path);
    EXPECT_EQ(got.chunks, want.chunks);
    EXPECT_EQ(got.metadata, want.metadata);
    ASSERT_EQ(got.skipped.size(), want.skipped.size());
    for (size_t k = 0; k < want.skipped.size(); ++k) {
        EXPECT_EQ(got.skipped[k].key, want.skipped[k].key);
        EXPECT_EQ(got.skipped[k].kind, want.skipped[k].kind);
    }
    ASSERT_EQ(got.tensors.size(), want.tensors.size());
    for (size_t k = 0; k < want.tensors.size(); ++k) {
        SCOPED_TRACE(want.tensors[k].key);
        const TensorRef& g = got.tensors[k].tensor;
        const TensorRef& w = want.tensors[k].tensor;
        EXPECT_EQ(got.tensors[k].key, want.tensors[k].key);
        EXPECT_EQ(got.tensors[k].chunk, want.tensors[k].chunk);
        EXPECT_EQ(g.dtype, w.dtype);
        EXPECT_EQ(g.shape, w.shape);
        EXPECT_EQ(g.stride, w.stride);
        EXPECT_EQ(g.storage_offset, w.storage_offset);
        EXPECT_EQ(g.storage.file, w.storage.file);
        EXPECT_EQ(g.storage.key, w.storage.key);
        EXPECT_EQ(g.storage.byte_offset, w.storage.byte_offset);
        EXPECT_EQ(g.storage.byte_size, w.storage.byte_size);
        EXPECT_EQ(g.storage.crc32, w.storage.crc32);
        ASSERT_EQ(g.dtensor.has_value(), w.dtensor.has_value());
        if (!w.dtensor) continue;
        EXPECT_EQ(g.dtensor->global_shape, w.dtensor->global_shape);
        EXPECT_EQ(g.dtensor->mesh_shape, w.dtensor->mesh_shape);
        EXPECT_EQ(g.dtensor->mesh_dim_names, w.dtensor->mesh_dim_names);
        EXPECT_EQ(g.dtensor->coordinates, w.dtensor->coordinates);
        ASSERT_EQ(g.dtensor->placements.size(), w.dtensor->placements.size());
        for (size_t p = 0; p < w.dtensor->placements.size(); ++p) {
            EXPECT_EQ(g.dtensor->placements[p].kind, w.dtensor->placements[p].kind);
            EXPECT_EQ(g.dtensor->placements[p].dim, w.dtensor->placements[p].dim);
            EXPECT_EQ(g.dtensor->placements[p].split_factor, w.dtensor->placements[p].split_factor);
            EXPECT_EQ(g.dtensor->placements[p].reduce_op, w.dtensor->placements[p].reduce_op);
        }
    }
}

TEST(ScanSerialization, RoundTripKeepsEveryField) {
    const ScannedFile s = rich_scan();
    expect_same(deserialize_scan(serialize_scan(s)), s);
    ScannedFile empty;
    empty.path = "/ckpt/empty.pt";
    const auto both = deserialize_scans(serialize_scans({s, empty}));
    ASSERT_EQ(both.size(), 2u);
    expect_same(both[0], s);
    expect_same(both[1], empty);
    EXPECT_TRUE(deserialize_scans(serialize_scans({})).empty());
}

// The bytes the format (scan_serialization.cpp) states, worked out by hand for one tensor.
TEST(ScanSerialization, OneTensorEncodesToTheStatedBytes) {
    ScannedFile s;
    s.path = "a";
    s.tensors.push_back(entry("w", "a", "data/0", {2, 3}, 64, 12));
    const std::string record = std::string("\x01" "a"  // path
                                           "\x02"      // chunks 1, zigzag
                                           "\x00"      // metadata ""
                                           "\x00"      // no skipped keys
                                           "\x01"      // one tensor
                                           "\x00\x01" "w"  // key: nothing shared, then "w"
                                           "\x01"      // flags: contiguous
                                           "\x03"      // bfloat16
                                           "\x00"      // chunk 0
                                           "\x02\x04\x06"  // shape [2, 3], zigzag
                                           "\x00\x06" "data/0"  // storage key
                                           "\x40\x0c",  // byte offset 64, size 12
                                           25);
    const std::string want = std::string("VMSC\x01\x01\x19", 7) + record;
    EXPECT_EQ(serialize_scan(s), want);
}

TEST(ScanSerialization, KeysAreStoredAgainstThePreviousOne) {
    ScannedFile s;
    s.path = "p";
    const std::string prefix(40, 'k');
    for (int k = 0; k < 100; ++k) s.tensors.push_back(entry(prefix + std::to_string(k % 10), "p", "data/" + std::to_string(k), {1}, 64 * k, 2));
    // 100 keys of 41 bytes: about 3 bytes each after the first (shared length, length, last char).
    EXPECT_LT(serialize_scan(s).size(), 100u * 16);
    expect_same(deserialize_scan(serialize_scan(s)), s);
}

TEST(ScanSerialization, EveryTruncationIsOneError) {
    const std::string good = serialize_scans({rich_scan(), rich_scan()});
    for (size_t n = 0; n < good.size(); ++n) {
        SCOPED_TRACE(n);
        try {
            (void)deserialize_scans(good.substr(0, n));
            ADD_FAILURE() << "a message cut to " << n << " bytes was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("malformed scan message"), std::string::npos) << e.what();
        }
    }
}

TEST(ScanSerialization, CorruptMessagesAreErrorsNamingTheField) {
    const std::string good = serialize_scan(rich_scan());
    auto message_of = [](const std::string& bytes) {
        try {
            (void)deserialize_scans(bytes);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    std::string bad = good;
    bad[0] = 'X';
    EXPECT_NE(message_of(bad).find("magic"), std::string::npos);
    bad = good;
    bad[4] = 2;
    EXPECT_NE(message_of(bad).find("version 2"), std::string::npos);
    EXPECT_NE(message_of(good + "x").find("left over"), std::string::npos);
    // A file count far beyond what the bytes hold: refused before anything is allocated.
    EXPECT_NE(message_of(std::string("VMSC\x01\xff\xff\xff\xff\x0f", 10)).find("files"), std::string::npos);
    // Ten continuation bytes: a number longer than 64 bits.
    EXPECT_NE(message_of(std::string("VMSC\x01") + std::string(10, '\xff') + "\x01").find("64 bits"), std::string::npos);
    // Every single-byte change is accepted (some fields hold any value) or one Error.
    for (size_t at = 0; at < good.size(); ++at)
        for (unsigned char v : {0x00, 0x7f, 0x80, 0xff}) {
            bad = good;
            bad[at] = static_cast<char>(v);
            const std::string m = message_of(bad);
            if (m != "accepted") {
                EXPECT_NE(m.find("malformed scan message"), std::string::npos) << m;
            }
        }
}

// Found by fuzz_scan_message: a "contiguous" shape whose strides overflow int64 (a 0-sized dim
// keeps the element count at 0) is an Error, not signed overflow in contiguous_strides.
TEST(ScanSerialization, ContiguousStridesBeyond64BitsAreAnError) {
    BinaryWriter record;
    record.bytes("a");
    record.zigzag(1);  // chunks
    record.bytes("");  // metadata
    record.varint(0);  // skipped
    record.varint(1);  // one tensor
    record.varint(0);
    record.bytes("w");
    record.byte(1);    // flags: contiguous
    record.varint(3);  // bfloat16
    record.zigzag(0);
    record.varint(3);  // shape [0, 2^62, 2^62]
    for (int64_t d : {int64_t{0}, int64_t{1} << 62, int64_t{1} << 62}) record.zigzag(d);
    record.varint(0);
    record.bytes("data/0");
    record.varint(64);
    record.varint(0);
    BinaryWriter message;
    for (char c : std::string("VMSC")) message.byte(static_cast<uint8_t>(c));
    message.varint(1);
    message.varint(1);
    message.bytes(record.text());
    try {
        (void)deserialize_scans(message.text());
        ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("contiguous strides beyond 64 bits"), std::string::npos) << e.what();
    }
    // The same tensor from a scan keeps its (explicit) strides through a round trip.
    ScannedFile s;
    s.path = "a";
    s.tensors.push_back(entry("w", "a", "data/0", {1}, 64, 0));
    s.tensors.back().tensor.shape = {0, int64_t{1} << 62, int64_t{1} << 62};
    s.tensors.back().tensor.stride = {1, 1, 1};
    expect_same(deserialize_scan(serialize_scan(s)), s);
}

ScannedFile named(const std::string& path) {
    ScannedFile s;
    s.path = path;
    s.tensors.push_back(entry("w", path, "data/0", {4}, 64, 8));
    return s;
}

TEST(ScanSerialization, GatheredMessagesComeBackInFileOrder) {
    // 5 files over 3 ranks: rank 0 scanned files 0 and 3, rank 1 files 1 and 4, rank 2 file 2.
    std::vector<std::string> messages = {serialize_scans({named("f0"), named("f3")}), serialize_scans({named("f1"), named("f4")}),
                                         serialize_scans({named("f2")})};
    const auto scans = gathered_scans(messages, 5);
    ASSERT_EQ(scans.size(), 5u);
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(scans[k].path, "f" + std::to_string(k));
    for (const auto& m : messages) EXPECT_TRUE(m.empty());  // released once decoded
    std::vector<std::string> short_one = {serialize_scans({named("f0")}), serialize_scans({named("f1")})};
    EXPECT_THROW(gathered_scans(short_one, 3), Error);
}

}  // namespace
}  // namespace vmerge
