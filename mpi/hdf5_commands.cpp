#include "hdf5_commands.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "output/hdf5/archive_layout.h"
#include "output/hdf5/archive_reader.h"
#include "output/hdf5/archive_source.h"
#include "output/hdf5/archive_writer.h"
#include "collective_step.h"
#include "exec/copy_executor.h"
#include "core/error.h"
#include "core/human_units.h"
#include "io/input_file.h"
#include "output/output_folder.h"
#include "plan/output_layout.h"
#include "report/progress_monitor.h"
#include "plan/rank_work.h"
#include "core/stopwatch.h"
#include "output/write_journal.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

// Rank 0: a fresh staging folder for the archive (an archive has no --resume); the target was
// checked and locked by the caller.
void prepare_archive_staging(const std::string& target) {
    discard_earlier_staging(target);
    create_fresh_staging(target);
}

// Rank 0, after every rank closed the archive: the HF files beside it, everything synced
// (H5Fclose writes but does not sync), then the rename.
void commit_archive_staging(const std::string& target, bool force,
                            const std::vector<std::pair<std::string, std::string>>& files) {
    fsync_path(staging_path(target) + "/" + kArchiveFileName);
    publish_staging(target, force, {files.begin(), files.end()});
}

// Rows per write: whole chunks (one writer each), as many as fit a quarter of --max-memory.
int64_t rows_per_piece(const OutputTensor& t, int64_t chunk_rows, uint64_t max_memory) {
    const uint64_t budget = std::max<uint64_t>(static_cast<uint64_t>(chunk_rows) * row_bytes(t), max_memory / 4);
    int64_t rows = static_cast<int64_t>(std::max<uint64_t>(1, budget / std::max<uint64_t>(row_bytes(t), 1)));
    if (chunk_rows > 0) rows = std::max(chunk_rows, rows / chunk_rows * chunk_rows);
    return rows;
}

std::vector<WriteTask> pieces_of(const WriteTask& task, int64_t rows) {
    std::vector<WriteTask> out;
    for (int64_t row = task.row_begin; row < task.row_end; row += rows)
        out.push_back({task.tensor, row, std::min(task.row_end, row + rows)});
    return out;
}

std::string ratio_text(uint64_t bytes, uint64_t stored) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(3) << (stored ? static_cast<double>(bytes) / static_cast<double>(stored) : 0.0);
    return s.str();
}

void print_storage(const std::vector<ArchiveTensor>& tensors, std::ostream& out, const std::string& prefix) {
    for (const auto& s : archive_storage_by_dtype(tensors))
        out << prefix << std::left << std::setw(5) << safetensors_name(s.dtype) << std::right << " " << s.tensors
            << " tensors, " << human_bytes(s.bytes) << " -> " << human_bytes(s.stored_bytes) << " stored (ratio "
            << ratio_text(s.bytes, s.stored_bytes) << ")\n";
}

}  // namespace

int write_hdf5_archive(const Options& o, Comm& comm, TensorMapping mapping, const std::string& hf_dir,
                       const std::map<std::string, std::string>& generated, uint64_t max_memory, int threads, std::ostream& out, std::ostream& err) {
    const auto start = Clock::now();
    // Chunk boundaries become the rank split's row alignment, so every chunk has one writer.
    std::vector<int64_t> chunk_rows(mapping.tensors.size(), 0);
    if (o.zstd_level > 0)
        for (size_t i = 0; i < mapping.tensors.size(); ++i) {
            chunk_rows[i] = archive_chunk_rows(mapping.tensors[i], o.hdf5_chunk_size);
            if (chunk_rows[i] > 0) mapping.tensors[i].row_align = chunk_rows[i];
        }
    const auto& tensors = mapping.tensors;
    collective_step(comm, [&] { check_archive_paths(tensors); });
    const OutputLayout layout = plan_output_layout(tensors, UINT64_MAX);
    const auto work = plan_rank_work(tensors, layout, comm.size());
    // Collective writes: every rank joins every round of a compressed dataset, so all count
    // every rank's pieces (the plan is the same everywhere).
    std::vector<size_t> rounds(tensors.size(), 0);
    std::vector<std::vector<WriteTask>> mine(tensors.size());
    for (int r = 0; r < comm.size(); ++r) {
        std::map<size_t, size_t> count;
        for (const WriteTask& task : work[r]) {
            const int64_t rows = rows_per_piece(tensors[task.tensor], chunk_rows[task.tensor], max_memory);
            count[task.tensor] += static_cast<size_t>((task.row_end - task.row_begin + rows - 1) / rows);
            if (r == comm.rank()) {
                const auto pieces = pieces_of(task, rows);
                mine[task.tensor].insert(mine[task.tensor].end(), pieces.begin(), pieces.end());
            }
        }
        for (const auto& [t, n] : count) rounds[t] = std::max(rounds[t], n);
    }
    const std::string staging = staging_path(o.target_dir);
    collective_step(comm, [&] {
        if (comm.rank() == 0) prepare_archive_staging(o.target_dir);
    });
    std::vector<std::pair<std::string, std::string>> files;
    collective_step(comm, [&] {
        const HfFilePlan hf = plan_hf_file_copies(hf_dir);
        for (const auto& copy : hf.copies)
            if (!generated.count(copy.rel)) files.emplace_back(copy.rel, read_hf_file(copy));
        files.insert(files.end(), generated.begin(), generated.end());
        if (comm.rank() == 0 && !o.quiet)
            for (const auto& skipped : hf.skipped) out << "vmerge: not copied from " << hf_dir << ": " << skipped << "\n";
    });
    const std::string compression = o.zstd_level > 0 ? "zstd:" + std::to_string(o.zstd_level) : "none";
    const auto copy_start = Clock::now();
    collective_step(comm, [&] {
        std::unique_ptr<ArchiveWriter> archive;
        try {
            archive = std::make_unique<ArchiveWriter>(staging + "/" + kArchiveFileName, tensors, chunk_rows, o.zstd_level);
            ArchiveWriter& writer = *archive;
            if (!writer.parallel()) {
                // One process, no MPI: the executor's writer thread may call HDF5 itself (only
                // it does while run() lasts), so reading the next block overlaps writing and
                // compressing this one. Blocks are whole chunks (row_align).
                CopyExecutor executor(mapping, max_memory, nullptr, threads);
                executor.run(work[comm.rank()], [&](size_t t, int64_t row, int64_t row_end, const unsigned char* data,
                                                    size_t) { writer.write_rows(t, row, row_end, data); });
            } else {
                // Under MPI: HDF5 is called on the main thread only (MPI is initialised for one
                // thread). The executor's blocks of a piece are gathered and the piece written
                // when it is done; for a compressed dataset every rank makes rounds[t] collective
                // writes, joining with an empty piece once it has nothing left.
                std::vector<WriteTask> pieces;
                for (size_t t = 0; t < tensors.size(); ++t) {
                    pieces.insert(pieces.end(), mine[t].begin(), mine[t].end());
                    if (writer.compressed(t))
                        for (size_t k = mine[t].size(); k < rounds[t]; ++k) pieces.push_back({t, 0, 0});
                }
                CopyExecutor executor(mapping, max_memory / 2, nullptr, threads);
                std::vector<unsigned char> piece;
                executor.run(
                    pieces,
                    [&](size_t, int64_t, int64_t, const unsigned char* data, size_t size) {
                        piece.insert(piece.end(), data, data + size);
                    },
                    {},
                    [&](const WriteTask& task) {
                        writer.write_rows(task.tensor, task.row_begin, task.row_end, piece.empty() ? nullptr : piece.data());
                        piece.clear();
                    });
            }
            for (const auto& [rel, bytes] : files) writer.add_file(rel, bytes);
            writer.write_index({layout.total_size, [&] {
                                    std::vector<std::string> names;
                                    for (const auto& t : tensors) names.push_back(t.name);
                                    return names;
                                }(),
                                compression});
            writer.close();
        } catch (const std::exception& e) {
            // The others may wait in a collective HDF5 call that this rank will never join (closing
            // the archive here would be one more).
            abort_all_ranks(comm, err, e.what());
            archive.reset();
            discard_staging(o.target_dir);
            throw;
        }
    });
    const double copy_seconds = seconds_since(copy_start);
    collective_step(comm, [&] {
        if (comm.rank() == 0) commit_archive_staging(o.target_dir, o.force, files);
    });
    if (comm.rank() != 0 || o.quiet) return 0;
    const double seconds = seconds_since(start);
    const ArchiveReader written(o.target_dir + "/" + kArchiveFileName);
    const uint64_t stored = written.stored_size();
    out << "vmerge: wrote " << tensors.size() << " tensors (" << human_bytes(layout.total_size) << ") into "
        << o.target_dir << "/" << kArchiveFileName << " (" << compression << ", " << human_bytes(stored)
        << " stored) with " << comm.size() << " rank" << (comm.size() > 1 ? "s" : "") << " in " << std::fixed
        << std::setprecision(2) << seconds << " s (writing " << copy_seconds << " s, "
        << (copy_seconds > 0 ? static_cast<double>(layout.total_size) / copy_seconds / 1e9 : 0.0)
        << " GB/s of tensor bytes)\n";
    print_storage(written.tensors(), out, "vmerge:   ");
    return 0;
}

int convert_hdf5_archive(const Options& o, Comm& comm, uint64_t max_memory, std::ostream& out) {
    const auto start = Clock::now();
    const std::string path = (fs::path(o.local_dir) / kArchiveFileName).string();
    std::unique_ptr<ArchiveReader> reader;
    collective_step(comm, [&] { reader = std::make_unique<ArchiveReader>(path); });
    // The archive's datasets are the executor's sources; the rank split is that of the tensors
    // without the chunk alignment (the executor's blocks still keep to whole chunks).
    const TensorMapping mapping = archive_source_mapping(reader->tensors());
    std::vector<OutputTensor> tensors = mapping.tensors;
    for (auto& t : tensors) t.row_align = 1;
    const OutputLayout layout = plan_output_layout(tensors, o.max_shard_size);
    const auto work = plan_rank_work(tensors, layout, comm.size());
    const std::string staging = staging_path(o.target_dir);
    collective_step(comm, [&] {
        if (comm.rank() == 0)
            prepare_staging(o.target_dir, o.force, false, layout, resume_identity(layout, comm.size(), max_memory),
                            {{o.local_dir, "the archive folder (--local_dir)"}});
    });
    collective_step(comm, [&] {
        try {
            JournalWriter journal(staging, comm.rank());
            OutputWriter writer(staging, tensors, layout, &journal);
            CopyExecutor executor(mapping, max_memory);
            executor.read_sources_with(archive_source_opener(*reader));
            executor.run(work[comm.rank()], [&](size_t t, int64_t row, int64_t row_end, const unsigned char* data,
                                                size_t size) { writer.write(t, row, row_end, data, size); });
            writer.finish();
        } catch (...) {
            discard_staging(o.target_dir);
            throw;
        }
    });
    collective_step(comm, [&] {
        if (comm.rank() != 0) return;
        try {
            const auto files = reader->files();
            std::map<std::string, std::string> named;
            for (const auto& [rel, bytes] : files) {
                check_output_name(rel, path);
                named[rel] = bytes;
            }
            commit_staging(o.target_dir, o.force, "", tensors, layout, named);
        } catch (...) {
            discard_staging(o.target_dir);
            throw;
        }
    });
    if (comm.rank() != 0 || o.quiet) return 0;
    out << "vmerge: converted " << tensors.size() << " tensors (" << human_bytes(layout.total_size) << ") from " << path
        << " into " << o.target_dir << " (" << layout.files.size() << " file" << (layout.files.size() > 1 ? "s" : "")
        << ") with " << comm.size() << " rank" << (comm.size() > 1 ? "s" : "") << " in " << std::fixed
        << std::setprecision(2) << seconds_since(start) << " s\n";
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
        nlohmann::ordered_json j = {{"backend", "hdf5"}, {"archive", path}, {"compression", reader->compression()},
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
    out << "backend      hdf5: vmerge archive " << path << "\n"
        << "compression  " << reader->compression() << "\n"
        << "tensors      " << reader->tensors().size() << ", " << human_bytes(reader->total_size()) << " -> "
        << human_bytes(stored) << " stored (ratio " << ratio_text(reader->total_size(), stored) << ")\n";
    print_storage(reader->tensors(), out, "dtype        ");
    return 0;
}

}  // namespace vmerge
