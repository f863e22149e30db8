#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/input_file.h"

namespace vmerge {

struct ZipRecord {
    std::string name;        // full name as in the central directory, e.g. "model/data/0"
    uint64_t data_offset;    // absolute offset of the record's bytes in the file
    uint64_t size;           // uncompressed (= stored) size
    uint32_t crc32 = 0;      // CRC-32 of the bytes, from the central directory
};

// Bytes [begin, end) of an archive that one record (local header, name, extra, data) or the
// central directory occupies.
struct ZipSpan {
    std::string name;
    uint64_t begin;
    uint64_t end;
};

// Records must not share bytes with each other nor with the central directory: a reader of
// one record would otherwise read (or write over) another. Calls `fail(offset, what)` (which
// throws) for the first overlap, naming both.
void check_zip_spans_disjoint(std::vector<ZipSpan> spans, const ZipSpan& directory,
                              const std::function<void(uint64_t, const std::string&)>& fail);

// The ZIP container torch.save writes (docs/reference/torch-formats.md §1): central directory,
// ZIP64, stored records only. It may start at `base` inside a larger file (a DCP item) and span
// `length` bytes; offsets in the archive are relative to `base`.
class ZipArchive {
public:
    // Parses the central directory of the archive in [base, base+length) of `file`
    // (length 0 = to the end of the file). Throws Error naming the file and offset.
    static ZipArchive open(const InputFile& file, uint64_t base = 0, uint64_t length = 0);

    // The archive prefix: entry #0's name up to its first '/'.
    const std::string& prefix() const { return prefix_; }
    const std::vector<ZipRecord>& records() const { return records_; }
    // Looks a record up by its name without the prefix ("data.pkl", "data/0");
    // nullptr when absent.
    const ZipRecord* find(const std::string& name_without_prefix) const;
    // Same, but a missing record is an Error naming the file.
    const ZipRecord& get(const std::string& name_without_prefix) const;
    // Reads a whole record (for data.pkl and small records) and checks its CRC-32.
    std::string read(const InputFile& file, const ZipRecord& record) const;

private:
    // "data/0" for "<prefix>/data/0"; a name outside the prefix as it is.
    std::string name_without_prefix(const std::string& name) const;

    std::string path_;
    std::string prefix_;
    std::vector<ZipRecord> records_;
    std::map<std::string, size_t> by_name_;
};

}  // namespace vmerge
