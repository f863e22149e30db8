// A vmerge model.h5 archive (merge --format hdf5) as input, --backend hdf5: merged back into a
// Hugging Face folder or inspected through the ordinary path. Detection opens the archive (every
// dataset checked, archive_reader.h) and keeps it; its datasets are the sources, written as
// stored (Backend::as_stored) and read through the archive (source_opener), and its own HF files
// go into the output. Part of the HDF5 target, which registers the choice at start-up: the core
// library links no HDF5 and names no archive.
#include <algorithm>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/human_units.h"
#include "formats/backend.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "formats/hdf5_archive/archive_source.h"
#include "formats/registry.h"
#include "hdf5/archive_layout.h"
#include "io/object_url.h"
#include "io/output_names.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

// What detection opened: the archive, read by every later stage on this rank.
struct ArchiveState {
    std::string path;
    std::shared_ptr<ArchiveReader> reader;
};

class Hdf5ArchiveBackend final : public Backend {
public:
    std::string name() const override { return "hdf5_archive"; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        std::error_code ec;
        // The archive is read by the HDF5 library, which opens files only (no ranged GETs).
        if (is_object_url(request.local_dir))
            throw Error(request.local_dir + ": --backend hdf5 reads model.h5 from a file; an archive in a bucket "
                        "must be copied to disk first");
        const std::string archive = (fs::path(request.local_dir) / kArchiveFileName).string();
        // Anything named model.h5 is this layout's: a FIFO or a link to nowhere is the reader's
        // error, never opened.
        if (!fs::exists(fs::symlink_status(archive, ec))) return {false, "no model.h5"};
        d.weights_dir = request.local_dir;
        d.description = "vmerge archive " + archive;
        d.keep(ArchiveState{archive, std::make_shared<ArchiveReader>(archive)});
        return {true, "model.h5"};
    }

    // Output tensor i copies dataset i whole, as stored; nothing is scanned, nothing dropped.
    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>&, const HfConfig&, const MapOptions&,
             MappedCheckpoint& m, SourceLedger&) const override {
        m.mapping = archive_source_mapping(d.kept<ArchiveState>().reader->tensors());
    }

    SourceOpener source_opener(const DetectedCheckpoint& d) const override {
        return archive_source_opener(*d.kept<ArchiveState>().reader);
    }

    bool as_stored() const override { return true; }

    std::map<std::string, std::string> hf_files(const DetectedCheckpoint& d) const override {
        const ArchiveState& archive = d.kept<ArchiveState>();
        std::map<std::string, std::string> files;
        for (auto& [rel, bytes] : archive.reader->files()) {
            check_output_name(rel, archive.path);
            files[rel] = std::move(bytes);
        }
        return files;
    }

    // An archive converts back as stored (bit for bit what was merged into it), into a folder.
    std::string refuse(const CheckpointRequest& r) const override {
        const std::string flag = "--backend " + r.backend;
        if (r.format != r.folder_format)
            return flag + " reads an archive; its output is a " + r.folder_format + " folder (drop --format " + r.format + ")";
        if (r.command != "merge" && r.command != "inspect")
            return flag + " works with merge (archive -> Hugging Face folder) and inspect";
        if ((r.dtype != "auto" && r.dtype != "keep") || r.quantize)
            return flag + " writes the archive's tensors as stored; " + (r.quantize ? "--quantize" : "--dtype " + r.dtype) +
                   " applies to checkpoints";
        // What would change a checkpoint's tensors or config.json, or resume a merge: an archive
        // has its own (written as stored) and converts in one pass.
        for (const char* other : {"hf_config", "hf_model_path", "tie_word_embedding", "is_value_model", "allow_unmapped",
                                  "pad_vocab", "drop_mtp", "no_mtp_shared_copies", "architecture_table", "tp_size",
                                  "pp_size", "merge_lora", "lora_alpha", "use_rslora", "resume"})
            if (std::find(r.given.begin(), r.given.end(), other) != r.given.end())
                return flag + " writes the archive's tensors and files as stored, in one pass; --" + other +
                       " applies to checkpoints";
        return "";
    }

    // The compression, the bytes stored against the tensors' bytes, by dtype.
    InspectFacts inspect_facts(const DetectedCheckpoint& d, const std::vector<ScannedFile>&) const override {
        const ArchiveState& archive = d.kept<ArchiveState>();
        const ArchiveReader& reader = *archive.reader;
        const uint64_t stored = reader.stored_size();
        InspectFacts facts;
        facts.lines.emplace_back("compression", reader.compression());
        facts.lines.emplace_back("stored", human_bytes(reader.total_size()) + " -> " + human_bytes(stored) + " (ratio " +
                                               archive_ratio_text(reader.total_size(), stored) + ")");
        for (const auto& line : archive_storage_lines(reader.tensors())) facts.lines.emplace_back("dtype", line);
        facts.json_key = "archive";
        facts.json = {{"path", archive.path}, {"compression", reader.compression()},
                      {"total_bytes", reader.total_size()}, {"stored_bytes", stored}};
        nlohmann::ordered_json by = nlohmann::ordered_json::object();
        for (const auto& s : archive_storage_by_dtype(reader.tensors()))
            by[std::string(safetensors_name(s.dtype))] = {
                {"tensors", s.tensors}, {"bytes", s.bytes}, {"stored_bytes", s.stored_bytes},
                {"ratio", s.stored_bytes ? static_cast<double>(s.bytes) / static_cast<double>(s.stored_bytes) : 0.0}};
        facts.json["by_dtype"] = by;
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (const auto& t : reader.tensors())
            list.push_back({{"name", t.name}, {"stored_bytes", t.stored_bytes}, {"chunk_rows", t.chunk_rows},
                            {"compressed", t.compressed}});
        facts.json["tensors"] = list;
        return facts;
    }
};

const Backend& hdf5_archive_backend() {
    static const Hdf5ArchiveBackend backend;
    return backend;
}

// The last --backend choice, never auto-detected (a model.h5 alone says little).
bool register_hdf5_archive() {
    add_backend_choice({"hdf5", "a model.h5 archive: merge it back, inspect it",
                        "/model.h5: missing (--backend hdf5 reads a vmerge archive)", {&hdf5_archive_backend()},
                        /*auto_detected=*/false});
    return true;
}

}  // namespace
}  // namespace vmerge

// Registered at start-up by every program that links the HDF5 target: CMakeLists.txt names this
// symbol in the target's link options, so the linker keeps this file even though nothing calls it.
extern "C" {
extern const bool vmerge_hdf5_archive_registered;
const bool vmerge_hdf5_archive_registered = vmerge::register_hdf5_archive();
}
