// A vmerge model.h5 archive (merge --format hdf5) as input: merged back into a Hugging Face
// folder or inspected by the archive commands (registry: BackendChoice::archive), never
// scanned or mapped here; the entry gives --backend hdf5 its name, help and detection.
#include <filesystem>

#include "core/error.h"
#include "formats/backend.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

class Hdf5ArchiveBackend final : public Backend {
public:
    std::string name() const override { return "hdf5_archive"; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        std::error_code ec;
        const fs::path archive = fs::path(request.local_dir) / "model.h5";
        if (!fs::is_regular_file(archive, ec)) return {false, "no model.h5"};
        d.weights_dir = request.local_dir;
        d.description = "vmerge archive " + archive.string();
        return {true, "model.h5"};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>&, const HfConfig&, const MapOptions&,
             MappedCheckpoint&, SourceLedger&) const override {
        throw Error(d.weights_dir + "/model.h5: an archive is converted by the archive commands, not mapped");
    }
};

}  // namespace

const Backend& hdf5_archive_backend() {
    static const Hdf5ArchiveBackend backend;
    return backend;
}

}  // namespace vmerge
