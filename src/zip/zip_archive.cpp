#include "zip/zip_archive.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "core/error.h"
#include "io/record_crc.h"

namespace vmerge {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndOfCentralDirSignature = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDirSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;

constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndOfCentralDirSize = 22;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EndOfCentralDirSize = 56;
constexpr uint64_t kMaxCommentSize = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kZip64Marker = 0xFFFFFFFF;
constexpr uint16_t kMethodStored = 0;

// A central directory this large would describe millions of records; refusing it keeps a
// lying size field in a huge file from turning into a huge allocation.
constexpr uint64_t kMaxCentralDirSize = uint64_t{1} << 30;
constexpr uint64_t kMaxReadSize = uint64_t{1} << 30;

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

uint32_t le32(const unsigned char* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t le64(const unsigned char* p) {
    return static_cast<uint64_t>(le32(p)) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// Reads the archive of one file; every offset it is given is relative to the archive start.
class ArchiveReader {
public:
    ArchiveReader(const InputFile& file, uint64_t base, uint64_t length)
        : file_(file), base_(base), length_(length) {}

    [[noreturn]] void fail(uint64_t offset, const std::string& what) const {
        std::string where = file_.path() + ": ZIP archive";
        if (base_ != 0) where += " at offset " + std::to_string(base_);
        throw Error(where + ", byte " + std::to_string(offset) + " of " + std::to_string(length_) +
                    ": " + what);
    }

    bool contains(uint64_t offset, uint64_t size) const {
        return offset <= length_ && size <= length_ - offset;
    }

    std::string read(uint64_t offset, uint64_t size, const std::string& what) const {
        if (!contains(offset, size)) {
            fail(offset, what + " (" + std::to_string(size) + " bytes) ends past the archive end");
        }
        std::string bytes(size, '\0');
        file_.read_exact(base_ + offset, bytes.data(), size, what.c_str());
        return bytes;
    }

    uint64_t length() const { return length_; }

private:
    const InputFile& file_;
    uint64_t base_;
    uint64_t length_;
};

const unsigned char* bytes_of(const std::string& s) {
    return reinterpret_cast<const unsigned char*>(s.data());
}

struct CentralDirLocation {
    uint64_t offset;
    uint64_t size;
    uint64_t entries;
    uint64_t end_limit;  // the central directory must end here (where the EOCD records start)
};

CentralDirLocation locate_central_dir(const ArchiveReader& archive) {
    if (archive.length() < kEndOfCentralDirSize) {
        archive.fail(0, "too short for a ZIP end-of-central-directory record");
    }
    const uint64_t tail_size = std::min(archive.length(), kEndOfCentralDirSize + kMaxCommentSize);
    const uint64_t tail_start = archive.length() - tail_size;
    const std::string tail = archive.read(tail_start, tail_size, "ZIP archive tail");
    const unsigned char* t = bytes_of(tail);

    // Scan back: the last signature whose comment fits in the tail is the real record.
    uint64_t eocd = tail_size;
    for (uint64_t pos = tail_size - kEndOfCentralDirSize + 1; pos-- > 0;) {
        if (le32(t + pos) == kEndOfCentralDirSignature &&
            pos + kEndOfCentralDirSize + le16(t + pos + 20) <= tail_size) {
            eocd = pos;
            break;
        }
    }
    if (eocd == tail_size) {
        archive.fail(tail_start, "no end-of-central-directory record in the last " +
                                     std::to_string(tail_size) + " bytes (a truncated file, or not a ZIP file)");
    }
    const uint64_t eocd_offset = tail_start + eocd;
    const unsigned char* e = t + eocd;
    CentralDirLocation location{le32(e + 16), le32(e + 12), le16(e + 10), eocd_offset};

    // torch always writes a ZIP64 locator right before the classic record; when present its
    // values replace the clamped 16/32-bit ones.
    if (eocd_offset >= kZip64LocatorSize) {
        const std::string locator =
            archive.read(eocd_offset - kZip64LocatorSize, kZip64LocatorSize, "ZIP64 locator");
        if (le32(bytes_of(locator)) == kZip64LocatorSignature) {
            const uint64_t zip64_offset = le64(bytes_of(locator) + 8);
            const uint64_t zip64_limit = eocd_offset - kZip64LocatorSize;
            if (zip64_offset > zip64_limit ||
                kZip64EndOfCentralDirSize > zip64_limit - zip64_offset) {
                archive.fail(eocd_offset - kZip64LocatorSize,
                             "ZIP64 locator points to offset " + std::to_string(zip64_offset) +
                                 ", outside the archive before the locator");
            }
            const std::string record = archive.read(zip64_offset, kZip64EndOfCentralDirSize,
                                                    "ZIP64 end-of-central-directory record");
            const unsigned char* z = bytes_of(record);
            if (le32(z) != kZip64EndOfCentralDirSignature) {
                archive.fail(zip64_offset,
                             "no ZIP64 end-of-central-directory signature where "
                             "the ZIP64 locator points");
            }
            location = {le64(z + 48), le64(z + 40), le64(z + 32), zip64_offset};
        }
    }

    if (location.offset > location.end_limit ||
        location.size > location.end_limit - location.offset) {
        archive.fail(location.end_limit,
                     "central directory (offset " + std::to_string(location.offset) + ", " +
                         std::to_string(location.size) +
                         " bytes) does not end before the end-of-central-directory records");
    }
    if (location.size > kMaxCentralDirSize) {
        archive.fail(location.offset, "central directory of " + std::to_string(location.size) +
                                          " bytes is larger than the supported 1 GiB");
    }
    if (location.entries > location.size / kCentralHeaderSize) {
        archive.fail(location.offset,
                     std::to_string(location.entries) + " entries cannot fit in a " +
                         std::to_string(location.size) + "-byte central directory");
    }
    return location;
}

// Replaces the 32-bit fields marked 0xFFFFFFFF by the u64 values of the ZIP64 extra block.
void apply_zip64_extra(const ArchiveReader& archive, uint64_t entry_offset, const std::string& name,
                       const unsigned char* extra, uint64_t extra_size, uint64_t& uncompressed,
                       uint64_t& compressed, uint64_t& local_offset) {
    uint64_t* fields[] = {&uncompressed, &compressed, &local_offset};
    uint64_t pos = 0;
    while (pos + 4 <= extra_size) {
        const uint16_t id = le16(extra + pos);
        const uint16_t block_size = le16(extra + pos + 2);
        if (block_size > extra_size - pos - 4) {
            archive.fail(entry_offset, "extra field of record '" + name + "' is truncated");
        }
        if (id == kZip64ExtraId) {
            const unsigned char* value = extra + pos + 4;
            uint64_t left = block_size;
            for (uint64_t* field : fields) {
                if (*field != kZip64Marker) continue;
                if (left < 8) {
                    archive.fail(entry_offset, "ZIP64 extra field of record '" + name +
                                                   "' lacks a 64-bit size or offset");
                }
                *field = le64(value);
                value += 8;
                left -= 8;
            }
            return;
        }
        pos += 4 + block_size;
    }
}

// One central directory entry, its fields widened by the ZIP64 extra block.
struct CentralEntry {
    uint64_t offset;  // of the entry itself
    std::string name;
    uint16_t flags;
    uint16_t method;
    uint32_t crc;
    uint64_t compressed;
    uint64_t uncompressed;
    uint64_t local_offset;
};

CentralEntry parse_central_entry(const ArchiveReader& archive, const CentralDirLocation& location,
                                 const std::string& directory, uint64_t& pos, uint64_t index) {
    const uint64_t entry_offset = location.offset + pos;
    if (kCentralHeaderSize > location.size - pos) {
        archive.fail(entry_offset, "central directory entry #" + std::to_string(index) +
                                       " runs past the end of the central directory");
    }
    const unsigned char* entry = bytes_of(directory) + pos;
    if (le32(entry) != kCentralHeaderSignature) {
        archive.fail(entry_offset, "no central directory signature for entry #" + std::to_string(index));
    }
    CentralEntry e{entry_offset, "", le16(entry + 8), le16(entry + 10), le32(entry + 16), le32(entry + 20),
                   le32(entry + 24), le32(entry + 42)};
    const uint64_t name_size = le16(entry + 28);
    const uint64_t extra_size = le16(entry + 30);
    const uint64_t comment_size = le16(entry + 32);
    if (name_size + extra_size + comment_size > location.size - pos - kCentralHeaderSize) {
        archive.fail(entry_offset, "name, extra field and comment of entry #" + std::to_string(index) +
                                       " run past the end of the central directory");
    }
    e.name.assign(reinterpret_cast<const char*>(entry + kCentralHeaderSize), name_size);
    apply_zip64_extra(archive, entry_offset, e.name, entry + kCentralHeaderSize + name_size, extra_size,
                      e.uncompressed, e.compressed, e.local_offset);
    pos += kCentralHeaderSize + name_size + extra_size + comment_size;
    if (e.method != kMethodStored) {
        archive.fail(entry_offset, "record '" + e.name + "' is compressed (method " + std::to_string(e.method) +
                                       "); only stored records, as torch.save writes them, are supported");
    }
    if (e.compressed != e.uncompressed) {
        archive.fail(entry_offset, "stored record '" + e.name + "' has compressed size " +
                                       std::to_string(e.compressed) + " != uncompressed size " +
                                       std::to_string(e.uncompressed));
    }
    return e;
}

// What a record's local header says, and where its data lies.
struct LocalHeader {
    uint64_t offset;
    std::string name;
    uint16_t flags, method;
    uint32_t crc;
    uint64_t compressed, uncompressed;
    uint64_t data_offset;
};

LocalHeader read_local_header(const ArchiveReader& archive, const CentralEntry& e) {
    const std::string what = "local header of record '" + e.name + "'";
    const std::string fixed = archive.read(e.local_offset, kLocalHeaderSize, what);
    const unsigned char* h = bytes_of(fixed);
    if (le32(h) != kLocalHeaderSignature) {
        archive.fail(e.local_offset, "no local header signature for record '" + e.name + "'");
    }
    const uint64_t name_size = le16(h + 26), extra_size = le16(h + 28);
    const std::string rest = archive.read(e.local_offset + kLocalHeaderSize, name_size + extra_size, what);
    LocalHeader local{e.local_offset, rest.substr(0, name_size), le16(h + 6), le16(h + 8), le32(h + 14),
                      le32(h + 18), le32(h + 22), e.local_offset + kLocalHeaderSize + name_size + extra_size};
    uint64_t no_offset = 0;
    apply_zip64_extra(archive, e.local_offset, e.name, bytes_of(rest) + name_size, extra_size, local.uncompressed,
                      local.compressed, no_offset);
    if (!archive.contains(local.data_offset, e.uncompressed)) {
        archive.fail(e.local_offset, "data of record '" + e.name + "' (" + std::to_string(e.uncompressed) +
                                         " bytes at offset " + std::to_string(local.data_offset) +
                                         ") ends past the archive end");
    }
    return local;
}

// The local header repeats the central entry; a reader that trusts one and another that
// trusts the other must not see different archives. With the data-descriptor flag (bit 3, as
// torch writes) the local CRC and sizes may be zero.
void check_local_agrees(const ArchiveReader& archive, const CentralEntry& e, const LocalHeader& local) {
    auto disagree = [&](const std::string& field, const std::string& local_value, const std::string& central) {
        archive.fail(local.offset, "local header of record '" + e.name + "' says " + field + " " + local_value +
                                       ", the central directory " + central);
    };
    if (local.name != e.name) disagree("name", "'" + local.name + "'", "'" + e.name + "'");
    if (local.method != e.method) disagree("method", std::to_string(local.method), std::to_string(e.method));
    const bool descriptor = (local.flags & 0x0008) != 0;
    const bool zero_fields = local.crc == 0 && local.compressed == 0 && local.uncompressed == 0;
    if (descriptor && zero_fields) return;
    if (local.crc != e.crc) disagree("CRC-32", hex32(local.crc), hex32(e.crc));
    if (local.compressed != e.compressed)
        disagree("compressed size", std::to_string(local.compressed), std::to_string(e.compressed));
    if (local.uncompressed != e.uncompressed)
        disagree("size", std::to_string(local.uncompressed), std::to_string(e.uncompressed));
}

}  // namespace

void check_zip_spans_disjoint(std::vector<ZipSpan> spans, const ZipSpan& directory,
                              const std::function<void(uint64_t, const std::string&)>& fail) {
    auto bytes = [](const ZipSpan& s) { return "bytes " + std::to_string(s.begin) + ".." + std::to_string(s.end); };
    std::sort(spans.begin(), spans.end(),
              [](const ZipSpan& a, const ZipSpan& b) { return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name); });
    for (size_t i = 0; i < spans.size(); ++i) {
        const ZipSpan& s = spans[i];
        if (i > 0 && s.begin < spans[i - 1].end)
            fail(s.begin, "record '" + s.name + "' (" + bytes(s) + ") overlaps record '" + spans[i - 1].name +
                              "' (" + bytes(spans[i - 1]) + ")");
        if (s.begin < directory.end && directory.begin < s.end)
            fail(s.begin, "record '" + s.name + "' (" + bytes(s) + ") overlaps the " + directory.name + " (" +
                              bytes(directory) + ")");
    }
}

ZipArchive ZipArchive::open(const InputFile& file, uint64_t base, uint64_t length) {
    if (base > file.size()) {
        throw Error(file.path() + ": ZIP archive offset " + std::to_string(base) +
                    " is past the end of the file (size " + std::to_string(file.size()) + ")");
    }
    if (length == 0) length = file.size() - base;
    if (length > file.size() - base) {
        throw Error(file.path() + ": ZIP archive at offset " + std::to_string(base) + " of " +
                    std::to_string(length) + " bytes ends past the end of the file (size " +
                    std::to_string(file.size()) + ")");
    }
    const ArchiveReader archive(file, base, length);
    const CentralDirLocation location = locate_central_dir(archive);
    const std::string directory = archive.read(location.offset, location.size, "ZIP central directory");

    std::vector<CentralEntry> entries;
    entries.reserve(location.entries);
    uint64_t pos = 0;
    for (uint64_t index = 0; index < location.entries; ++index)
        entries.push_back(parse_central_entry(archive, location, directory, pos, index));

    // The local headers are read before any is compared, so two entries sharing one local
    // header read as the overlap they are.
    std::vector<LocalHeader> locals;
    std::vector<ZipSpan> spans;
    for (const CentralEntry& e : entries) {
        locals.push_back(read_local_header(archive, e));
        spans.push_back({e.name, e.local_offset, locals.back().data_offset + e.uncompressed});
    }
    check_zip_spans_disjoint(spans, {"central directory", location.offset, length},
                             [&](uint64_t offset, const std::string& what) { archive.fail(offset, what); });

    ZipArchive result;
    result.path_ = file.path();
    result.records_.reserve(entries.size());
    for (size_t index = 0; index < entries.size(); ++index) {
        const CentralEntry& e = entries[index];
        check_local_agrees(archive, e, locals[index]);
        if (index == 0) {
            const size_t slash = e.name.find('/');
            if (slash == std::string::npos) {
                archive.fail(e.offset, "first record '" + e.name + "' has no '/' so the archive has no prefix");
            }
            result.prefix_ = e.name.substr(0, slash);
        }
        if (!result.by_name_.emplace(e.name, result.records_.size()).second) {
            archive.fail(e.offset, "record '" + e.name + "' appears twice");
        }
        result.records_.push_back(ZipRecord{e.name, base + locals[index].data_offset, e.uncompressed, e.crc});
    }
    return result;
}

const ZipRecord* ZipArchive::find(const std::string& name_without_prefix) const {
    const auto it = by_name_.find(prefix_ + "/" + name_without_prefix);
    return it == by_name_.end() ? nullptr : &records_[it->second];
}

const ZipRecord& ZipArchive::get(const std::string& name_without_prefix) const {
    const ZipRecord* record = find(name_without_prefix);
    if (record == nullptr) {
        throw Error(path_ + ": archive '" + prefix_ + "' has no record '" + name_without_prefix +
                    "'");
    }
    return *record;
}

std::string ZipArchive::name_without_prefix(const std::string& name) const {
    const std::string lead = prefix_ + "/";
    return name.compare(0, lead.size(), lead) == 0 ? name.substr(lead.size()) : name;
}

std::string ZipArchive::read(const InputFile& file, const ZipRecord& record) const {
    if (record.size > kMaxReadSize) {
        throw Error(file.path() + ": record '" + record.name + "' of " +
                    std::to_string(record.size) +
                    " bytes is too large to read whole (limit 1 GiB)");
    }
    std::string bytes(record.size, '\0');
    const std::string what = "record '" + record.name + "'";
    file.read_exact(record.data_offset, bytes.data(), record.size, what.c_str());
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // fuzz builds (CMakeLists.txt) go on to the parsers
    const uint32_t crc = crc32_of(bytes.data(), bytes.size());
    if (crc != record.crc32)
        fail_record_crc(file.path(), name_without_prefix(record.name), record.data_offset, record.size,
                        record.crc32, crc, "while scanning");
#endif
    return bytes;
}

}  // namespace vmerge
