#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/input_file.h"
#include "pickle/pickle.h"
#include "zip/zip_archive.h"
#include "test_support.h"

namespace {

using vmerge::testing::reference_crc32;
using vmerge::testing::read_whole_file;

using vmerge::Error;
using vmerge::InputFile;
using vmerge::ZipArchive;

const std::string kFsdp2Rank2 =
    std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w3/model_world_size_3_rank_2.pt";
const std::string kHsdpRank1 =
    std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/hsdp_2x2/model_world_size_4_rank_1.pt";
// A file under the test temp directory, removed when the test is done with it.
struct TempFile {
    TempFile(const std::string& name, const std::string& bytes)
        : path(testing::TempDir() + "vmerge_zip_" + std::to_string(::getpid()) + "_" + name) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    }
    ~TempFile() { std::remove(path.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string path;
};

void put16(std::string& out, uint16_t v) {
    for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put64(std::string& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void overwrite32(std::string& bytes, size_t offset, uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>(v >> (8 * i));
}
void overwrite64(std::string& bytes, size_t offset, uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes[offset + i] = static_cast<char>(v >> (8 * i));
}

struct TestRecord {
    std::string name;
    std::string data;
    uint16_t method = 0;
};

struct ZipLayout {
    bool zip64_end_records = true;     // torch always writes them
    bool zip64_central_extra = false;  // sizes and offset only in the ZIP64 extra
};

// Builds a ZIP the way torch's miniz writer does (no descriptors, no padding needed here).
std::string build_zip(const std::vector<TestRecord>& records, ZipLayout layout = {}) {
    std::string zip;
    std::vector<uint64_t> local_offsets;
    for (const TestRecord& record : records) {
        local_offsets.push_back(zip.size());
        put32(zip, 0x04034b50);
        put16(zip, 0);
        put16(zip, 0x0808);
        put16(zip, record.method);
        put16(zip, 0);
        put16(zip, 0);
        put32(zip, 0);
        put32(zip, 0);
        put32(zip, 0);
        put16(zip, static_cast<uint16_t>(record.name.size()));
        put16(zip, 0);
        zip += record.name;
        zip += record.data;
    }
    const uint64_t cd_offset = zip.size();
    for (size_t i = 0; i < records.size(); ++i) {
        const TestRecord& record = records[i];
        const uint32_t size32 =
            layout.zip64_central_extra ? 0xFFFFFFFF : static_cast<uint32_t>(record.data.size());
        put32(zip, 0x02014b50);
        put16(zip, 0);
        put16(zip, 0);
        put16(zip, 0x0808);
        put16(zip, record.method);
        put16(zip, 0);
        put16(zip, 0);
        put32(zip, reference_crc32(record.data));
        put32(zip, size32);
        put32(zip, size32);
        put16(zip, static_cast<uint16_t>(record.name.size()));
        put16(zip, layout.zip64_central_extra ? 28 : 0);
        put16(zip, 0);
        put16(zip, 0);
        put16(zip, 0);
        put32(zip, 0);
        put32(zip,
              layout.zip64_central_extra ? 0xFFFFFFFF : static_cast<uint32_t>(local_offsets[i]));
        zip += record.name;
        if (layout.zip64_central_extra) {
            put16(zip, 0x0001);
            put16(zip, 24);
            put64(zip, record.data.size());
            put64(zip, record.data.size());
            put64(zip, local_offsets[i]);
        }
    }
    const uint64_t cd_size = zip.size() - cd_offset;
    if (layout.zip64_end_records) {
        const uint64_t zip64_offset = zip.size();
        put32(zip, 0x06064b50);
        put64(zip, 44);
        put16(zip, 0x031E);
        put16(zip, 45);
        put32(zip, 0);
        put32(zip, 0);
        put64(zip, records.size());
        put64(zip, records.size());
        put64(zip, cd_size);
        put64(zip, cd_offset);
        put32(zip, 0x07064b50);
        put32(zip, 0);
        put64(zip, zip64_offset);
        put32(zip, 1);
    }
    put32(zip, 0x06054b50);
    put16(zip, 0);
    put16(zip, 0);
    put16(zip, static_cast<uint16_t>(records.size()));
    put16(zip, static_cast<uint16_t>(records.size()));
    put32(zip, static_cast<uint32_t>(cd_size));
    put32(zip, static_cast<uint32_t>(cd_offset));
    put16(zip, 0);
    return zip;
}

// Opening `bytes` as an archive must fail with an Error that names the file.
void expect_open_fails(const std::string& name, const std::string& bytes,
                       const std::string& message_part = "") {
    const TempFile temp(name, bytes);
    const std::string& path = temp.path;
    const InputFile file(path);
    try {
        ZipArchive::open(file);
        ADD_FAILURE() << name << ": opened without an error";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find(path), std::string::npos) << message;
        EXPECT_NE(message.find(message_part), std::string::npos) << message;
    }
}

// Offsets of the end records in a torch file (no comment): classic EOCD is the last 22 bytes,
// the locator the 20 before it, and the ZIP64 EOCD the 56 before that.
constexpr size_t kEocdFromEnd = 22;
constexpr size_t kLocatorFromEnd = 42;
constexpr size_t kZip64EocdFromEnd = 98;

void expect_torch_layout(const std::string& path, const std::string& prefix) {
    const InputFile file(path);
    const ZipArchive archive = ZipArchive::open(file);
    EXPECT_EQ(archive.prefix(), prefix);
    for (const char* name : {"data.pkl", "byteorder", "data/0", "version", ".format_version"}) {
        EXPECT_NE(archive.find(name), nullptr) << name;
    }
    EXPECT_EQ(archive.find("data/999"), nullptr);
    for (const vmerge::ZipRecord& record : archive.records()) {
        EXPECT_EQ(record.data_offset % 64, 0u) << record.name;
        EXPECT_EQ(record.name.rfind(prefix + "/", 0), 0u) << record.name;
    }
    EXPECT_EQ(archive.records().front().name, prefix + "/data.pkl");
    EXPECT_EQ(archive.read(file, archive.get("byteorder")), "little");
    EXPECT_EQ(archive.read(file, archive.get("version")), "3\n");
    EXPECT_EQ(archive.read(file, archive.get(".storage_alignment")), "64");
    const std::string pickle = archive.read(file, archive.get("data.pkl"));
    EXPECT_EQ(pickle.substr(0, 2), "\x80\x02");
    EXPECT_EQ(pickle.back(), '.');
}

TEST(ZipArchive, RealTorchFsdp2File) {
    expect_torch_layout(kFsdp2Rank2, "model_world_size_3_rank_2");
    const InputFile file(kFsdp2Rank2);
    const ZipArchive archive = ZipArchive::open(file);
    EXPECT_EQ(archive.records().size(), 34u);  // as listed by Python's zipfile
    EXPECT_EQ(archive.get("data/0").size, 4096u);
    EXPECT_EQ(archive.get("data.pkl").size, 9243u);
}

TEST(ZipArchive, RealTorchHsdpFile) {
    expect_torch_layout(kHsdpRank1, "model_world_size_4_rank_1");
}

TEST(ZipArchive, MissingRecordNamesTheFile) {
    const InputFile file(kFsdp2Rank2);
    const ZipArchive archive = ZipArchive::open(file);
    try {
        archive.get("data/999");
        FAIL() << "found a missing record";
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find(kFsdp2Rank2), std::string::npos) << message;
        EXPECT_NE(message.find("data/999"), std::string::npos) << message;
    }
}

TEST(ZipArchive, ArchiveEmbeddedAtNonZeroBase) {
    const std::string real = read_whole_file(kFsdp2Rank2);
    const TempFile temp("embedded.bin", std::string(100, 'j') + real + std::string(50, 'k'));
    const InputFile file(temp.path);
    const InputFile original_file(kFsdp2Rank2);
    const ZipArchive original = ZipArchive::open(original_file);
    const ZipArchive embedded = ZipArchive::open(file, 100, real.size());
    EXPECT_EQ(embedded.prefix(), "model_world_size_3_rank_2");
    ASSERT_EQ(embedded.records().size(), original.records().size());
    for (size_t i = 0; i < original.records().size(); ++i) {
        EXPECT_EQ(embedded.records()[i].name, original.records()[i].name);
        EXPECT_EQ(embedded.records()[i].data_offset, original.records()[i].data_offset + 100);
        EXPECT_EQ(embedded.records()[i].size, original.records()[i].size);
    }
    EXPECT_EQ(embedded.read(file, embedded.get("byteorder")), "little");
    EXPECT_EQ(embedded.read(file, embedded.get("data/3")),
              original.read(original_file, original.get("data/3")));

    // Without a length the end records are still found by scanning back over the junk.
    EXPECT_EQ(ZipArchive::open(file, 100).get("data/3").data_offset,
              embedded.get("data/3").data_offset);
    EXPECT_THROW(ZipArchive::open(file, file.size() + 1), Error);
    EXPECT_THROW(ZipArchive::open(file, 100, file.size()), Error);
}

// Every tensor item of a real DCP file is a whole torch.save archive at an offset that
// .metadata gives: the same reader must open each one in place.
TEST(ZipArchive, RealDcpItemsAtTheirOffsets) {
    namespace pk = vmerge::pickle;
    const std::string dcp = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w2_dcp";
    const pk::ValuePtr metadata = pk::load(read_whole_file(dcp + "/.metadata"), ".metadata");
    const pk::Value* storage_data = pk::dict_get(*metadata->state, "storage_data");
    ASSERT_NE(storage_data, nullptr);
    const InputFile file(dcp + "/__0_0.distcp");
    size_t opened = 0;
    size_t at_non_zero_offset = 0;
    for (const auto& [index, info] : storage_data->entries) {
        const pk::Value& fields = *info->state;
        if (pk::dict_get(fields, "relative_path")->text != "__0_0.distcp") continue;
        const auto offset = static_cast<uint64_t>(pk::dict_get(fields, "offset")->integer);
        const auto length = static_cast<uint64_t>(pk::dict_get(fields, "length")->integer);
        const ZipArchive item = ZipArchive::open(file, offset, length);
        EXPECT_EQ(item.prefix(), "archive");
        for (const vmerge::ZipRecord& record : item.records()) {
            EXPECT_EQ((record.data_offset - offset) % 64, 0u) << record.name;
            EXPECT_LE(record.data_offset + record.size, offset + length) << record.name;
        }
        EXPECT_EQ(item.read(file, item.get("byteorder")), "little");
        EXPECT_NO_THROW(pk::load(item.read(file, item.get("data.pkl")), "item"));
        ++opened;
        if (offset != 0) ++at_non_zero_offset;
    }
    EXPECT_GT(opened, 10u);
    EXPECT_EQ(at_non_zero_offset, opened - 1);
}

TEST(ZipArchive, TruncatedFilesFail) {
    const std::string real = read_whole_file(kFsdp2Rank2);
    std::vector<size_t> cuts = {0, 1, 21, 22, 100, real.size() / 2, real.size() - 200};
    for (size_t cut = real.size() - 120; cut < real.size(); ++cut) cuts.push_back(cut);
    for (size_t cut = 0; cut < real.size(); cut += 1009) cuts.push_back(cut);
    for (const size_t cut : cuts) {
        expect_open_fails("truncated_" + std::to_string(cut), real.substr(0, cut));
    }
}

TEST(ZipArchive, CorruptedEndRecordsFail) {
    const std::string real = read_whole_file(kFsdp2Rank2);
    const size_t zip64 = real.size() - kZip64EocdFromEnd;

    std::string bytes = real;
    overwrite64(bytes, zip64 + 48, real.size() + 1000);
    expect_open_fails("cd_offset_past_end", bytes, "central directory");

    bytes = real;
    overwrite64(bytes, zip64 + 48, UINT64_MAX - 10);
    expect_open_fails("cd_offset_wraps", bytes, "central directory");

    bytes = real;
    overwrite64(bytes, zip64 + 40, UINT64_MAX);
    expect_open_fails("cd_size_huge", bytes, "central directory");

    bytes = real;
    overwrite64(bytes, zip64 + 32, uint64_t{1} << 40);
    expect_open_fails("absurd_entry_count", bytes, "entries");

    bytes = real;
    overwrite64(bytes, real.size() - kLocatorFromEnd + 8, real.size() + 5);
    expect_open_fails("locator_past_end", bytes, "ZIP64");

    bytes = real;
    overwrite64(bytes, real.size() - kLocatorFromEnd + 8, 0);
    expect_open_fails("locator_to_wrong_record", bytes, "ZIP64");

    bytes = real;
    bytes[real.size() - kEocdFromEnd] = 'X';
    expect_open_fails("no_eocd_signature", bytes, "end-of-central-directory");
}

TEST(ZipArchive, CorruptedCentralDirectoryFails) {
    const std::string real = read_whole_file(kFsdp2Rank2);
    // Entry #0 (data.pkl) starts the central directory; the last entry is the last signature.
    size_t first_entry = 0;
    for (int i = 7; i >= 0; --i) {
        first_entry = (first_entry << 8) |
                      static_cast<uint8_t>(real[real.size() - kZip64EocdFromEnd + 48 + i]);
    }
    ASSERT_EQ(real.substr(first_entry, 4), "PK\x01\x02");
    const size_t last_entry = real.rfind("PK\x01\x02");

    std::string bytes = real;
    bytes[last_entry + 28] = '\xff';
    bytes[last_entry + 29] = '\xff';
    expect_open_fails("name_past_cd", bytes, "central directory");

    bytes = real;
    overwrite32(bytes, first_entry + 42, static_cast<uint32_t>(real.size() - 10));
    expect_open_fails("local_header_past_end", bytes, "data.pkl");

    bytes = real;
    overwrite32(bytes, first_entry + 42, 1);
    expect_open_fails("local_header_misplaced", bytes, "local header");

    bytes = real;
    overwrite32(bytes, first_entry + 20, 0x7FFFFFF0);
    overwrite32(bytes, first_entry + 24, 0x7FFFFFF0);
    expect_open_fails("data_past_end", bytes, "data.pkl");

    bytes = real;
    overwrite32(bytes, first_entry + 20, 5);
    expect_open_fails("sizes_disagree", bytes, "size");

    bytes = real;
    bytes[first_entry + 1] = 'X';
    expect_open_fails("no_central_signature", bytes, "signature");
}

TEST(ZipArchive, BuiltArchiveWithZip64ExtraAndEmptyRecord) {
    const std::vector<TestRecord> records = {{"archive/data.pkl", "\x80\x02}.", 0},
                                             {"archive/data/0", "", 0},
                                             {"archive/byteorder", "little", 0}};
    for (const bool zip64_extra : {false, true}) {
        const TempFile temp(zip64_extra ? "built_zip64.zip" : "built.zip",
                            build_zip(records, {true, zip64_extra}));
        const InputFile file(temp.path);
        const ZipArchive archive = ZipArchive::open(file);
        EXPECT_EQ(archive.prefix(), "archive");
        ASSERT_EQ(archive.records().size(), 3u);
        EXPECT_EQ(archive.read(file, archive.get("data.pkl")), "\x80\x02}.");
        EXPECT_EQ(archive.get("data/0").size, 0u);
        EXPECT_EQ(archive.read(file, archive.get("data/0")), "");
        EXPECT_EQ(archive.read(file, archive.get("byteorder")), "little");
    }
}

TEST(ZipArchive, ClassicEndRecordWithoutZip64IsRead) {
    const TempFile temp("classic.zip", build_zip({{"x/data.pkl", "abc", 0}}, {false, false}));
    const InputFile file(temp.path);
    const ZipArchive archive = ZipArchive::open(file);
    EXPECT_EQ(archive.prefix(), "x");
    EXPECT_EQ(archive.read(file, archive.get("data.pkl")), "abc");
}

TEST(ZipArchive, DeflatedRecordFails) {
    const std::string zip =
        build_zip({{"archive/data.pkl", "\x80\x02}.", 0}, {"archive/data/0", "\x63\x00", 8}});
    expect_open_fails("deflated.zip", zip, "'archive/data/0' is compressed");
}

TEST(ZipArchive, FirstRecordWithoutSlashFails) {
    expect_open_fails("no_prefix.zip", build_zip({{"data.pkl", "\x80\x02}.", 0}}), "data.pkl");
}

TEST(ZipArchive, DuplicateRecordFails) {
    expect_open_fails(
        "duplicate.zip",
        build_zip({{"a/data.pkl", "1", 0}, {"a/data/0", "2", 0}, {"a/data/0", "3", 0}}), "twice");
}

TEST(ZipArchive, EntryCountBeyondCentralDirectoryFails) {
    std::string zip = build_zip({{"a/data.pkl", "1", 0}});
    const size_t zip64 = zip.size() - kZip64EocdFromEnd;
    overwrite64(zip, zip64 + 24, 2);
    overwrite64(zip, zip64 + 32, 2);
    expect_open_fails("too_many_entries.zip", zip, "entries");
}

// Offsets of one record's fields in an archive build_zip made: local header at `local`.
constexpr size_t kLocalCrc = 14, kLocalCompressed = 18, kLocalSize = 22, kLocalMethod = 8;

TEST(ZipArchive, RecordCrcIsCheckedWhenRead) {
    std::string zip = build_zip({{"a/data.pkl", "pickle bytes", 0}, {"a/byteorder", "little", 0}});
    const size_t data = zip.find("little");
    zip[data + 2] = 'T';  // "liTtle": same size, other bytes
    const TempFile temp("flipped.zip", zip);
    const InputFile file(temp.path);
    const ZipArchive archive = ZipArchive::open(file);  // the central directory is fine
    EXPECT_EQ(archive.get("byteorder").crc32, reference_crc32("little"));
    EXPECT_EQ(archive.read(file, archive.get("data.pkl")), "pickle bytes");
    try {
        archive.read(file, archive.get("byteorder"));
        FAIL() << "read a damaged record";
    } catch (const Error& error) {
        const std::string message = error.what();
        char expected[11], computed[11];
        std::snprintf(expected, sizeof expected, "0x%08x", reference_crc32("little"));
        std::snprintf(computed, sizeof computed, "0x%08x", reference_crc32("liTtle"));
        EXPECT_NE(message.find(temp.path), std::string::npos) << message;
        EXPECT_NE(message.find("ZIP record 'byteorder'"), std::string::npos) << message;
        EXPECT_NE(message.find(std::string("is ") + computed), std::string::npos) << message;
        EXPECT_NE(message.find(std::string("says ") + expected), std::string::npos) << message;
    }
}

TEST(ZipArchive, TwoEntriesOnOneLocalHeaderFail) {
    std::string zip = build_zip({{"a/data.pkl", "1234", 0}, {"a/data/0", "5678", 0}});
    const size_t second_entry = zip.rfind("PK\x01\x02");
    overwrite32(zip, second_entry + 42, 0);  // entry #1 now points at entry #0's local header
    const uint64_t span_end = 30 + std::string("a/data.pkl").size() + 4;
    expect_open_fails("shared_local.zip", zip,
                      "byte 0 of " + std::to_string(zip.size()) + ": record 'a/data/0' (bytes 0.." +
                          std::to_string(span_end) + ") overlaps record 'a/data.pkl' (bytes 0.." +
                          std::to_string(span_end) + ")");
}

TEST(ZipArchive, DataRunningIntoTheNextRecordFails) {
    std::string zip = build_zip({{"a/data.pkl", "1234", 0}, {"a/data/0", "5678", 0}});
    const size_t first_entry = zip.find("PK\x01\x02");
    overwrite32(zip, first_entry + 20, 10);  // 6 bytes into the next local header
    overwrite32(zip, first_entry + 24, 10);
    const uint64_t next = 30 + 10 + 4;
    expect_open_fails("data_into_next.zip", zip,
                      "byte " + std::to_string(next) + " of " + std::to_string(zip.size()) + ": record 'a/data/0' (bytes " +
                          std::to_string(next) + ".." + std::to_string(next + 30 + 8 + 4) +
                          ") overlaps record 'a/data.pkl' (bytes 0.." + std::to_string(next + 6) + ")");
}

TEST(ZipArchive, RecordOverlappingTheCentralDirectoryFails) {
    std::string zip = build_zip({{"a/data.pkl", "1234", 0}});
    const size_t entry = zip.find("PK\x01\x02");
    overwrite32(zip, entry + 20, 8);
    overwrite32(zip, entry + 24, 8);
    expect_open_fails("into_cd.zip", zip, "record 'a/data.pkl' (bytes 0.." + std::to_string(entry + 4) +
                                              ") overlaps the central directory (bytes " + std::to_string(entry));
}

TEST(ZipArchive, LocalHeaderThatDisagreesFails) {
    const std::string good = build_zip({{"a/data.pkl", "1234", 0}, {"a/data/0", "5678", 0}});
    const size_t second = good.find("PK\x03\x04", 1);

    std::string zip = good;
    zip[second + 30 + 7] = '9';  // local name "a/data/9"
    expect_open_fails("local_name.zip", zip,
                      "byte " + std::to_string(second) + " of " + std::to_string(zip.size()) +
                          ": local header of record 'a/data/0' says name 'a/data/9', the central directory 'a/data/0'");

    zip = good;
    zip[second + kLocalMethod] = 8;
    expect_open_fails("local_method.zip", zip, "local header of record 'a/data/0' says method 8, the central directory 0");

    // Without the data-descriptor flag the local sizes and CRC must be the central ones.
    zip = good;
    zip[second + 6] = 0;
    expect_open_fails("local_no_descriptor.zip", zip, "local header of record 'a/data/0' says CRC-32 0x00000000");

    // With the flag, zero local fields are fine, and non-zero ones must still agree.
    zip = good;
    overwrite32(zip, second + kLocalCrc, reference_crc32("5678"));
    overwrite32(zip, second + kLocalCompressed, 4);
    overwrite32(zip, second + kLocalSize, 4);
    {
        const TempFile temp("local_filled.zip", zip);
        const InputFile file(temp.path);
        EXPECT_EQ(ZipArchive::open(file).read(file, ZipArchive::open(file).get("data/0")), "5678");
    }
    overwrite32(zip, second + kLocalSize, 5);
    overwrite32(zip, second + kLocalCompressed, 5);
    expect_open_fails("local_size.zip", zip, "local header of record 'a/data/0' says compressed size 5, the central directory 4");
}

TEST(ZipSpans, DisjointSpansPassAndTheFirstOverlapIsNamed) {
    std::vector<std::pair<uint64_t, std::string>> failures;
    const auto fail = [&](uint64_t offset, const std::string& what) {
        failures.emplace_back(offset, what);
        throw Error(what);
    };
    const vmerge::ZipSpan directory{"central directory", 100, 150};
    EXPECT_NO_THROW(vmerge::check_zip_spans_disjoint({{"b", 50, 100}, {"a", 0, 50}}, directory, fail));
    EXPECT_THROW(vmerge::check_zip_spans_disjoint({{"a", 0, 50}, {"b", 49, 60}}, directory, fail), Error);
    ASSERT_EQ(failures.size(), 1u);
    EXPECT_EQ(failures[0].first, 49u);
    EXPECT_EQ(failures[0].second, "record 'b' (bytes 49..60) overlaps record 'a' (bytes 0..50)");
    EXPECT_THROW(vmerge::check_zip_spans_disjoint({{"a", 0, 101}}, directory, fail), Error);
    EXPECT_EQ(failures.back().second, "record 'a' (bytes 0..101) overlaps the central directory (bytes 100..150)");
    EXPECT_THROW(vmerge::check_zip_spans_disjoint({{"a", 0, 10}, {"z", 120, 130}}, directory, fail), Error);
}

}  // namespace
