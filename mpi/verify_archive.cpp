#include "verify_archive.h"

#include <filesystem>
#include <string>
#include <vector>

#include "collective_step.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "hdf5/archive_layout.h"
#include "io/checksum.h"
#include "io/output_names.h"

namespace vmerge {

int verify_hdf5_archive(const Options& o, Comm& comm, std::ostream& out) {
    const std::string path = (std::filesystem::path(o.output.target) / kArchiveFileName).string();
    const bool listed = std::filesystem::exists(o.output.target + "/" + kChecksumsFile);
    std::vector<std::string> problems;
    size_t tensors = 0;
    std::string compression;
    collective_step(comm, "verify the archive", [&] {
        if (comm.rank() != 0) return;
        // The bytes first: a changed range is the most precise account of a damaged archive.
        if (listed) problems = verify_checksums(o.output.target);
        if (!problems.empty()) return;
        ArchiveReader reader(path);
        reader.read_everything();
        tensors = reader.tensors().size();
        compression = reader.compression();
    });
    if (comm.rank() != 0) return 0;
    if (!problems.empty()) {
        out << "vmerge verify: " << problems.size() << (problems.size() > 1 ? " ranges differ" : " range differs")
            << " from what merge wrote:\n";
        for (const auto& p : problems) out << "  " << p << "\n";
        return 1;
    }
    if (listed)
        out << "vmerge verify: every byte of " << kArchiveFileName << " matches the checksums merge recorded ("
            << kChecksumsFile << ")\n";
    else
        out << "vmerge verify: no " << kChecksumsFile << " beside " << kArchiveFileName
            << " (not written by this vmerge, or moved without it): checksums not checked\n";
    out << "vmerge verify: OK, " << tensors << " tensors in " << path << " (" << compression
        << ") stored and decoded as vmerge writes them\n";
    return 0;
}

}  // namespace vmerge
