#include "hdf5_commands.h"

#include <filesystem>
#include <iomanip>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "collective_step.h"
#include "core/human_units.h"
#include "core/stopwatch.h"
#include "hdf5/archive_layout.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "formats/hdf5_archive/archive_source.h"
#include "output/output_folder.h"
#include "output/registry.h"
#include "output/write_journal.h"
#include "output_stage.h"

namespace vmerge {
namespace fs = std::filesystem;

int convert_hdf5_archive(const Options& o, Comm& comm, uint64_t max_memory, std::ostream& out, std::ostream& err) {
    const auto start = Clock::now();
    const std::string path = (fs::path(o.local_dir) / kArchiveFileName).string();
    std::unique_ptr<ArchiveReader> reader;
    std::map<std::string, std::string> files;  // rank 0: the HF files kept in the archive
    collective_step(comm, [&] {
        reader = std::make_unique<ArchiveReader>(path);
        if (comm.rank() != 0) return;
        for (const auto& [rel, bytes] : reader->files()) {
            check_output_name(rel, path);
            files[rel] = bytes;
        }
    });
    // The archive's datasets are the executor's sources, written as stored in --format (a
    // Hugging Face folder; an archive is not converted into another archive).
    TensorMapping mapping = archive_source_mapping(reader->tensors());
    OutputOptions options = output_options(o, comm, max_memory);
    options.resume = false;
    options.generated = std::move(files);
    const auto output = make_output_format(o.format, std::move(options));
    OutputRun run;
    run.sources = archive_source_opener(*reader);
    run.identity = [&](const OutputLayout& layout) { return resume_identity(layout, comm.size(), max_memory); };
    run.inputs = {{o.local_dir, "the archive folder (--local_dir)"}};
    write_output(*output, mapping, run, o, comm, out, err);
    if (comm.rank() != 0 || o.quiet) return 0;
    const OutputLayout& layout = output->layout();
    out << "vmerge: converted " << mapping.tensors.size() << " tensors (" << human_bytes(layout.total_size) << ") from "
        << path << " into " << o.output.target << " (" << layout.files.size() << " file"
        << (layout.files.size() > 1 ? "s" : "") << ") with " << comm.size() << " rank" << (comm.size() > 1 ? "s" : "")
        << " in " << std::fixed << std::setprecision(2) << seconds_since(start) << " s\n";
    return 0;
}

int inspect_hdf5_archive(const Options& o, Comm& comm, std::ostream& out) {
    const std::string path = (fs::path(o.local_dir) / kArchiveFileName).string();
    std::unique_ptr<ArchiveReader> reader;
    collective_step(comm, [&] {
        if (comm.rank() == 0) reader = std::make_unique<ArchiveReader>(path);
    });
    if (comm.rank() != 0) return 0;
    const uint64_t stored = reader->stored_size();
    if (o.json) {
        nlohmann::ordered_json j = {{"backend", o.backend}, {"archive", path}, {"compression", reader->compression()},
                                    {"total_bytes", reader->total_size()}, {"stored_bytes", stored}};
        nlohmann::ordered_json by = nlohmann::ordered_json::object();
        for (const auto& s : archive_storage_by_dtype(reader->tensors()))
            by[std::string(safetensors_name(s.dtype))] = {
                {"tensors", s.tensors}, {"bytes", s.bytes}, {"stored_bytes", s.stored_bytes},
                {"ratio", s.stored_bytes ? static_cast<double>(s.bytes) / static_cast<double>(s.stored_bytes) : 0.0}};
        j["by_dtype"] = by;
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (const auto& t : reader->tensors())
            list.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", std::string(safetensors_name(t.dtype))},
                            {"bytes", t.nbytes()}, {"stored_bytes", t.stored_bytes}, {"chunk_rows", t.chunk_rows},
                            {"compressed", t.compressed}});
        j["tensors"] = list;
        out << j.dump(2) << "\n";
        return 0;
    }
    out << "backend      " << o.backend << ": vmerge archive " << path << "\n"
        << "compression  " << reader->compression() << "\n"
        << "tensors      " << reader->tensors().size() << ", " << human_bytes(reader->total_size()) << " -> "
        << human_bytes(stored) << " stored (ratio " << archive_ratio_text(reader->total_size(), stored) << ")\n";
    for (const auto& line : archive_storage_lines(reader->tensors())) out << "dtype        " << line << "\n";
    return 0;
}

bool holds_hdf5_archive(const std::string& dir) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(fs::path(dir) / kArchiveFileName, ec)) &&
           !fs::exists(fs::path(dir) / "model.safetensors", ec) &&
           !fs::exists(fs::path(dir) / "model.safetensors.index.json", ec);
}

int verify_hdf5_archive(const Options& o, Comm& comm, std::ostream& out) {
    const std::string path = (fs::path(o.output.target) / kArchiveFileName).string();
    const bool listed = fs::exists(o.output.target + "/" + kChecksumsFile);
    std::vector<std::string> problems;
    size_t tensors = 0;
    std::string compression;
    collective_step(comm, [&] {
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
