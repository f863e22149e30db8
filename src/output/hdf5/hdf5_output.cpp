#include "output/hdf5/hdf5_output.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/human_units.h"
#include "output/hdf5/archive_layout.h"
#include "output/hdf5/archive_reader.h"

namespace vmerge {
namespace {

// Rows per write: whole chunks (one writer each), as many as fit a quarter of --max-memory.
int64_t rows_per_piece(const OutputTensor& t, int64_t chunk_rows, uint64_t max_memory) {
    const uint64_t budget = std::max<uint64_t>(static_cast<uint64_t>(chunk_rows) * row_bytes(t), max_memory / 4);
    int64_t rows = static_cast<int64_t>(std::max<uint64_t>(1, budget / std::max<uint64_t>(row_bytes(t), 1)));
    if (chunk_rows > 0) rows = std::max(chunk_rows, rows / chunk_rows * chunk_rows);
    return rows;
}

// Chunk rows a multiple of the rows the plan already splits at (block FP8's 128-row stripes,
// packed zero points' words), so that making chunks the split unit keeps that alignment too.
int64_t aligned_chunk_rows(const OutputTensor& t, int64_t chunk_rows) {
    const int64_t align = std::max<int64_t>(1, t.row_align);
    if (chunk_rows <= 0 || chunk_rows >= row_count(t) || chunk_rows % align == 0) return chunk_rows;
    return std::min(row_count(t), std::max(align, chunk_rows / align * align));
}

std::vector<WriteTask> pieces_of(const WriteTask& task, int64_t rows) {
    std::vector<WriteTask> out;
    for (int64_t row = task.row_begin; row < task.row_end; row += rows)
        out.push_back({task.tensor, row, std::min(task.row_end, row + rows)});
    return out;
}

std::string compression_name(int zstd_level) { return zstd_level > 0 ? "zstd:" + std::to_string(zstd_level) : "none"; }

}  // namespace

Hdf5Output::Hdf5Output(OutputOptions options) : OutputFormat(std::move(options)) {
    options_.resumable = false;  // an archive has no --resume
}

Hdf5Output::~Hdf5Output() = default;

void Hdf5Output::check(const TensorMapping& mapping) const { check_archive_paths(mapping.tensors); }

void Hdf5Output::check_adapter(const std::string& local_dir, bool unfolded_adapter) const {
    // The archive holds one model: an adapter is folded in or not merged at all.
    if (unfolded_adapter)
        throw Error(local_dir + " holds a LoRA adapter: --format hdf5 writes no lora_adapter/ folder; pass "
                                "--merge_lora to fold it into the archived weights, or merge to safetensors");
}

void Hdf5Output::plan(TensorMapping& mapping) {
    // Chunk boundaries become the rank split's row alignment, so every chunk has one writer.
    chunk_rows_.assign(mapping.tensors.size(), 0);
    if (options_.zstd_level > 0)
        for (size_t i = 0; i < mapping.tensors.size(); ++i) {
            OutputTensor& t = mapping.tensors[i];
            if (t.is_derived()) continue;  // written with its weight's blocks, unchunked
            chunk_rows_[i] = aligned_chunk_rows(t, archive_chunk_rows(t, options_.chunk_bytes));
            if (chunk_rows_[i] > 0) t.row_align = chunk_rows_[i];
        }
    tensors_ = &mapping.tensors;
    const auto& tensors = mapping.tensors;
    layout_ = plan_output_layout(tensors, UINT64_MAX);
    const auto work = plan_rank_work(tensors, layout_, options_.ranks);
    work_ = work.at(options_.rank);
    // Collective writes: every rank joins every round of a compressed dataset, so all count
    // every rank's pieces (the plan is the same everywhere).
    rounds_.assign(tensors.size(), 0);
    pieces_.assign(tensors.size(), {});
    for (int r = 0; r < options_.ranks; ++r) {
        std::map<size_t, size_t> count;
        for (const WriteTask& task : work[r]) {
            const int64_t rows = rows_per_piece(tensors[task.tensor], chunk_rows_[task.tensor], options_.max_memory);
            count[task.tensor] += static_cast<size_t>((task.row_end - task.row_begin + rows - 1) / rows);
            if (r == options_.rank) {
                const auto pieces = pieces_of(task, rows);
                pieces_[task.tensor].insert(pieces_[task.tensor].end(), pieces.begin(), pieces.end());
            }
        }
        for (const auto& [t, n] : count) rounds_[t] = std::max(rounds_[t], n);
    }
}

// A fresh staging folder for the archive (an archive has no --resume).
StagingState Hdf5Output::prepare(const ResumeIdentity&, const std::vector<InputFolder>&) {
    discard_earlier_staging(options_.target);
    create_fresh_staging(options_.target);
    return {};
}

std::vector<std::string> Hdf5Output::gather_files() {
    std::vector<std::string> notes;
    const HfFilePlan hf = plan_hf_file_copies(options_.hf_dir, options_.hf_training_files);
    for (const auto& copy : hf.copies)
        if (!options_.generated.count(copy.rel)) files_.emplace_back(copy.rel, read_hf_file(copy));
    files_.insert(files_.end(), options_.generated.begin(), options_.generated.end());
    for (const auto& skipped : hf.skipped) notes.push_back("not copied from " + options_.hf_dir + ": " + skipped);
    return notes;
}

void Hdf5Output::open() {
    writer_ = std::make_unique<ArchiveWriter>(staging_path(options_.target) + "/" + kArchiveFileName, *tensors_,
                                              chunk_rows_, options_.zstd_level);
}

std::vector<WriteTask> Hdf5Output::tasks() const {
    // One process, no MPI: the executor's writer thread may call HDF5 itself (only it does
    // while run() lasts), so reading the next block overlaps writing and compressing this one.
    // Blocks are whole chunks (row_align).
    if (!writer_->parallel()) return work_;
    // Under MPI, the pieces, each compressed tensor's padded with empty ones to its rounds.
    std::vector<WriteTask> pieces;
    for (size_t t = 0; t < tensors_->size(); ++t) {
        pieces.insert(pieces.end(), pieces_[t].begin(), pieces_[t].end());
        if (writer_->compressed(t))
            for (size_t k = pieces_[t].size(); k < rounds_[t]; ++k) pieces.push_back({t, 0, 0});
    }
    return pieces;
}

uint64_t Hdf5Output::executor_memory() const {
    // Under MPI a quarter of the budget is the piece being gathered.
    return writer_->parallel() ? options_.max_memory / 2 : options_.max_memory;
}

void Hdf5Output::write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size) {
    if (!writer_->parallel()) {
        writer_->write_rows(tensor, row_begin, row_end, data);
        return;
    }
    if (!(*tensors_)[tensor].is_derived()) piece_.insert(piece_.end(), data, data + size);
    else derived_.push_back({tensor, row_begin, row_end, std::vector<unsigned char>(data, data + size)});
}

void Hdf5Output::task_done(const WriteTask& task) {
    if (!writer_->parallel()) return;
    writer_->write_rows(task.tensor, task.row_begin, task.row_end, piece_.empty() ? nullptr : piece_.data());
    piece_.clear();
    for (const DerivedRows& rows : derived_) writer_->write_rows(rows.tensor, rows.row_begin, rows.row_end, rows.data.data());
    derived_.clear();
}

void Hdf5Output::finish() {
    for (const auto& [rel, bytes] : files_) writer_->add_file(rel, bytes);
    std::vector<std::string> names;
    for (const auto& t : *tensors_) names.push_back(t.name);
    writer_->write_index({layout_.total_size, names, compression_name(options_.zstd_level)});
    writer_->close();
}

void Hdf5Output::abandon() {
    writer_.reset();
    discard_staging(options_.target);
}

// After every rank closed the archive: the HF files beside it, everything synced (H5Fclose
// writes but does not sync), then the rename.
std::vector<std::string> Hdf5Output::commit() {
    fsync_path(staging_path(options_.target) + "/" + kArchiveFileName);
    publish_staging(options_.target, options_.force, {files_.begin(), files_.end()});
    return {};
}

std::vector<std::string> Hdf5Output::summary(double seconds, double copy_seconds) const {
    const ArchiveReader written(options_.target + "/" + kArchiveFileName);
    std::ostringstream line;
    line << "vmerge: wrote " << tensors_->size() << " tensors (" << human_bytes(layout_.total_size) << ") into "
         << options_.target << "/" << kArchiveFileName << " (" << compression_name(options_.zstd_level) << ", "
         << human_bytes(written.stored_size()) << " stored) with " << options_.ranks << " rank"
         << (options_.ranks > 1 ? "s" : "") << " in " << std::fixed << std::setprecision(2) << seconds
         << " s (writing " << copy_seconds << " s, "
         << (copy_seconds > 0 ? static_cast<double>(layout_.total_size) / copy_seconds / 1e9 : 0.0)
         << " GB/s of tensor bytes)";
    std::vector<std::string> lines{line.str()};
    for (const auto& storage : archive_storage_lines(written.tensors())) lines.push_back("vmerge:   " + storage);
    return lines;
}

}  // namespace vmerge
