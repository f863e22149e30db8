#include "output/hdf5/hdf5_output.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/human_units.h"
#include "hdf5/archive_layout.h"
#include "hdf5/archive_storage.h"
#include "hdf5/zstd_codec.h"
#include "output/hdf5/archive_chunks.h"
#include "output/write_journal.h"

namespace vmerge {
namespace {

// Rows per write under MPI: whole chunks (one writer each), as many as fit `piece_budget`.
int64_t rows_per_piece(const OutputTensor& t, int64_t chunk_rows, uint64_t piece_budget) {
    const uint64_t budget = std::max<uint64_t>(static_cast<uint64_t>(chunk_rows) * row_bytes(t), piece_budget);
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

// The most a parcel of `piece` holds: every chunk's frame bound and record header (a quantized
// weight's scale rows add a little: the vector grows then).
size_t parcel_bound(const OutputTensor& t, int64_t chunk_rows, const WriteTask& piece) {
    const uint64_t rows = static_cast<uint64_t>(piece.row_end - piece.row_begin);
    if (chunk_rows <= 0) return rows * row_bytes(t) + 64;
    const uint64_t chunks = (rows + static_cast<uint64_t>(chunk_rows) - 1) / static_cast<uint64_t>(chunk_rows);
    return chunks * (zstd_frame_bound(static_cast<uint64_t>(chunk_rows) * row_bytes(t)) + 64);
}

// Compressed under MPI, a rank holds up to three parcels beside the executor's half of the
// budget: the one it compresses into and two being sent (rank 0: its own and one received).
constexpr uint64_t kParcelsHeld = 3;
constexpr uint64_t kMaxParcelBytes = 32ull << 20;

// Several ranks compressing: three parcels of at least one chunk each must fit the half of
// --max-memory that the executor leaves.
void check_parcels_fit(const OutputTensor& t, int64_t chunk_rows, uint64_t max_memory) {
    const uint64_t chunk = static_cast<uint64_t>(chunk_rows) * row_bytes(t);
    const uint64_t needed = kParcelsHeld * zstd_frame_bound(chunk) * 2;
    if (needed > max_memory)
        throw Error(t.name + ": its compressed chunks (" + human_bytes(chunk) + " each, --hdf5_chunk_size) need " +
                    "--max-memory of at least " + human_bytes(needed) + " per rank with several ranks; this merge has " +
                    human_bytes(max_memory) + " (lower --hdf5_chunk_size or raise --max-memory)");
}

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
    // One archive file and no header: the layout's file groups (the model's tensors, then an
    // adapter's) only order the rank shares, as they do for a safetensors folder.
    FileFormat archive;
    archive.model_file_name = [](size_t, size_t) { return std::string(kArchiveFileName); };
    archive.adapter_file = kArchiveFileName;
    layout_ = plan_output_layout(tensors, UINT64_MAX, archive);
    const auto work = plan_rank_work(tensors, layout_, options_.ranks);
    work_ = work.at(options_.rank);
    // Under MPI a piece is a quarter of --max-memory. Compressing, a sixteenth and at most
    // kMaxParcelBytes of rows: a parcel is sent once it holds a piece's worth, so it holds at most
    // two, and three parcels are held; rank 0 takes in others' parcels often, and none nears MPI's
    // 2 GiB message limit.
    const bool compressing = options_.zstd_level > 0;
    if (compressing && options_.ranks > 1)
        for (size_t i = 0; i < tensors.size(); ++i)
            if (chunk_rows_[i] > 0) check_parcels_fit(tensors[i], chunk_rows_[i], options_.max_memory);
    const uint64_t piece_budget =
        compressing ? std::min(options_.max_memory / 16, kMaxParcelBytes) : options_.max_memory / 4;
    parcel_send_bytes_ = piece_budget;
    pieces_.assign(tensors.size(), {});
    for (const WriteTask& task : work_) {
        const auto pieces = pieces_of(task, rows_per_piece(tensors[task.tensor], chunk_rows_[task.tensor], piece_budget));
        pieces_[task.tensor].insert(pieces_[task.tensor].end(), pieces.begin(), pieces.end());
    }
    if (compressing)
        for (size_t t = 0; t < tensors.size(); ++t)
            for (const WriteTask& piece : pieces_[t])
                parcel_reserve_ = std::max(parcel_reserve_, parcel_send_bytes_ + parcel_bound(tensors[t], chunk_rows_[t], piece));
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
    // The job's communicator when it runs under MPI (OutputOptions::parallel), else one process.
    const auto* comm = static_cast<const MPI_Comm*>(options_.parallel);
    route_ = !comm ? Route::OneProcess : options_.zstd_level > 0 ? Route::ToRankZero : Route::MpiIo;
    const std::string path = staging_path(options_.target) + "/" + kArchiveFileName;
    if (route_ != Route::ToRankZero || options_.rank == 0)
        writer_ = std::make_unique<ArchiveWriter>(path, *tensors_, chunk_rows_, options_.zstd_level,
                                                  route_ == Route::MpiIo ? comm : nullptr);
    if (options_.zstd_level > 0) compressor_ = std::make_unique<ChunkCompressor>(options_.zstd_level);
    if (route_ == Route::ToRankZero) {
        exchange_ = std::make_unique<ParcelExchange>(*comm, options_.rank, options_.ranks);
        if (options_.rank != 0) parcel_.bytes().reserve(parcel_reserve_);
    }
}

std::vector<WriteTask> Hdf5Output::tasks() const {
    // One process: the plan's share; blocks are whole chunks (row_align).
    if (route_ == Route::OneProcess) return work_;
    std::vector<WriteTask> pieces;
    for (const auto& tensor_pieces : pieces_) pieces.insert(pieces.end(), tensor_pieces.begin(), tensor_pieces.end());
    return pieces;
}

uint64_t Hdf5Output::executor_memory() const {
    // Under MPI the other half is the piece being gathered or the parcels held.
    return route_ == Route::OneProcess ? options_.max_memory : options_.max_memory / 2;
}

ChunkGeometry Hdf5Output::geometry(size_t tensor) const {
    const OutputTensor& t = (*tensors_)[tensor];
    return {t.name, row_bytes(t), chunk_rows_[tensor], row_count(t)};
}

void Hdf5Output::write(const RowBlock& b) {
    switch (route_) {
        case Route::OneProcess:
            write_block(b.tensor, b.row_begin, b.row_end, b.data, b.size);
            return;
        case Route::MpiIo:
            gather_piece(b.tensor, b.row_begin, b.row_end, b.data, b.size);
            return;
        case Route::ToRankZero:
            // Rank 0 writes its own blocks here, on the writer thread, as one process does: the
            // main thread calls HDF5 (others' parcels) only in task_done and finish, while this
            // thread is idle.
            if (options_.rank == 0) write_block(b.tensor, b.row_begin, b.row_end, b.data, b.size);
            else compress_into_parcel(b.tensor, b.row_begin, b.row_end, b.data, b.size);
            return;
    }
}

// A block into the file held by this process: its chunks compressed and written raw, or its rows.
void Hdf5Output::write_block(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data,
                             size_t size) {
    if (chunk_rows_[tensor] <= 0) {
        writer_->write_rows(tensor, row_begin, row_end, data);
        return;
    }
    compressor_->compress(geometry(tensor), row_begin, row_end, data, size,
                          [&](int64_t chunk_row, int64_t, const unsigned char* frame, size_t n) {
                              writer_->write_chunk(tensor, chunk_row, frame, n);
                          });
}

// On the executor's writer thread: the zstd work of the piece, done by the rank that read it.
void Hdf5Output::compress_into_parcel(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data,
                                      size_t size) {
    if (chunk_rows_[tensor] <= 0) {
        parcel_.add(ChunkParcel::Kind::Rows, tensor, row_begin, row_end, data, size);
        return;
    }
    compressor_->compress(geometry(tensor), row_begin, row_end, data, size,
                          [&](int64_t chunk_row, int64_t chunk_end, const unsigned char* frame, size_t n) {
                              parcel_.add(ChunkParcel::Kind::Frame, tensor, chunk_row, chunk_end, frame, n);
                          });
}

// Rank 0: another rank's parcel into the file (on the executor's own thread, the writer thread idle).
void Hdf5Output::write_parcel(const std::vector<unsigned char>& parcel) {
    for (const ChunkParcel::Record& r : ChunkParcel::records(parcel)) {
        if (r.tensor >= tensors_->size() || (r.kind == ChunkParcel::Kind::Frame) != (chunk_rows_[r.tensor] > 0))
            throw Error("internal: a chunk parcel names tensor " + std::to_string(r.tensor) + " wrongly");
        if (r.kind == ChunkParcel::Kind::Frame) writer_->write_chunk(r.tensor, r.row_begin, r.data, r.size);
        else writer_->write_rows(r.tensor, r.row_begin, r.row_end, r.size ? r.data : nullptr);
    }
}

void Hdf5Output::gather_piece(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data,
                              size_t size) {
    if (!(*tensors_)[tensor].is_derived()) piece_.insert(piece_.end(), data, data + size);
    else derived_.push_back({tensor, row_begin, row_end, std::vector<unsigned char>(data, data + size)});
}

void Hdf5Output::write_piece(const WriteTask& task) {
    writer_->write_rows(task.tensor, task.row_begin, task.row_end, piece_.empty() ? nullptr : piece_.data());
    piece_.clear();
    for (const DerivedRows& rows : derived_) writer_->write_rows(rows.tensor, rows.row_begin, rows.row_end, rows.data.data());
    derived_.clear();
}

void Hdf5Output::send_parcel() {
    parcel_.bytes() = exchange_->send(std::move(parcel_.bytes()));
    parcel_.bytes().reserve(parcel_reserve_);
}

void Hdf5Output::task_done(const WriteTask& task) {
    if (route_ == Route::MpiIo) write_piece(task);
    if (route_ != Route::ToRankZero) return;
    if (options_.rank != 0) {
        if (parcel_.bytes().size() >= parcel_send_bytes_) send_parcel();
        return;
    }
    // Between its own pieces rank 0 writes what the others have sent, so they need not wait.
    exchange_->receive(false, [&](const std::vector<unsigned char>& parcel) { write_parcel(parcel); });
}

void Hdf5Output::finish() {
    if (route_ == Route::ToRankZero) {
        if (options_.rank != 0) {
            if (!parcel_.empty()) send_parcel();
            exchange_->finish_sends();
            return;  // rank 0 alone holds the file
        }
        exchange_->receive(true, [&](const std::vector<unsigned char>& parcel) { write_parcel(parcel); });
    }
    for (const auto& [rel, bytes] : files_) writer_->add_file(rel, bytes);
    std::vector<std::string> names;
    for (const auto& t : *tensors_) names.push_back(t.name);
    writer_->write_index({layout_.total_size, names, compression_name(options_.zstd_level)});
    writer_->close();
}

void Hdf5Output::abandon() {
    writer_.reset();
    exchange_.reset();
    discard_staging(options_.target);
}

// After every rank closed the archive: the HF files and the checksum list beside it, everything
// synced (H5Fclose writes but does not sync), then the rename.
std::vector<std::string> Hdf5Output::commit() {
    const std::string staging = staging_path(options_.target);
    fsync_path(staging + "/" + kArchiveFileName);
    std::map<std::string, std::string> files(files_.begin(), files_.end());
    // What verify checks the archive against: its bytes as closed, read back here (HDF5 places
    // its metadata itself, so they cannot be hashed as they are written).
    files[kChecksumsFile] = file_checksums_json(staging, {kArchiveFileName});
    publish_staging(options_.target, options_.force, files);
    return {};
}

std::vector<std::string> Hdf5Output::summary(double seconds, double copy_seconds) const {
    // The datasets as written, with what each takes on disk (read back from the closed archive).
    std::vector<ArchiveTensor> written;
    std::vector<std::string> paths;
    for (size_t i = 0; i < tensors_->size(); ++i) {
        const OutputTensor& t = (*tensors_)[i];
        written.push_back({t.name, archive_dataset_path(t.name), t.dtype, t.shape, chunk_rows_[i], chunk_rows_[i] > 0, 0});
        paths.push_back(written.back().dataset_path);
    }
    const auto stored = archive_stored_bytes(options_.target + "/" + kArchiveFileName, paths);
    for (size_t i = 0; i < written.size(); ++i) written[i].stored_bytes = stored[i];
    std::ostringstream line;
    line << "vmerge: wrote " << tensors_->size() << " tensors (" << human_bytes(layout_.total_size) << ") into "
         << options_.target << "/" << kArchiveFileName << " (" << compression_name(options_.zstd_level) << ", "
         << human_bytes(archive_stored_size(written)) << " stored) with " << options_.ranks << " rank"
         << (options_.ranks > 1 ? "s" : "") << " in " << std::fixed << std::setprecision(2) << seconds
         << " s (writing " << copy_seconds << " s, "
         << human_rate(copy_seconds > 0 ? static_cast<double>(layout_.total_size) / copy_seconds : 0.0)
         << " of tensor bytes)";
    std::vector<std::string> lines{line.str()};
    for (const auto& storage : archive_storage_lines(written)) lines.push_back("vmerge:   " + storage);
    return lines;
}

}  // namespace vmerge
