#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "output/hdf5/archive_writer.h"
#include "output/hdf5/chunk_compressor.h"
#include "output/hdf5/chunk_parcel.h"
#include "output/hdf5/parcel_exchange.h"
#include "output/output_format.h"

namespace vmerge {

// --format hdf5: the merge as one <target_dir>/model.h5 (docs/hdf5.md), plus the HF files inside
// it. Three routes, by how the job runs:
//  - one process (no MPI): the executor's writer thread writes each block (compressing its chunks
//    first), so reading the next block overlaps writing this one;
//  - uncompressed under MPI: every rank opens the file (MPI-IO) and writes its rows independently,
//    in pieces the sink gathers and task_done writes (HDF5 is only called on the executor's own
//    thread under MPI);
//  - compressed under MPI: every rank compresses its own chunks on its writer thread; rank 0
//    alone holds the file (sec2) and writes its own frames there, raw with H5Dwrite_chunk, and
//    the others' parcels (ChunkParcel, ParcelExchange) between its pieces and at the end. Parallel HDF5 1.10.8 cannot take
//    independent raw chunk writes (docs/hdf5.md, limits), and collective filtered writes cost one
//    collective round per piece.
// A quantized weight's scales and zero points come with its blocks: they are stored unchunked
// and travel with the weight's piece.
class Hdf5Output final : public OutputFormat {
public:
    explicit Hdf5Output(OutputOptions options);
    ~Hdf5Output() override;

    void check_adapter(const std::string& local_dir, bool unfolded_adapter) const override;
    void check(const TensorMapping& mapping) const override;
    void plan(TensorMapping& mapping) override;
    const OutputLayout& layout() const override { return layout_; }
    StagingState prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) override;
    std::vector<std::string> gather_files() override;
    void open() override;
    std::vector<WriteTask> tasks() const override;
    uint64_t executor_memory() const override;
    void write(const RowBlock& block) override;
    void task_done(const WriteTask& task) override;
    void finish() override;
    void abandon() override;
    std::vector<std::string> commit() override;
    bool has_summary() const override { return true; }
    std::vector<std::string> summary(double seconds, double copy_seconds) const override;
    bool collective() const override { return true; }

private:
    enum class Route { OneProcess, MpiIo, ToRankZero };
    ChunkGeometry geometry(size_t tensor) const;
    void write_block(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size);
    void compress_into_parcel(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size);
    void write_parcel(const std::vector<unsigned char>& parcel);
    void send_parcel();
    void gather_piece(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size);
    void write_piece(const WriteTask& task);

    const std::vector<OutputTensor>* tensors_ = nullptr;
    std::vector<int64_t> chunk_rows_;
    OutputLayout layout_;
    Route route_ = Route::OneProcess;
    std::vector<WriteTask> work_;                 // this rank's share of the plan
    std::vector<std::vector<WriteTask>> pieces_;  // ... in pieces of whole chunks, by tensor
    std::vector<std::pair<std::string, std::string>> files_;
    std::unique_ptr<ArchiveWriter> writer_;       // none on ranks other than 0 (compressed under MPI)
    std::unique_ptr<ChunkCompressor> compressor_;
    std::unique_ptr<ParcelExchange> exchange_;
    ChunkParcel parcel_;                // compressed under MPI, ranks > 0: the parcel being filled
    size_t parcel_reserve_ = 0;         // ... the most its bytes can be
    uint64_t parcel_send_bytes_ = 0;    // ... sent once it holds this much (small tensors go together)
    std::vector<unsigned char> piece_;  // uncompressed under MPI: the blocks of the piece being gathered
    struct DerivedRows {                // scale or zero-point rows that came with the piece
        size_t tensor;
        int64_t row_begin, row_end;
        std::vector<unsigned char> data;
    };
    std::vector<DerivedRows> derived_;
};

}  // namespace vmerge
