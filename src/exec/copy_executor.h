#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/source_reader.h"
#include "exec/lora_kernel.h"
#include "exec/row_block.h"
#include "exec/sequential_block_hash.h"
#include "mapping/quantization.h"
#include "plan/rank_work.h"
#include "io/record_crc.h"
#include "core/tensor_mapping.h"

namespace vmerge {

struct CopyStats {
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
    uint64_t reads = 0;
    uint64_t bytes_skipped = 0;  // output bytes an earlier run had written (resume)
    double read_seconds = 0;     // in pread
    double cast_seconds = 0;
    double sink_seconds = 0;     // handing blocks on (writing them, for a merge)
    double lora_seconds = 0;     // assembling LoRA factors and adding B·A to merged weights
    double crc_seconds = 0;      // CRC-32 of the record bytes read
    double hash_seconds = 0;     // xxh64 of the blocks, on the reading thread (hash_blocks)
    double wait_seconds = 0;     // the reading thread waiting for the writer thread to take a block
    std::map<std::string, QuantError> quantization_error;  // by tensor kind
};

using RowSink = std::function<void(const RowBlock& block)>;

// The writer thread's buffers for quantizing a block (copy_executor.cpp, quantize_and_sink):
// kept between blocks, touched by that thread only.
struct QuantizerBuffers {
    std::vector<float> floats;  // the block's values rounded to the model dtype
    std::vector<unsigned char> codes, scales, zeros;
    std::vector<int32_t> zero_points;
};

// Executes write tasks: reads exactly the source bytes each row block needs (one pread per
// contiguous run), assembles blocks of rows that fit in `max_memory`, casts, and hands them
// to the sink on a second thread while the next block is read. The sink is called from
// that thread, one block at a time.
class PipelinedSink;

// Error, before anything is written, when a tensor split only at multiples of its row_align
// (block FP8's 128-row stripes, packed zero points' words) has a smallest block that does not
// fit the rank's `max_memory`: the executor would have to exceed it.
void check_blocks_fit(const TensorMapping& mapping, uint64_t max_memory, bool quantizing);

class CopyExecutor {
public:
    // `quantize` (optional) is the spec QuantPacked tensors were planned with; `threads` is how
    // many threads a LoRA update may use (the rank's share of the node's cores).
    CopyExecutor(const TensorMapping& mapping, uint64_t max_memory, const QuantizeSpec* quantize = nullptr,
                 int threads = 1);

    // `skip` (optional) is asked before each block is assembled; true means an earlier run
    // already wrote it (resume), so its sources are not read at all.
    using SkipBlock = std::function<bool(size_t tensor, int64_t row_begin, int64_t row_end)>;
    // `task_done` (optional) is called on this thread once every block of a task has been
    // through the sink (a format that writes whole pieces collectively writes them there).
    using TaskDone = std::function<void(const WriteTask& task)>;
    void run(const std::vector<WriteTask>& tasks, const RowSink& sink, const SkipBlock& skip = {},
             const TaskDone& task_done = {});
    // Sources are files read with pread unless another opener is given (before run).
    void read_sources_with(SourceOpener opener) { opener_ = std::move(opener); }
    const CopyStats& stats() const { return stats_; }
    // The CRC-32 of every ZIP record byte read; records read whole are already checked (a
    // mismatch throws from run), records read in part are for complete_record_crcs.
    const RecordCrcLedger& crcs() const { return crcs_; }
    // A CRC mismatch is kept in crcs().mismatch() instead of stopping run (RecordCrcLedger).
    void defer_crc_mismatches() { crcs_.defer_mismatches(); }
    // Hash each block (xxh64) where its bytes are final on the reading thread: the writer thread,
    // the slower one in a plain copy, then only writes.
    void hash_blocks(bool hash) { hash_blocks_ = hash; }
    // Drop what was read from the page cache behind the reads (PageCachePolicy::Evict).
    void evict_reads(bool evict) { evict_reads_ = evict; }
    // Read without the CRC-32 check of the records, only to measure what the check costs
    // (a benchmark's setting, docs/usage.md); never for real merges.
    void skip_crc(bool skip) { skip_crc_ = skip; }

private:
    const SourceReader& open(const std::string& file);
    // The fp32 factors of one LoRA update; kept while the blocks of its weight run.
    const LoraFactors& lora_factors(size_t delta);
    void assembled_to_floats(const OutputTensor& t, int64_t row, int64_t end, const unsigned char* assembled, float* out);
    const std::vector<float>& source_scale_grid(size_t index);
    void fold_lora(float* merged, const OutputTensor& t, int64_t row, int64_t end, const LoraFactors& lora);
    // block_ (rows [row, end) of `t` as assembled) as fp32, dequantized by its source scales and
    // with the LoRA update folded in when it has one: the values a quantizer rounds and encodes.
    void floats_with_fold(const OutputTensor& t, int64_t row, int64_t end, const LoraFactors* lora, float* out);
    bool already_written(size_t tensor, const OutputTensor& t, int64_t row, int64_t end, int64_t align,
                         const SkipBlock& skip) const;
    // Rows of a tensor: the block a prefetch asks for.
    struct BlockRows {
        size_t tensor;
        int64_t row_begin, row_end;
    };
    // Each writes one block; `next` (the block after it) is asked for once this one is read.
    void write_block(PipelinedSink& writer, size_t tensor, int64_t row, int64_t end, const LoraFactors* lora,
                     const std::optional<BlockRows>& next);
    void quantizer_input(const OutputTensor& t, DType model_dtype, int64_t row, int64_t end, const LoraFactors* lora);
    void write_quantized_block(PipelinedSink& writer, size_t tensor, int64_t row, int64_t end, const LoraFactors* lora,
                               int64_t align, QuantError& error, const std::optional<BlockRows>& next);
    // NVFP4: the global scale of Packed tensor `tensor`, from the largest |w| of its whole
    // global_scale_group (read in bounded row blocks, once per group and rank, then kept).
    float global_scale(size_t tensor);
    void assemble(const OutputTensor& t, int64_t row_begin, int64_t row_end, unsigned char* block);
    BlockRows first_block(const WriteTask& task) const;
    std::optional<BlockRows> next_block(const std::vector<WriteTask>& tasks, size_t task, int64_t end,
                                        int64_t block_rows) const;
    // Asks the sources for the bytes `block` will read (will_need).
    void prefetch(const BlockRows& block);
    void read(const StorageRef& storage, const SourceReader& file, uint64_t offset, unsigned char* out, uint64_t length);
    void finish_read(const SourceReader& file, uint64_t offset, uint64_t length, uint64_t calls);
    // `rows` rows of `row_size` bytes, contiguous from `offset` in the source, each to its place
    // `out_stride` bytes apart in the block.
    void read_rows_into(const StorageRef& storage, const SourceReader& file, uint64_t offset, unsigned char* out,
                        int64_t rows, uint64_t row_size, uint64_t out_stride);
    void copy_box(const TensorRef& src, const Shape& src_start, const Shape& extent,
                  const Shape& block_shape, const Shape& dst_start, unsigned char* block);

    const TensorMapping& mapping_;
    uint64_t max_memory_;
    const QuantizeSpec* quantize_;
    int threads_;
    std::vector<float> floats_;  // global_scale's quantizer input (reading thread)
    SourceOpener opener_ = open_source_file;
    std::map<std::string, std::unique_ptr<SourceReader>> files_;
    std::vector<unsigned char> block_;
    std::vector<unsigned char> out_;  // the block handed to the writer thread (its buffer comes back)
    std::vector<unsigned char> folded_;  // a quantized block's fp32 values after a fold or dequantization
    QuantizerBuffers writer_quantizer_;
    std::vector<unsigned char> span_;
    std::vector<iovec> pieces_, scattered_;  // read_rows_into's places in the block
    std::map<size_t, float> global_scales_;  // by the first Packed tensor of a global_scale_group
    std::optional<size_t> lora_factors_for_;
    std::optional<size_t> source_scales_for_;  // source_scale_grid's cache
    std::vector<float> expert_;  // one GPT-OSS expert dequantized, before its transpose
    std::vector<float> source_scale_values_;
    LoraFactors lora_factors_;
    CopyStats stats_;
    RecordCrcLedger crcs_;
    bool evict_reads_ = false;
    bool hash_blocks_ = false;
    SequentialBlockHash block_hash_;  // of the block being assembled (hash_blocks)
    bool skip_crc_ = false;  // skip_crc
};

}  // namespace vmerge
