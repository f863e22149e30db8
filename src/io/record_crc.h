#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// CRC-32 as ZIP stores it, of `size` bytes, continuing `crc` (libdeflate_crc32).
uint32_t crc32_of(const void* data, uint64_t size, uint32_t crc = 0);
// The CRC-32 of A followed by B, from crc(A), crc(B) and B's length (zlib's crc32_combine).
uint32_t crc32_concat(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);
std::string hex32(uint32_t value);

// The error a record whose bytes do not match its central directory CRC gets (`record` is its
// name inside the archive prefix, "data.pkl" or "data/3", as StorageRef::key), one text for
// every pass that checks one (the scan, the copy, the completion on rank 0).
[[noreturn]] void fail_record_crc(const std::string& file, const std::string& record, uint64_t data_offset,
                                  uint64_t size, uint32_t expected, uint32_t computed, const std::string& pass);

// A byte range [begin, begin + length) of one record (offsets relative to the record's first
// byte) and the CRC-32 of its bytes.
struct CrcPiece {
    uint64_t begin = 0;
    uint64_t length = 0;
    uint32_t crc = 0;
};

// Collects, in the pass that reads them, the CRC-32 of the record bytes a rank reads (whole
// records, or parts of them split over row blocks) and checks each record against its central
// directory CRC as soon as its bytes are all read. Bytes read twice are hashed once. Records
// read only in part are handed on (partial_records) for the ranks' pieces to be joined.
class RecordCrcLedger {
public:
    // `data` holds bytes [begin, begin + length) of `storage`'s record; nothing to do for a
    // storage without a CRC (not a ZIP record). Throws Error on a mismatch.
    void add(const StorageRef& storage, uint64_t begin, const unsigned char* data, uint64_t length);
    // The same for bytes read from one run of the record into `count` places in memory, in order.
    void add_pieces(const StorageRef& storage, uint64_t begin, const iovec* pieces, size_t count);

    // From now on a mismatch is kept (mismatch()) instead of thrown, so that a merge can end its
    // copy on every rank and fail together, before the commit.
    void defer_mismatches() { defer_ = true; }
    // The error text of the first mismatch found while deferring; empty when none.
    const std::string& mismatch() const { return mismatch_; }

    // The records read in part, with their pieces (what the driver all-gathers).
    std::string partial_records() const;
    uint64_t records_checked() const { return records_checked_; }
    uint64_t bytes_checked() const { return bytes_checked_; }

private:
    struct Record {
        StorageRef storage;
        std::map<uint64_t, CrcPiece> pieces;  // by begin; disjoint, adjacent pieces joined
        bool checked = false;
    };
    void insert(Record& record, CrcPiece piece);

    std::map<std::pair<std::string, uint64_t>, Record> records_;  // by (file, data offset)
    uint64_t records_checked_ = 0;
    uint64_t bytes_checked_ = 0;
    bool defer_ = false;
    std::string mismatch_;
};

// What the join of every rank's partial records found.
struct CrcCompletion {
    uint64_t records_checked = 0;    // records whose pieces (plus bytes read here) covered them
    uint64_t bytes_read_here = 0;    // bytes no rank had read, read to complete a record
    uint64_t records_unchecked = 0;  // records left in part (the gap budget ran out)
    uint64_t bytes_unchecked = 0;    // their bytes that no CRC covers
};

// Joins the partial records of every rank (RecordCrcLedger::partial_records texts): pieces of
// one record from different ranks are chained in offset order; bytes no piece covers (a
// Megatron vocab padding row nobody copies, a piece overlapping another) are read here while
// they total at most `gap_budget` bytes. Throws Error on a mismatch.
inline constexpr uint64_t kCrcGapBudget = uint64_t{256} << 20;
CrcCompletion complete_record_crcs(const std::vector<std::string>& partials, uint64_t gap_budget);

// One line for the merge summary about what `completion` left unchecked; empty when nothing.
std::string crc_completion_note(const CrcCompletion& completion);

}  // namespace vmerge
