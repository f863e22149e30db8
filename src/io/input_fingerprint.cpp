#include "io/input_fingerprint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "core/binary_message.h"
#include "core/error.h"
#include "io/checksum.h"
#include "io/input_file.h"
#include "io/object_url.h"

namespace vmerge {
namespace {

uint64_t sample_hash(const InputFile& file) {
    const uint64_t size = file.size();
    std::vector<unsigned char> window;
    if (size <= kInputSampleWindows * kInputSampleBytes) {
        window.resize(size);
        file.read_exact(0, window.data(), size, "fingerprint");
        return xxh64(window.data(), window.size());
    }
    window.resize(kInputSampleWindows * kInputSampleBytes);
    const uint64_t step = (size - kInputSampleBytes) / (kInputSampleWindows - 1);
    for (int i = 0; i < kInputSampleWindows; ++i)
        file.read_exact(i * step, window.data() + i * kInputSampleBytes, kInputSampleBytes, "fingerprint");
    return xxh64(window.data(), window.size());
}

std::string where(const InputFingerprint& f) {
    return "rank " + std::to_string(f.rank) + (f.host.empty() ? "" : " on " + f.host);
}

std::string named(const InputFingerprint& f) {
    return f.path + (f.link_target.empty() ? "" : " (a link to " + f.link_target + ")");
}

}  // namespace

InputFingerprint fingerprint_input(const std::string& path) {
    InputFingerprint f;
    f.path = path;
    const InputFile file(path);
    f.size = file.size();
    if (is_object_url(path)) {  // an object has no inode or links: its size and sampled bytes identify it
        f.sample_hash = sample_hash(file);
        return f;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot stat the file");
    f.size = file.size();
    f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    f.device = st.st_dev;
    f.inode = st.st_ino;
    std::error_code ec;
    if (std::filesystem::is_symlink(path, ec)) f.link_target = std::filesystem::read_symlink(path, ec).string();
    f.sample_hash = sample_hash(file);
    return f;
}

std::string serialize_fingerprints(const std::vector<InputFingerprint>& prints) {
    BinaryWriter w;
    w.varint(prints.size());
    for (const auto& f : prints) {
        w.bytes(f.path);
        w.varint(f.size);
        w.zigzag(f.mtime_ns);
        w.varint(f.device);
        w.varint(f.inode);
        w.varint(f.sample_hash);
        w.bytes(f.link_target);
        w.varint(static_cast<uint64_t>(f.rank));
        w.bytes(f.host);
    }
    return w.take();
}

std::vector<InputFingerprint> deserialize_fingerprints(const std::string& message) {
    BinaryReader r(message, "input fingerprint message");
    std::vector<InputFingerprint> prints(r.count("fingerprints", 9));
    for (auto& f : prints) {
        f.path = r.bytes("path");
        f.size = r.varint("size");
        f.mtime_ns = r.zigzag("mtime", INT64_MIN, INT64_MAX);
        f.device = r.varint("device");
        f.inode = r.varint("inode");
        f.sample_hash = r.varint("sample hash");
        f.link_target = r.bytes("link target");
        f.rank = static_cast<int>(r.varint("rank", INT32_MAX));
        f.host = r.bytes("host");
    }
    r.expect_end("fingerprints");
    return prints;
}

void check_ranks_agree(const std::vector<InputFingerprint>& prints) {
    std::map<std::string, const InputFingerprint*> first;
    for (const auto& f : prints) {
        const auto [it, fresh] = first.emplace(f.path, &f);
        if (fresh) continue;
        const InputFingerprint& a = *it->second;
        std::string differs;
        if (a.size != f.size) differs = "size " + std::to_string(a.size) + " against " + std::to_string(f.size) + " bytes";
        else if (a.mtime_ns != f.mtime_ns) differs = "modification time " + std::to_string(a.mtime_ns) + " against " + std::to_string(f.mtime_ns) + " ns";
        else if (a.sample_hash != f.sample_hash) differs = "the same size and time but different bytes";
        if (differs.empty()) continue;
        throw Error(f.path + ": " + where(a) + " and " + where(f) + " see different files (" + differs +
                    "): the file changed while the merge read it, or the nodes see different copies; "
                    "merge from a finished checkpoint every node sees alike (copies made with their times kept, e.g. cp -p or rsync -t)");
    }
}

std::vector<std::pair<InputFingerprint, InputFingerprint>> same_input_candidates(const std::vector<InputFingerprint>& prints) {
    std::map<std::string, const InputFingerprint*> by_path;
    for (const auto& f : prints) by_path.emplace(f.path, &f);
    std::map<std::pair<uint64_t, uint64_t>, std::vector<const InputFingerprint*>> by_content;
    for (const auto& [path, f] : by_path)
        if (f->size > 0) by_content[{f->size, f->sample_hash}].push_back(f);
    std::vector<std::pair<InputFingerprint, InputFingerprint>> pairs;
    for (const auto& [key, group] : by_content)
        for (size_t i = 0; i < group.size(); ++i)
            for (size_t j = i + 1; j < group.size(); ++j) pairs.emplace_back(*group[i], *group[j]);
    return pairs;
}

void refuse_same_bytes(const InputFingerprint& a, const InputFingerprint& b) {
    const InputFile fa(a.path), fb(b.path);
    if (fa.size() != fb.size() || !same_bytes(fa, 0, fb, 0, fa.size())) return;
    const bool one_file = a.host == b.host && a.device == b.device && a.inode == b.inode;
    throw Error(named(a) + " and " + named(b) + (one_file ? " are one file" : " hold the same " + std::to_string(a.size) + " bytes") +
                ": each input must be a file of its own (a rank file linked to or copied from another rank's merges "
                "one shard twice and leaves another out)");
}

}  // namespace vmerge
