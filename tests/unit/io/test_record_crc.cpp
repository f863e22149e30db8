// Unit tests for src/io/record_crc.h: CRC-32 helpers, the per-rank ledger of pieces
// read, and the join of every rank's pieces (with gap reads) on rank 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/record_crc.h"
#include "test_support.h"

namespace vmerge {
namespace {

using vmerge::testing::reference_crc32;

std::string hex(uint32_t v) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", v);
    return text;
}

const unsigned char* bytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }

// A record of `data` at byte 100 of `file`, whose central directory CRC is `crc`.
StorageRef record_of(const std::string& data, const std::string& file = "/ckpt/rank0.pt",
                     std::optional<uint32_t> crc = std::nullopt) {
    return {file, "archive/data/0", 100, data.size(), crc ? crc : reference_crc32(data)};
}

const std::string kData = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox.";

TEST(Crc32, MatchesTheStandardCheckValueAndCombines) {
    EXPECT_EQ(crc32_of("123456789", 9), 0xCBF43926u);  // the CRC-32 check value
    EXPECT_EQ(crc32_of(kData.data(), kData.size()), reference_crc32(kData));
    for (size_t cut : {size_t{0}, size_t{1}, size_t{17}, kData.size()}) {
        const std::string a = kData.substr(0, cut), b = kData.substr(cut);
        EXPECT_EQ(crc32_concat(reference_crc32(a), reference_crc32(b), b.size()), reference_crc32(kData)) << cut;
        EXPECT_EQ(crc32_of(b.data(), b.size(), reference_crc32(a)), reference_crc32(kData)) << cut;
    }
    EXPECT_EQ(hex32(0xCBF43926u), "0xcbf43926");
}

// A run of the record read into places apart in memory (rows of a tensor-parallel shard),
// overlapping a piece read before: checked, and a flipped byte in one place is caught.
TEST(RecordCrcLedger, RecordReadIntoScatteredPlacesIsChecked) {
    const StorageRef s = record_of(kData);
    std::string places(kData.size() + 40, '#');
    std::vector<iovec> pieces;
    for (size_t at = 0, k = 0; at < kData.size(); at += 9, ++k) {
        const size_t n = std::min<size_t>(9, kData.size() - at);
        places.replace(at + 4 * k, n, kData.substr(at, n));
        pieces.push_back({places.data() + at + 4 * k, n});
    }
    RecordCrcLedger ledger;
    ledger.add(s, 0, bytes(kData), 12);
    ledger.add_pieces(s, 0, pieces.data(), pieces.size());
    EXPECT_EQ(ledger.records_checked(), 1u);
    EXPECT_EQ(ledger.bytes_checked(), kData.size());
    static_cast<char*>(pieces[3].iov_base)[2] ^= 1;
    RecordCrcLedger flipped;
    EXPECT_THROW(flipped.add_pieces(s, 0, pieces.data(), pieces.size()), Error);
}

TEST(RecordCrcLedger, RecordReadInPiecesOutOfOrderIsChecked) {
    RecordCrcLedger ledger;
    const StorageRef s = record_of(kData);
    ledger.add(s, 40, bytes(kData) + 40, kData.size() - 40);
    ledger.add(s, 0, bytes(kData), 10);
    EXPECT_EQ(ledger.records_checked(), 0u);
    EXPECT_NE(ledger.partial_records(), "[]");
    // Overlaps both pieces: only bytes 10..40 are new.
    ledger.add(s, 5, bytes(kData) + 5, 40);
    EXPECT_EQ(ledger.records_checked(), 1u);
    EXPECT_EQ(ledger.bytes_checked(), kData.size());
    EXPECT_EQ(ledger.partial_records(), "[]");
    // Read again after it was checked: nothing more to do.
    ledger.add(s, 0, bytes(kData), kData.size());
    EXPECT_EQ(ledger.records_checked(), 1u);
}

TEST(RecordCrcLedger, FlippedByteIsAnErrorNamingRecordAndBothCrcs) {
    std::string damaged = kData;
    damaged[33] ^= 0x01;
    RecordCrcLedger ledger;
    const StorageRef s = record_of(kData);  // the central directory has the good CRC
    ledger.add(s, 0, bytes(damaged), 30);
    try {
        ledger.add(s, 30, bytes(damaged) + 30, damaged.size() - 30);
        FAIL() << "a damaged record passed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("/ckpt/rank0.pt: ZIP record 'archive/data/0' (" + std::to_string(kData.size()) +
                         " bytes at byte 100)"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("is " + hex(reference_crc32(damaged))), std::string::npos) << m;
        EXPECT_NE(m.find("says " + hex(reference_crc32(kData))), std::string::npos) << m;
    }
}

TEST(RecordCrcLedger, DeferredMismatchIsKeptNotThrown) {
    std::string damaged = kData;
    damaged[0] ^= 0x02;
    RecordCrcLedger ledger;
    ledger.defer_mismatches();
    EXPECT_EQ(ledger.mismatch(), "");
    EXPECT_NO_THROW(ledger.add(record_of(kData), 0, bytes(damaged), damaged.size()));
    EXPECT_NE(ledger.mismatch().find("is " + hex(reference_crc32(damaged)) + " but the central directory says " +
                                     hex(reference_crc32(kData))),
              std::string::npos)
        << ledger.mismatch();
    EXPECT_EQ(ledger.partial_records(), "[]");  // the record is done with, not handed on
    EXPECT_EQ(ledger.records_checked(), 0u);
}

TEST(RecordCrcLedger, StorageWithoutCrcAndReadsOutsideTheRecord) {
    RecordCrcLedger ledger;
    StorageRef s = record_of(kData);
    s.crc32.reset();
    ledger.add(s, 0, bytes(kData), kData.size());
    EXPECT_EQ(ledger.records_checked(), 0u);
    EXPECT_EQ(ledger.partial_records(), "[]");
    EXPECT_THROW(ledger.add(record_of(kData), 1, bytes(kData), kData.size()), Error);
}

// A file holding kData (or `data`) at byte 100, for gap reads.
struct RecordFile {
    explicit RecordFile(const std::string& data)
        : path(::testing::TempDir() + "vmerge_crc_" + std::to_string(::getpid()) + ".bin") {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(100, 'x') << data << "tail";
    }
    ~RecordFile() { std::remove(path.c_str()); }
    const std::string path;
};

TEST(CompleteRecordCrcs, PiecesOfTwoRanksJoin) {
    const StorageRef s = record_of(kData, "/ckpt/not-read.pt");
    RecordCrcLedger rank0, rank1;
    rank0.add(s, 0, bytes(kData), 20);
    rank1.add(s, 20, bytes(kData) + 20, kData.size() - 20);
    const CrcCompletion c = complete_record_crcs({rank0.partial_records(), rank1.partial_records()}, 0);
    EXPECT_EQ(c.records_checked, 1u);
    EXPECT_EQ(c.bytes_read_here, 0u);
    EXPECT_EQ(c.records_unchecked, 0u);
    EXPECT_EQ(crc_completion_note(c), "");

    // The same pieces, but rank 1 read a damaged byte.
    std::string damaged = kData;
    damaged[50] ^= 0x40;
    RecordCrcLedger bad1;
    bad1.add(s, 20, bytes(damaged) + 20, kData.size() - 20);
    try {
        complete_record_crcs({rank0.partial_records(), bad1.partial_records()}, 0);
        FAIL() << "a damaged piece passed";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("is " + hex(reference_crc32(damaged))), std::string::npos) << m;
        EXPECT_NE(m.find("says " + hex(reference_crc32(kData))), std::string::npos) << m;
    }
}

TEST(CompleteRecordCrcs, GapsAndOverlapsAreReadFromTheFileWithinTheBudget) {
    const RecordFile file(kData);
    const StorageRef s = record_of(kData, file.path);
    RecordCrcLedger rank0, rank1;
    rank0.add(s, 0, bytes(kData), 20);
    rank1.add(s, 10, bytes(kData) + 10, 30);  // overlaps rank 0's piece: unusable, read again
    rank1.add(s, 50, bytes(kData) + 50, 10);  // then a gap 60..end
    const std::vector<std::string> partials = {rank0.partial_records(), rank1.partial_records()};
    const uint64_t gap = (50 - 20) + (kData.size() - 60);
    const CrcCompletion c = complete_record_crcs(partials, gap);
    EXPECT_EQ(c.records_checked, 1u);
    EXPECT_EQ(c.bytes_read_here, gap);

    const CrcCompletion short_budget = complete_record_crcs(partials, gap - 1);
    EXPECT_EQ(short_budget.records_checked, 0u);
    EXPECT_EQ(short_budget.records_unchecked, 1u);
    EXPECT_EQ(short_budget.bytes_unchecked, kData.size());
    EXPECT_EQ(crc_completion_note(short_budget),
              std::to_string(kData.size()) + " bytes of 1 ZIP records were copied in part and not CRC-checked "
                                             "(their unread bytes exceed the CRC completion budget)");
}

TEST(CompleteRecordCrcs, DamageInABytesNoRankReadIsFound) {
    std::string damaged = kData;
    damaged[kData.size() - 3] ^= 0x10;
    const RecordFile file(damaged);
    const StorageRef s = record_of(kData, file.path);
    RecordCrcLedger rank0;
    rank0.add(s, 0, bytes(kData), 40);
    EXPECT_THROW(complete_record_crcs({rank0.partial_records()}, 1 << 20), Error);
}

}  // namespace
}  // namespace vmerge
