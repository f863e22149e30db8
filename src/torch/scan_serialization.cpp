// The scan all-gather's encoding (version 1): every rank receives every rank file's scan, so
// its size is what scales with the checkpoint (docs/scaling.md). Each entry is stored against
// the one before it in its file: the key as the length of the prefix it shares plus the rest,
// the storage file only where it is not the scanned file, strides only where they are not
// contiguous, a DTensor's mesh and placements only where they differ.
//
//   message := "VMSC" version:varint files:varint (record-length:varint record)*
//   record  := path chunks:zigzag metadata skipped:varint (key kind)* tensors:varint entry*
//   entry   := key-shared:varint key-rest flags:byte dtype:varint chunk:zigzag shape [strides]
//              [storage-offset] [storage-file] storage-key-shared storage-key-rest byte-offset
//              byte-size [crc32:4 bytes LE] [global-shape [mesh names coordinates placements]]
//   (strings: length:varint bytes; shapes: ndim:varint dims:zigzag; flags: EntryFlag below)
#include "torch/scan_serialization.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>

#include "core/binary_message.h"
#include "core/error.h"

namespace vmerge {
namespace {

constexpr std::string_view kMagic = "VMSC";
constexpr uint64_t kVersion = 1;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

enum EntryFlag : uint8_t {
    kContiguous = 1,     // strides are contiguous_strides(shape)
    kHasCrc = 2,
    kHasDTensor = 4,
    kOtherFile = 8,      // the storage lives in another file than the scanned one
    kSameMesh = 16,      // mesh, names, coordinates and placements as the previous entry's
    kHasOffset = 32,     // storage_offset != 0
};
constexpr uint8_t kKnownFlags = 63;
constexpr uint64_t kDTypeCount = static_cast<uint64_t>(DType::C64) + 1;

// contiguous_strides(shape) where its products fit in int64 (a 0-sized dim counts as 1, so a
// shape of no elements can still overflow them); nullopt otherwise.
std::optional<Shape> contiguous_strides_if_representable(const Shape& shape) {
    int64_t product = 1;
    for (size_t d = 1; d < shape.size(); ++d)
        if (shape[d] < 0 || __builtin_mul_overflow(product, std::max<int64_t>(shape[d], 1), &product)) return std::nullopt;
    return contiguous_strides(shape);
}

size_t shared_prefix(std::string_view a, std::string_view b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

void put_delta(BinaryWriter& w, const std::string& text, const std::string& previous) {
    const size_t shared = shared_prefix(text, previous);
    w.varint(shared);
    w.bytes(std::string_view(text).substr(shared));
}

std::string get_delta(BinaryReader& r, const std::string& previous, const char* field) {
    const size_t shared = r.varint(field, previous.size());
    std::string text = previous.substr(0, shared);
    text.append(r.bytes(field));
    return text;
}

void put_shape(BinaryWriter& w, const Shape& shape) {
    w.varint(shape.size());
    for (int64_t d : shape) w.zigzag(d);
}

Shape get_shape(BinaryReader& r, const char* field) {
    Shape shape(r.count(field, 1));
    for (auto& d : shape) d = r.zigzag(field, std::numeric_limits<int64_t>::min(), kInt64Max);
    return shape;
}

bool same_placements(const std::vector<Placement>& a, const std::vector<Placement>& b) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k)
        if (a[k].kind != b[k].kind || a[k].dim != b[k].dim || a[k].split_factor != b[k].split_factor ||
            a[k].reduce_op != b[k].reduce_op)
            return false;
    return true;
}

bool same_mesh(const DTensorLayout& a, const DTensorLayout& b) {
    return a.mesh_shape == b.mesh_shape && a.mesh_dim_names == b.mesh_dim_names && a.coordinates == b.coordinates &&
           same_placements(a.placements, b.placements);
}

void put_mesh(BinaryWriter& w, const DTensorLayout& d) {
    put_shape(w, d.mesh_shape);
    w.varint(d.mesh_dim_names.size());
    for (const auto& name : d.mesh_dim_names) w.bytes(name);
    put_shape(w, d.coordinates);
    w.varint(d.placements.size());
    for (const auto& p : d.placements) {
        w.byte(static_cast<uint8_t>(p.kind));
        w.zigzag(p.dim);
        w.zigzag(p.split_factor);
        w.bytes(p.reduce_op);
    }
}

void get_mesh(BinaryReader& r, DTensorLayout& d) {
    d.mesh_shape = get_shape(r, "mesh shape");
    d.mesh_dim_names.resize(r.count("mesh dimension names", 1));
    for (auto& name : d.mesh_dim_names) name = r.bytes("mesh dimension name");
    d.coordinates = get_shape(r, "mesh coordinates");
    d.placements.resize(r.count("placements", 4));
    for (auto& p : d.placements) {
        const uint8_t kind = r.byte("placement kind");
        if (kind > static_cast<uint8_t>(Placement::Kind::Partial)) r.fail("placement kind", "unknown kind " + std::to_string(kind));
        p.kind = static_cast<Placement::Kind>(kind);
        p.dim = r.zigzag("placement dim", std::numeric_limits<int64_t>::min(), kInt64Max);
        p.split_factor = r.zigzag("placement split factor", std::numeric_limits<int64_t>::min(), kInt64Max);
        p.reduce_op = r.bytes("placement reduce op");
    }
}

struct EntryContext {  // what the previous entry of the file left
    std::string key, storage_key;
    const DTensorLayout* mesh = nullptr;
};

void put_entry(BinaryWriter& w, const ScannedFile& scanned, const StateDictEntry& e, EntryContext& previous) {
    const TensorRef& t = e.tensor;
    uint8_t flags = 0;
    if (t.stride == contiguous_strides_if_representable(t.shape)) flags |= kContiguous;
    if (t.storage.crc32) flags |= kHasCrc;
    if (t.storage.file != scanned.path) flags |= kOtherFile;
    if (t.storage_offset != 0) flags |= kHasOffset;
    if (t.dtensor) {
        flags |= kHasDTensor;
        if (previous.mesh && same_mesh(*t.dtensor, *previous.mesh)) flags |= kSameMesh;
    }
    put_delta(w, e.key, previous.key);
    w.byte(flags);
    w.varint(static_cast<uint8_t>(t.dtype));
    w.zigzag(e.chunk);
    put_shape(w, t.shape);
    if (!(flags & kContiguous)) put_shape(w, t.stride);
    if (flags & kHasOffset) w.zigzag(t.storage_offset);
    if (flags & kOtherFile) w.bytes(t.storage.file);
    put_delta(w, t.storage.key, previous.storage_key);
    w.varint(t.storage.byte_offset);
    w.varint(t.storage.byte_size);
    if (flags & kHasCrc) w.fixed32(*t.storage.crc32);
    if (t.dtensor) {
        put_shape(w, t.dtensor->global_shape);
        if (!(flags & kSameMesh)) put_mesh(w, *t.dtensor);
    }
    previous.key = e.key;
    previous.storage_key = t.storage.key;
    previous.mesh = t.dtensor ? &*t.dtensor : nullptr;
}

StateDictEntry get_entry(BinaryReader& r, const ScannedFile& scanned, EntryContext& previous) {
    StateDictEntry e;
    e.key = get_delta(r, previous.key, "tensor key");
    const uint8_t flags = r.byte("entry flags");
    if (flags & ~kKnownFlags) r.fail("entry flags", "unknown flags " + std::to_string(flags));
    if ((flags & kSameMesh) && !((flags & kHasDTensor) && previous.mesh))
        r.fail("entry flags", "a DTensor mesh repeated from an entry that has none");
    TensorRef& t = e.tensor;
    t.dtype = static_cast<DType>(r.varint("dtype", kDTypeCount - 1));
    e.chunk = static_cast<int>(r.zigzag("model chunk", -kIntMax - 1, kIntMax));
    t.shape = get_shape(r, "shape");
    if (flags & kContiguous) {
        auto strides = contiguous_strides_if_representable(t.shape);
        if (!strides) r.fail("shape", shape_to_string(t.shape) + " has contiguous strides beyond 64 bits");
        t.stride = std::move(*strides);
    } else {
        t.stride = get_shape(r, "strides");
    }
    if (flags & kHasOffset) t.storage_offset = r.zigzag("storage offset", std::numeric_limits<int64_t>::min(), kInt64Max);
    t.storage.file = (flags & kOtherFile) ? std::string(r.bytes("storage file")) : scanned.path;
    t.storage.key = get_delta(r, previous.storage_key, "storage key");
    t.storage.byte_offset = r.varint("storage byte offset");
    t.storage.byte_size = r.varint("storage byte size");
    if (flags & kHasCrc) t.storage.crc32 = r.fixed32("storage crc32");
    if (flags & kHasDTensor) {
        DTensorLayout layout;
        layout.global_shape = get_shape(r, "DTensor global shape");
        if (flags & kSameMesh) {
            const DTensorLayout& m = *previous.mesh;
            layout.mesh_shape = m.mesh_shape;
            layout.mesh_dim_names = m.mesh_dim_names;
            layout.coordinates = m.coordinates;
            layout.placements = m.placements;
        } else {
            get_mesh(r, layout);
        }
        t.dtensor = std::move(layout);
    }
    previous.key = e.key;
    previous.storage_key = t.storage.key;
    return e;
}

std::string encode_record(const ScannedFile& scanned) {
    BinaryWriter w;
    w.bytes(scanned.path);
    w.zigzag(scanned.chunks);
    w.bytes(scanned.metadata);
    w.varint(scanned.skipped.size());
    for (const auto& s : scanned.skipped) {
        w.bytes(s.key);
        w.bytes(s.kind);
    }
    w.varint(scanned.tensors.size());
    EntryContext previous;
    for (const auto& e : scanned.tensors) put_entry(w, scanned, e, previous);
    return w.take();
}

ScannedFile decode_record(std::string_view record) {
    BinaryReader r(record, "scan message record");
    ScannedFile scanned;
    scanned.path = r.bytes("file path");
    scanned.chunks = static_cast<int>(r.zigzag("model chunks", -kIntMax - 1, kIntMax));
    scanned.metadata = r.bytes("backend metadata");
    scanned.skipped.resize(r.count("skipped entries", 2));
    for (auto& s : scanned.skipped) {
        s.key = r.bytes("skipped key");
        s.kind = r.bytes("skipped kind");
    }
    const size_t tensors = r.count("tensor entries", 8);
    scanned.tensors.reserve(tensors);
    EntryContext previous;
    for (size_t k = 0; k < tensors; ++k) {
        scanned.tensors.push_back(get_entry(r, scanned, previous));
        // The previous entry's mesh, where the next one may repeat it (stable: reserved).
        const auto& dt = scanned.tensors.back().tensor.dtensor;
        previous.mesh = dt ? &*dt : nullptr;
    }
    r.expect_end("end of record");
    return scanned;
}

}  // namespace

std::string serialize_scans(const std::vector<ScannedFile>& scans) {
    BinaryWriter w;
    for (char c : kMagic) w.byte(static_cast<uint8_t>(c));
    w.varint(kVersion);
    w.varint(scans.size());
    for (const auto& s : scans) w.bytes(encode_record(s));
    return w.take();
}

std::vector<ScannedFile> deserialize_scans(const std::string& text) {
    BinaryReader r(text, "scan message");
    if (r.raw("magic", kMagic.size()) != kMagic) r.fail("magic", "not a vmerge scan message");
    const uint64_t version = r.varint("version");
    if (version != kVersion)
        r.fail("version", "version " + std::to_string(version) + ", this vmerge reads version " + std::to_string(kVersion) +
                              " (every rank must run the same vmerge)");
    std::vector<ScannedFile> scans(r.count("files", 1));
    for (auto& s : scans) s = decode_record(r.bytes("file record"));
    r.expect_end("end of message");
    return scans;
}

std::string serialize_scan(const ScannedFile& scanned) { return serialize_scans({scanned}); }

ScannedFile deserialize_scan(const std::string& text) {
    auto scans = deserialize_scans(text);
    if (scans.size() != 1) throw Error("internal: malformed scan message: " + std::to_string(scans.size()) + " files, expected 1");
    return std::move(scans.front());
}

std::vector<ScannedFile> gathered_scans(std::vector<std::string>& messages, size_t files) {
    std::vector<ScannedFile> scans(files);
    const size_t ranks = messages.size();
    for (size_t r = 0; r < ranks; ++r) {
        auto list = deserialize_scans(messages[r]);
        std::string().swap(messages[r]);
        if (list.size() != (files > r ? (files - r + ranks - 1) / ranks : 0))
            throw Error("internal: malformed scan message: rank " + std::to_string(r) + " sent " +
                        std::to_string(list.size()) + " scans of the " + std::to_string(files) + " files");
        for (size_t k = 0; k < list.size(); ++k) scans[r + k * ranks] = std::move(list[k]);
    }
    return scans;
}

}  // namespace vmerge
