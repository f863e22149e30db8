#include "exec/copy_executor.h"

#include <bit>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "exec/dtype_cast.h"
#include "core/error.h"
#include "core/human_units.h"
#include "exec/finite_weights.h"
#include "exec/fp4_quantize.h"
#include "exec/fp8_quantize.h"
#include "exec/int_quantize.h"
#include "exec/block_dequantize.h"
#include "exec/fp4_dequantize.h"
#include "exec/lora_kernel.h"
#include "exec/strided_copy.h"
#include "core/stopwatch.h"

namespace vmerge {
namespace {
// 8 MiB: a block read on one thread is still in the (L2/L3) cache when the writer thread hashes
// and writes it; 64 MiB blocks went through memory once more per byte. Warm, on tmpfs, the 2 GB
// bf16 FSDP merge took 1.34 s with 64 MiB blocks, 0.94 s with 8 MiB (cp: 0.77 s), and on disk
// 2.18 s against 1.93 s (docs/performance.md, round 4).
constexpr uint64_t kMaxBlockSourceBytes = 8ull << 20;
constexpr uint64_t kReadPiece = 1ull << 20;  // bytes read and CRC'd at once
}  // namespace

// Hands assembled blocks to the sink on a second thread, which also casts (or quantizes) them,
// so reading the next block overlaps casting and writing this one. One block is in flight at a
// time; its buffer comes back for reuse.
class PipelinedSink {
public:
    explicit PipelinedSink(const RowSink& sink) : sink_(sink), thread_([this] { work(); }) {}

    ~PipelinedSink() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        changed_.notify_all();
        thread_.join();
    }

    // Waits until the previous block is written, then queues this one. Returns a buffer to
    // reuse (the previous block's).
    // With `cast` = {from, to}, the block holds `from` elements and is cast before the sink
    // (nothing to do when they are the same).
    // `xxh64`: the hash of `data` when it needs no cast.
    std::vector<unsigned char> submit(size_t tensor, int64_t row, int64_t end, std::vector<unsigned char> data,
                                      std::optional<std::pair<DType, DType>> cast = std::nullopt,
                                      std::optional<uint64_t> xxh64 = std::nullopt) {
        if (cast && cast->first == cast->second) cast.reset();
        return queue(Job{tensor, row, end, std::move(data), cast, cast ? std::nullopt : xxh64, {}});
    }

    // Work the writer thread does with a block instead of a cast: it makes the blocks the sink
    // gets from `data` (a quantized weight's codes and scales) and hands them to the sink it is
    // given, so that work overlaps the reading of the next block too. Returns as submit does.
    using BlockWork = std::function<void(std::vector<unsigned char>& data, const RowSink& sink)>;
    std::vector<unsigned char> submit_work(std::vector<unsigned char> data, BlockWork work) {
        return queue(Job{0, 0, 0, std::move(data), std::nullopt, std::nullopt, std::move(work)});
    }

    struct Seconds {
        double write = 0;
        double cast = 0;
    };
    // The time the submitting thread waited for the writer thread.
    double waited() const { return waited_; }
    // Waits for the block in flight; rethrows its error. Returns the time spent on this thread.
    Seconds drain() {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [this] { return !job_ || error_; });
        rethrow_locked();
        return seconds_;
    }

private:
    struct Job {
        size_t tensor;
        int64_t row, end;
        std::vector<unsigned char> data;
        std::optional<std::pair<DType, DType>> cast;
        std::optional<uint64_t> xxh64;
        BlockWork work;  // set: run instead of the cast and the one sink call
    };

    std::vector<unsigned char> queue(Job job) {
        const auto start = Clock::now();
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [this] { return !job_ || error_; });
        waited_ += seconds_since(start);
        rethrow_locked();
        job_ = std::move(job);
        changed_.notify_all();
        return std::move(returned_);
    }

    void rethrow_locked() {
        if (error_) {
            auto e = error_;
            error_ = nullptr;
            job_.reset();
            std::rethrow_exception(e);
        }
    }

    // The plain block: cast (when asked) and handed to the sink. Returns {cast, write} seconds.
    std::pair<double, double> cast_and_sink(Job& job) {
        const unsigned char* data = job.data.data();
        size_t size = job.data.size();
        double cast_seconds = 0;
        if (job.cast) {
            const auto start = Clock::now();
            const auto [from, to] = *job.cast;
            const size_t count = size / element_size(from);
            converted_.resize(count * element_size(to));
            cast_elements(job.data.data(), from, converted_.data(), to, count);
            data = converted_.data();
            size = converted_.size();
            cast_seconds = seconds_since(start);
        }
        const auto start = Clock::now();
        sink_(RowBlock{job.tensor, job.row, job.end, data, size, job.xxh64});
        return {cast_seconds, seconds_since(start)};
    }

    void work() {
        std::unique_lock lock(mutex_);
        while (true) {
            changed_.wait(lock, [this] { return stopping_ || (job_ && !error_); });
            if (!job_ || error_) return;
            Job& job = *job_;
            lock.unlock();
            std::exception_ptr failure;
            double cast_seconds = 0, write_seconds = 0;
            try {
                if (job.work) {
                    // The sink's time is the write time; the rest of the work counts as the cast.
                    double sunk = 0;
                    const RowSink timed_sink = [this, &sunk](const RowBlock& block) {
                        const auto start = Clock::now();
                        sink_(block);
                        sunk += seconds_since(start);
                    };
                    const auto start = Clock::now();
                    job.work(job.data, timed_sink);
                    cast_seconds = seconds_since(start) - sunk;
                    write_seconds = sunk;
                } else {
                    std::tie(cast_seconds, write_seconds) = cast_and_sink(job);
                }
            } catch (...) {
                failure = std::current_exception();
            }
            lock.lock();
            seconds_.write += write_seconds;
            seconds_.cast += cast_seconds;
            error_ = failure;
            returned_ = std::move(job.data);
            job_.reset();
            changed_.notify_all();
        }
    }

    const RowSink& sink_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::optional<Job> job_;
    std::vector<unsigned char> returned_;
    std::exception_ptr error_;
    Seconds seconds_;
    std::vector<unsigned char> converted_;  // the cast block (this thread only)
    double waited_ = 0;  // submitting thread only
    bool stopping_ = false;
    std::thread thread_;
};

CopyExecutor::CopyExecutor(const TensorMapping& mapping, uint64_t max_memory, const QuantizeSpec* quantize, int threads)
    : mapping_(mapping), max_memory_(std::max<uint64_t>(max_memory, 1 << 20)), quantize_(quantize),
      threads_(std::max(1, threads)) {}

const SourceReader& CopyExecutor::open(const std::string& file) {
    auto& slot = files_[file];
    if (!slot) slot = opener_(file);
    return *slot;
}

namespace {

// How a tensor's rows are cut into blocks that fit the memory budget.
struct BlockSizing {
    uint64_t out_row = 0;    // bytes of one output row
    uint64_t src_row = 0;    // bytes of one assembled source row
    int64_t block_rows = 1;  // rows per block, a multiple of `align`
    int64_t align = 1;       // a block starts on a multiple of this (packed zero points)
    uint64_t per_row = 0;    // executor memory per row of a block
};

BlockSizing block_sizing(const OutputTensor& t, bool quantized, bool lora, uint64_t max_memory) {
    BlockSizing s;
    const bool cast = !quantized && t.dtype != t.source_dtype;
    s.out_row = row_bytes(t);
    const int64_t cols = quantized ? t.source_shape[1] : 0;
    s.src_row = t.assembled_row_bytes();
    // Half the budget for blocks: the one being assembled plus the one being cast and
    // written; the other half bounds the span read for a non-contiguous source.
    uint64_t per_row = 2 * s.src_row;
    // A quantized block: the one being assembled (and its fp32 values, when a LoRA fold or a
    // source's scales are applied on the reading thread), the one the writer thread quantizes
    // (as assembled or as fp32) with its fp32 values, its codes and its scales (never more bytes
    // than the codes).
    const uint64_t floats_row = static_cast<uint64_t>(cols) * 4;
    if (quantized) per_row = s.src_row + std::max(s.src_row, floats_row) + floats_row + 2 * s.out_row;
    else if (lora) per_row = s.src_row + static_cast<uint64_t>(t.row_elements()) * (4 + 4 + 4) + s.out_row;
    else if (cast) per_row = 2 * s.src_row + s.out_row;
    s.align = std::max<int64_t>(1, t.row_align);
    s.per_row = per_row;
    // Blocks of at most kMaxBlockSourceBytes of source: the writer thread casts and writes one
    // while the next is read, each still in cache (see kMaxBlockSourceBytes).
    const uint64_t block_budget =
        std::min<uint64_t>(max_memory / 2, kMaxBlockSourceBytes / std::max<uint64_t>(s.src_row, 1) * per_row);
    s.block_rows = std::max<int64_t>(1, static_cast<int64_t>(block_budget / std::max<uint64_t>(per_row, 1)));
    s.block_rows = std::max(s.align, s.block_rows / s.align * s.align);
    return s;
}

// The blocks run() cuts `t` into.
// Rows that go through float32 before the cast: their values change on the way (a LoRA fold, a
// block-quantized source's dequantization, a table rule's `add`).
bool in_float32(const OutputTensor& t) {
    return t.lora_delta.has_value() || t.source_scales.has_value() || t.value_offset != 0;
}

// A table rule's `add` (OutputTensor::value_offset) on `count` values, in float32 as torch adds a
// number to a bfloat16 or float16 tensor (then rounded once, by the writer's cast).
void add_value_offset(const OutputTensor& t, float* values, size_t count) {
    if (t.value_offset == 0) return;
    const float add = static_cast<float>(t.value_offset);
    for (size_t i = 0; i < count; ++i) values[i] += add;
}

BlockSizing sizing_of(const OutputTensor& t, uint64_t max_memory) {
    return block_sizing(t, t.role == OutputTensor::Role::QuantPacked, in_float32(t), max_memory);
}

}  // namespace

void check_blocks_fit(const TensorMapping& mapping, uint64_t max_memory, bool quantizing) {
    for (const OutputTensor& t : mapping.tensors) {
        const bool quantized = quantizing && t.role == OutputTensor::Role::QuantPacked;
        const BlockSizing s = block_sizing(t, quantized, in_float32(t), max_memory);
        const uint64_t smallest = s.per_row * static_cast<uint64_t>(s.align);
        if (s.align > 1 && smallest > max_memory)
            throw Error(t.name + ": its smallest block (" + std::to_string(s.align) + " rows: " + human_bytes(smallest) +
                        " with its buffers) needs --max-memory of at least " + human_bytes(smallest) +
                        " per rank; this merge has " + human_bytes(max_memory));
    }
}

namespace {

// The rows of a quantized weight's Scale tensor that weight rows [row, end) write.
std::pair<int64_t, int64_t> scale_rows(const OutputTensor& t, int64_t row, int64_t end) {
    const int64_t per_scale_row = std::max<int64_t>(1, t.scale_row_block);
    return {row / per_scale_row, (end + per_scale_row - 1) / per_scale_row};
}

// FP8 kernels over rows [0, rows) of `x`, split across up to `threads` threads at multiples of
// `align` rows (whole 128-row stripes for block FP8): the parts are disjoint, so the bytes are
// those of one call. Threads only where each gets about a million weights.
template <typename Kernel>
void run_split(int64_t rows, int64_t cols, int64_t align, int threads, QuantError& error, const Kernel& kernel) {
    const int64_t useful = std::max<int64_t>(1, rows * cols / (1 << 20));
    const int64_t units = (rows + align - 1) / align;
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(threads, useful), 1, std::max<int64_t>(1, units));
    if (n == 1) {
        kernel(0, rows, error);
        return;
    }
    const int64_t per = (units + n - 1) / n * align;
    std::vector<QuantError> errors(static_cast<size_t>(n));
    // A kernel's Error (a NaN weight) must leave its thread as an exception of this one, not
    // std::terminate: each part keeps its own, and the first part's is thrown after the joins.
    std::vector<std::exception_ptr> failed(static_cast<size_t>(n));
    auto part = [&kernel, &errors, &failed](int64_t i, int64_t begin, int64_t end) {
        try {
            kernel(begin, end, errors[i]);
        } catch (...) {
            failed[i] = std::current_exception();
        }
    };
    std::vector<std::thread> pool;
    for (int64_t i = 1; i < n; ++i) {
        const int64_t begin = std::min(rows, i * per), end = std::min(rows, begin + per);
        if (begin < end) pool.emplace_back(part, i, begin, end);
    }
    part(0, 0, std::min(rows, per));
    for (auto& t : pool) t.join();
    for (const std::exception_ptr& e : failed)
        if (e) std::rethrow_exception(e);
    for (const QuantError& e : errors) {
        error.sum += e.sum;
        error.max = std::max(error.max, e.max);
        error.count += e.count;
    }
}

// Quantizes `rows` rows of `t` from `row` on (`x`: their values in the model dtype, as fp32)
// with the planned scheme into the weight bytes `out` and the scale rows `scales`.
// `global_scale`: NVFP4's, of the weight's fused group.
void quantize_block(const QuantizeSpec& spec, const OutputTensor& t, const OutputTensor& scale, const float* x,
                    int64_t row, size_t rows, int threads, float global_scale, std::vector<unsigned char>& out,
                    std::vector<unsigned char>& scales, std::vector<int32_t>& zero_points, QuantError& error) {
    const int64_t cols = t.source_shape[1];
    const int64_t n = static_cast<int64_t>(rows);
    const auto [scale_begin, scale_end] = scale_rows(t, row, row + n);
    out.resize(rows * row_bytes(t));
    scales.resize(static_cast<size_t>(scale_end - scale_begin) * row_bytes(scale));
    uint8_t* codes = out.data();
    unsigned char* scale_bytes = scales.data();
    const std::string weight = quantized_weight_name(t.name);  // messages name the weight, not weight_packed
    switch (spec.scheme) {
        case QuantScheme::Fp8Block: {
            const int64_t block_cols = scale.shape[1];
            run_split(n, cols, 128, threads, error, [&](int64_t r0, int64_t r1, QuantError& e) {
                quantize_fp8_blocks(x + r0 * cols, r1 - r0, cols, spec.scale_format, codes + r0 * cols,
                                    reinterpret_cast<float*>(scale_bytes) + (r0 / 128) * block_cols, e, weight, row + r0);
            });
            return;
        }
        case QuantScheme::Fp8CtBlock: {
            const int64_t block_cols = scale.shape[1];
            const size_t scale_size = element_size(scale.dtype);
            run_split(n, cols, 128, threads, error, [&](int64_t r0, int64_t r1, QuantError& e) {
                quantize_fp8_ct_blocks(x + r0 * cols, r1 - r0, cols, scale.dtype, codes + r0 * cols,
                                       scale_bytes + static_cast<size_t>((r0 / 128) * block_cols) * scale_size, e,
                                       weight, row + r0);
            });
            return;
        }
        case QuantScheme::Fp8Dynamic: {
            const size_t scale_size = element_size(scale.dtype);
            run_split(n, cols, 1, threads, error, [&](int64_t r0, int64_t r1, QuantError& e) {
                quantize_fp8_channels(x + r0 * cols, r1 - r0, cols, scale.dtype, codes + r0 * cols,
                                      scale_bytes + static_cast<size_t>(r0) * scale_size, e, weight, row + r0);
            });
            return;
        }
        case QuantScheme::Nvfp4:
        case QuantScheme::Mxfp4: {
            const int64_t groups = scale.shape[1];
            const DType dtype = t.quantize_from;
            run_split(n, cols, 1, threads, error, [&](int64_t r0, int64_t r1, QuantError& e) {
                uint8_t* packed = codes + r0 * (cols / 2);
                uint8_t* group_scales = reinterpret_cast<uint8_t*>(scale_bytes) + r0 * groups;
                if (spec.scheme == QuantScheme::Nvfp4)
                    quantize_nvfp4_rows(x + r0 * cols, r1 - r0, cols, dtype, global_scale, packed, group_scales, e,
                                        weight, row + r0);
                else
                    quantize_mxfp4_rows(x + r0 * cols, r1 - r0, cols, dtype, packed, group_scales, e, weight, row + r0);
            });
            return;
        }
        case QuantScheme::Int:
            zero_points.resize(rows * static_cast<size_t>(scale.shape[1]));
            quantize_rows(x, n, cols, spec, scale.dtype, reinterpret_cast<uint32_t*>(out.data()), scales.data(),
                          zero_points.data(), error, weight, row);
            return;
    }
}

// One quantized weight block as the writer thread takes it: its rows, how its values are
// stored (the source dtype as assembled, or F32 after a fold or a source's dequantization), and
// where its error statistics add up.
struct QuantizedBlock {
    const QuantizeSpec* spec;
    const TensorMapping* mapping;
    size_t tensor;
    int64_t row, end, align;
    DType stored;
    float global_scale;  // NVFP4's; 1 otherwise
    int threads;
    QuantError* error;
};

// On the writer thread: the values of `b` (in `data`) rounded to the model dtype, quantized, and
// the codes, scales, NVFP4 global scale (with the first rows) and packed zero points handed to
// the sink in that order. An fp32 block is rounded in place (no second fp32 copy).
void quantize_and_sink(const QuantizedBlock& b, std::vector<unsigned char>& data, QuantizerBuffers& buffers,
                       const RowSink& sink) {
    const OutputTensor& t = b.mapping->tensors.at(b.tensor);
    const OutputTensor& scale = b.mapping->tensors.at(t.scale_tensor);
    const size_t rows = static_cast<size_t>(b.end - b.row);
    const size_t count = rows * static_cast<size_t>(t.source_shape[1]);
    if (b.stored != DType::F32) buffers.floats.resize(count);
    float* x = b.stored == DType::F32 ? reinterpret_cast<float*>(data.data()) : buffers.floats.data();
    round_through(data.data(), b.stored, t.quantize_from, x, count);
    quantize_block(*b.spec, t, scale, x, b.row, rows, b.threads, b.global_scale, buffers.codes, buffers.scales,
                   buffers.zero_points, *b.error);
    sink(RowBlock{b.tensor, b.row, b.end, buffers.codes.data(), buffers.codes.size(), std::nullopt});
    const auto [scale_begin, scale_end] = scale_rows(t, b.row, b.end);
    sink(RowBlock{t.scale_tensor, scale_begin, scale_end, buffers.scales.data(), buffers.scales.size(), std::nullopt});
    if (t.global_scale_tensor && b.row == 0) {  // one float, written with the weight's first rows
        unsigned char bytes[sizeof(float)];
        std::memcpy(bytes, &b.global_scale, sizeof(float));
        sink(RowBlock{*t.global_scale_tensor, 0, 1, bytes, sizeof(float), std::nullopt});
    }
    if (!t.zero_point_tensor) return;
    const OutputTensor& zero = b.mapping->tensors.at(*t.zero_point_tensor);
    const int64_t packed_begin = b.row / b.align, packed_end = (b.end + b.align - 1) / b.align;
    buffers.zeros.resize(static_cast<size_t>(packed_end - packed_begin) * row_bytes(zero));
    pack_zero_points(buffers.zero_points.data(), static_cast<int64_t>(rows), scale.shape[1], b.spec->bits,
                     reinterpret_cast<uint32_t*>(buffers.zeros.data()));
    sink(RowBlock{*t.zero_point_tensor, packed_begin, packed_end, buffers.zeros.data(), buffers.zeros.size(),
                  std::nullopt});
}

}  // namespace

void CopyExecutor::run(const std::vector<WriteTask>& tasks, const RowSink& sink, const SkipBlock& skip,
                       const TaskDone& task_done) {
    // Every quantized kind is in the statistics (reported even when resumed whole) before the
    // writer thread adds to them: the map's shape does not change while that thread runs.
    for (const WriteTask& task : tasks)
        if (const OutputTensor& t = mapping_.tensors.at(task.tensor); t.role == OutputTensor::Role::QuantPacked)
            stats_.quantization_error[quantized_kind(t.name)];
    PipelinedSink writer(sink);
    if (!tasks.empty()) prefetch(first_block(tasks.front()));
    for (const WriteTask& task : tasks) {
        const OutputTensor& t = mapping_.tensors.at(task.tensor);
        const bool quantized = t.role == OutputTensor::Role::QuantPacked;
        if (quantized && !quantize_) throw Error("internal: " + t.name + " is planned as quantized without a spec");
        const LoraFactors* lora = t.lora_delta ? &lora_factors(*t.lora_delta) : nullptr;
        const BlockSizing sizing = sizing_of(t, max_memory_);
        QuantError* error = quantized ? &stats_.quantization_error.at(quantized_kind(t.name)) : nullptr;
        for (int64_t row = task.row_begin; row < task.row_end; row += sizing.block_rows) {
            const int64_t end = std::min(task.row_end, row + sizing.block_rows);
            const size_t rows = static_cast<size_t>(end - row);
            if (skip && already_written(task.tensor, t, row, end, sizing.align, skip)) {
                stats_.bytes_skipped += rows * sizing.out_row;
                continue;
            }
            const auto next = next_block(tasks, static_cast<size_t>(&task - tasks.data()), end, sizing.block_rows);
            if (t.role == OutputTensor::Role::Constant) {
                if (next) prefetch(*next);
                out_.assign(t.constant.begin() + static_cast<std::ptrdiff_t>(row * sizing.out_row),
                            t.constant.begin() + static_cast<std::ptrdiff_t>(end * sizing.out_row));
                out_ = writer.submit(task.tensor, row, end, std::move(out_));
                stats_.bytes_written += rows * sizing.out_row;
            } else if (quantized) {
                if (t.global_scale_tensor && !global_scales_.count(t.global_scale_group.front())) {
                    global_scale(task.tensor);
                    if (lora) lora = &lora_factors(*t.lora_delta);  // the pass read the group's other factors
                }
                write_quantized_block(writer, task.tensor, row, end, lora, sizing.align, *error, next);
            } else {
                write_block(writer, task.tensor, row, end, lora, next);
            }
        }
        if (task_done) {
            writer.drain();
            task_done(task);
        }
    }
    const auto seconds = writer.drain();
    stats_.sink_seconds = seconds.write;
    stats_.wait_seconds = writer.waited();
    stats_.cast_seconds += seconds.cast;
}

// A block counts as written by an earlier run only when every part it writes is: the
// block itself and, for a quantized weight, its scales and packed zero points.
bool CopyExecutor::already_written(size_t tensor, const OutputTensor& t, int64_t row, int64_t end, int64_t align,
                                   const SkipBlock& skip) const {
    if (!skip(tensor, row, end)) return false;
    if (t.role != OutputTensor::Role::QuantPacked) return true;
    const auto [scale_begin, scale_end] = scale_rows(t, row, end);
    if (!skip(t.scale_tensor, scale_begin, scale_end)) return false;
    if (t.global_scale_tensor && row == 0 && !skip(*t.global_scale_tensor, 0, 1)) return false;
    return !t.zero_point_tensor || skip(*t.zero_point_tensor, row / align, (end + align - 1) / align);
}

// Rows [row, end) of an unquantized tensor: assembled, LoRA folded in fp32 when it has an
// update, cast on the writer thread.
void CopyExecutor::write_block(PipelinedSink& writer, size_t tensor, int64_t row, int64_t end,
                               const LoraFactors* lora, const std::optional<BlockRows>& next) {
    const OutputTensor& t = mapping_.tensors.at(tensor);
    const size_t rows = static_cast<size_t>(end - row);
    const uint64_t src_row = t.assembled_row_bytes();
    const bool floats = in_float32(t);
    // An fp32 source is assembled straight into the buffer the update is added to (no copy).
    const bool fold_in_place = lora && !t.source_scales && t.value_offset == 0 && t.source_dtype == DType::F32;
    std::vector<unsigned char>& assembled = floats && !fold_in_place ? block_ : out_;
    assembled.resize(rows * src_row);
    if (t.zero_fill) std::fill(assembled.begin(), assembled.end(), 0);
    // The writer thread casts from `cast.first`; a block it need not cast is hashed here.
    const std::pair cast{floats ? DType::F32 : t.source_dtype, t.dtype};
    const bool hashing = hash_blocks_ && cast.first == cast.second;
    if (hashing && !floats) block_hash_.begin(assembled.data(), assembled.size());
    assemble(t, row, end, assembled.data());
    if (next) prefetch(*next);
    if (floats) {
        const auto start = Clock::now();
        const size_t count = rows * static_cast<size_t>(t.row_elements());
        out_.resize(count * sizeof(float));
        float* merged = reinterpret_cast<float*>(out_.data());
        if (!fold_in_place) assembled_to_floats(t, row, end, block_.data(), merged);
        if (lora) fold_lora(merged, t, row, end, *lora);
        (lora ? stats_.lora_seconds : stats_.cast_seconds) += seconds_since(start);
        if (hashing) block_hash_.begin(out_.data(), out_.size());  // the merged values, hashed whole
    }
    std::optional<uint64_t> hash;
    if (hashing) {
        const auto hash_start = Clock::now();
        hash = block_hash_.finish();
        stats_.hash_seconds += seconds_since(hash_start);
    }
    out_ = writer.submit(tensor, row, end, std::move(out_), cast, hash);
    stats_.bytes_written += rows * row_bytes(t);
}

void CopyExecutor::floats_with_fold(const OutputTensor& t, int64_t row, int64_t end, const LoraFactors* lora,
                                    float* out) {
    assembled_to_floats(t, row, end, block_.data(), out);
    if (lora) fold_lora(out, t, row, end, *lora);
}

// The source rows of a quantized weight as fp32, rounded to the model dtype first: what the
// unquantized merge would write, as quantizing that model with compressed-tensors would see it.
void CopyExecutor::quantizer_input(const OutputTensor& t, DType model_dtype, int64_t row, int64_t end,
                                   const LoraFactors* lora) {
    const size_t count = static_cast<size_t>(end - row) * static_cast<size_t>(t.source_shape[1]);
    floats_.resize(count);
    if (lora || t.source_scales || t.value_offset != 0) {
        floats_with_fold(t, row, end, lora, floats_.data());
        round_through(floats_.data(), DType::F32, model_dtype, floats_.data(), count);
    } else {
        round_through(block_.data(), t.source_dtype, model_dtype, floats_.data(), count);
    }
}

// Rows [row, end) of a quantized weight: assembled here (dequantized and LoRA folded in fp32
// where it has to be, which needs this thread's factors and scale grids), then rounded to the
// model dtype, quantized and written on the writer thread (quantize_and_sink), overlapping the
// reading of the next block.
void CopyExecutor::write_quantized_block(PipelinedSink& writer, size_t tensor, int64_t row, int64_t end,
                                         const LoraFactors* lora, int64_t align, QuantError& error,
                                         const std::optional<BlockRows>& next) {
    const OutputTensor& t = mapping_.tensors.at(tensor);
    const size_t rows = static_cast<size_t>(end - row);
    block_.resize(rows * t.assembled_row_bytes());
    if (t.zero_fill) std::fill(block_.begin(), block_.end(), 0);
    assemble(t, row, end, block_.data());
    if (next) prefetch(*next);
    const float global = t.global_scale_tensor ? global_scales_.at(t.global_scale_group.front()) : 1.0f;
    QuantizedBlock job{quantize_, &mapping_, tensor, row, end, align, t.source_dtype, global, threads_, &error};
    std::vector<unsigned char>* input = &block_;
    if (lora || t.source_scales || t.value_offset != 0) {
        const auto start = Clock::now();
        const size_t count = rows * static_cast<size_t>(t.source_shape[1]);
        folded_.resize(count * sizeof(float));
        floats_with_fold(t, row, end, lora, reinterpret_cast<float*>(folded_.data()));
        stats_.cast_seconds += seconds_since(start);
        job.stored = DType::F32;
        input = &folded_;
    }
    *input = writer.submit_work(std::move(*input), [job, &buffers = writer_quantizer_](std::vector<unsigned char>& data,
                                                                         const RowSink& sink) {
        quantize_and_sink(job, data, buffers, sink);
    });
    const OutputTensor& scale = mapping_.tensors.at(t.scale_tensor);
    const auto [scale_begin, scale_end] = scale_rows(t, row, end);
    stats_.bytes_written += rows * row_bytes(t) + static_cast<uint64_t>(scale_end - scale_begin) * row_bytes(scale);
    if (t.global_scale_tensor && row == 0) stats_.bytes_written += sizeof(float);
    if (t.zero_point_tensor)
        stats_.bytes_written += static_cast<uint64_t>((end + align - 1) / align - row / align) *
                                row_bytes(mapping_.tensors.at(*t.zero_point_tensor));
}

float CopyExecutor::global_scale(size_t tensor) {
    const OutputTensor& t = mapping_.tensors.at(tensor);
    const size_t key = t.global_scale_group.front();
    if (const auto it = global_scales_.find(key); it != global_scales_.end()) return it->second;
    uint32_t top = 0;  // the largest |w| as bits (finite_weights.h)
    for (const size_t member : t.global_scale_group) {
        const OutputTensor& m = mapping_.tensors.at(member);
        const LoraFactors* lora = m.lora_delta ? &lora_factors(*m.lora_delta) : nullptr;
        const int64_t rows = m.source_shape[0], cols = m.source_shape[1];
        const int64_t block_rows = sizing_of(m, max_memory_).block_rows;
        const std::string weight = quantized_weight_name(m.name);
        for (int64_t row = 0; row < rows; row += block_rows) {
            const int64_t end = std::min(rows, row + block_rows);
            block_.resize(static_cast<size_t>(end - row) * m.assembled_row_bytes());
            if (m.zero_fill) std::fill(block_.begin(), block_.end(), 0);
            assemble(m, row, end, block_.data());
            const size_t count = static_cast<size_t>((end - row) * cols);
            // Without a fold, the largest value rounded to the model dtype is the rounded largest
            // value (rounding is monotonic): one rounding instead of one per weight.
            uint32_t block_top = kNonFiniteMagnitude;
            if (const auto raw = lora || m.value_offset != 0 ? std::nullopt : stored_max_magnitude_bits(block_.data(), m.source_dtype, count);
                raw && *raw < kNonFiniteMagnitude) {
                const float largest = std::bit_cast<float>(*raw);
                float rounded;
                round_through(&largest, DType::F32, m.quantize_from, &rounded, 1);
                block_top = std::bit_cast<uint32_t>(rounded) & 0x7FFFFFFFu;
            }
            if (block_top >= kNonFiniteMagnitude) {
                // The values exactly as the quantizer sees them: after a fold, in the model dtype
                // (and a non-finite one refused by the quantizer's own message).
                quantizer_input(m, m.quantize_from, row, end, lora);
                block_top = max_magnitude_bits(floats_.data(), static_cast<int64_t>(count));
                if (block_top >= kNonFiniteMagnitude)
                    require_finite(floats_.data(), end - row, cols, cols, {weight, row, WeightUse::Quantize});
            }
            top = std::max(top, block_top);
        }
    }
    const float g = nvfp4_global_scale(std::bit_cast<float>(top), t.quantize_from);
    global_scales_[key] = g;
    return g;
}

// Rows [row, end) of `t` (fp32, in `merged`) += the LoRA update, under the common non-finite rule
// (finite_weights.h): the weight before and the sum after must be finite (the factors were
// checked once, in lora_factors).
void CopyExecutor::fold_lora(float* merged, const OutputTensor& t, int64_t row, int64_t end, const LoraFactors& lora) {
    const int64_t rows = end - row, cols = t.weight_shape()[1];
    const std::string weight = quantized_weight_name(t.name);
    require_finite(merged, rows, cols, cols, {weight, row, WeightUse::LoraBase});
    add_lora_delta(merged, row, end, lora, threads_);
    require_finite(merged, rows, cols, cols, {weight, row, WeightUse::LoraResult});
}

// Rows [row, end) of `t` as assembled (its source dtype) to float32: block-FP8 codes dequantized
// with their scales, anything else cast exactly.
void CopyExecutor::assembled_to_floats(const OutputTensor& t, int64_t row, int64_t end, const unsigned char* assembled,
                                       float* out) {
    if (!t.source_scales) {
        const size_t count = static_cast<size_t>((end - row) * t.row_elements());
        cast_elements(assembled, t.source_dtype, out, DType::F32, count);
        add_value_offset(t, out, count);
        return;
    }
    const int64_t cols = t.weight_shape()[1];
    const SourceScales& s = mapping_.source_scales.at(*t.source_scales);
    const std::vector<float>& grid = source_scale_grid(*t.source_scales);
    const int64_t scale_cols = (cols + s.block_cols - 1) / s.block_cols;
    if (s.codes == SourceCodes::Fp8E4M3) {
        dequantize_block_fp8(assembled, row, end, cols, grid.data(), scale_cols, s.block_rows, s.block_cols, out);
    } else if (s.experts_transposed) {
        // GPT-OSS: each expert [N, K] dequantized, then written [K, N] (transformers' orientation).
        const Shape& codes = t.packed_codes_shape;  // [E, N, K/32, 16]
        const int64_t n = codes[1], k = codes[2] * 32;
        expert_.resize(static_cast<size_t>(n * k));
        for (int64_t e = row; e < end; ++e) {
            dequantize_fp4_rows(assembled + (e - row) * n * k / 2, n, k, grid.data() + e * n * (k / 32), 32,
                                expert_.data());
            float* o = out + (e - row) * n * k;
            for (int64_t r = 0; r < n; ++r)
                for (int64_t c = 0; c < k; ++c) o[c * n + r] = expert_[static_cast<size_t>(r * k + c)];
        }
    } else {
        dequantize_fp4_rows(assembled, end - row, cols, grid.data() + row * scale_cols, s.block_cols, out);
    }
    // compressed-tensors' and transformers' FP4 dequantizers give bfloat16 whatever the model dtype.
    if (s.codes != SourceCodes::Fp8E4M3)
        round_through(out, DType::F32, DType::BF16, out, static_cast<size_t>((end - row) * t.row_elements()));
    // A LoRA update is folded into the weight as transformers loads it (dequantized, then in the
    // model dtype), as PEFT folds it. Without a fold the writer's cast (or the quantizer's
    // rounding to the model dtype) is that one rounding.
    const DType model = t.role == OutputTensor::Role::QuantPacked ? t.quantize_from : t.dtype;
    if (t.lora_delta && model != DType::F32 && can_cast(DType::F32, model))
        round_through(out, DType::F32, model, out, static_cast<size_t>((end - row) * t.row_elements()));
    add_value_offset(t, out, static_cast<size_t>((end - row) * t.row_elements()));
}

// The float32 scale grid of a block-FP8 source, read whole once and kept while its rows run.
// A non-finite or negative scale is refused: it is a damaged file, not a weight.
const std::vector<float>& CopyExecutor::source_scale_grid(size_t index) {
    if (source_scales_for_ == index) return source_scale_values_;
    const OutputTensor& scales = mapping_.source_scales.at(index).scales;
    std::vector<unsigned char> raw(static_cast<size_t>(numel(scales.shape)) * element_size(scales.source_dtype));
    assemble(scales, 0, scales.shape.empty() ? 1 : scales.shape[0], raw.data());
    source_scale_values_.resize(static_cast<size_t>(numel(scales.shape)));
    const SourceScales& source = mapping_.source_scales.at(index);
    if (source.codes == SourceCodes::Fp8E4M3)
        cast_elements(raw.data(), scales.source_dtype, source_scale_values_.data(), DType::F32, source_scale_values_.size());
    else
        fp4_effective_scales(raw.data(), source.codes == SourceCodes::Nvfp4, source.global_scale_value,
                             source_scale_values_.data(), source_scale_values_.size());
    for (size_t i = 0; i < source_scale_values_.size(); ++i) {
        const float v = source_scale_values_[i];
        if (std::isfinite(v) && v >= 0) continue;
        const int64_t cols = scales.shape.size() >= 2 ? scales.shape.back() : 1;
        // An input value: every rerun meets it again, so the staged output is discarded (InputValueError).
        throw InputValueError(scales.name + ": row " + std::to_string(static_cast<int64_t>(i) / cols) + ", column " +
                    std::to_string(static_cast<int64_t>(i) % cols) + " is " + std::to_string(v) +
                    "; a " + (source.codes == SourceCodes::Fp8E4M3 ? std::string("block-FP8") : std::string("4-bit float")) +
                    " scale must be finite and not negative (the file is damaged)");
    }
    source_scales_for_ = index;
    return source_scale_values_;
}

const LoraFactors& CopyExecutor::lora_factors(size_t delta) {
    if (lora_factors_for_ == delta) return lora_factors_;
    const LoraDelta& d = mapping_.lora_deltas.at(delta);
    const auto start = Clock::now();
    auto assemble_f32 = [&](const OutputTensor& factor, std::vector<float>& to) {
        std::vector<unsigned char> raw(static_cast<size_t>(numel(factor.shape)) * element_size(factor.source_dtype));
        assemble(factor, 0, factor.shape[0], raw.data());
        to.resize(static_cast<size_t>(numel(factor.shape)));
        cast_elements(raw.data(), factor.source_dtype, to.data(), DType::F32, to.size());
        // In the factor's stored shape, so the message's row and column are those of the file.
        require_finite(to.data(), factor.shape[0], factor.shape[1], factor.shape[1], {factor.name, 0, WeightUse::LoraFactor});
    };
    std::vector<float> a, b;
    assemble_f32(d.a, a);
    assemble_f32(d.b, b);
    lora_factors_ = make_lora_factors(d, a.data(), b.data());
    lora_factors_for_ = delta;
    stats_.lora_seconds += seconds_since(start);
    return lora_factors_;
}

void CopyExecutor::read(const StorageRef& storage, const SourceReader& file, uint64_t offset, unsigned char* out,
                        uint64_t length) {
    // Read in pieces, each CRC'd right after its read, while it is in the CPU cache (a whole
    // block's CRC after one large read would fetch it from memory again).
    const uint64_t piece = file.read_piece_bytes() > 0 ? file.read_piece_bytes() : kReadPiece;
    for (uint64_t done = 0; done < length;) {
        const uint64_t n = std::min<uint64_t>(piece, length - done);
        const auto start = Clock::now();
        file.read_exact(offset + done, out + done, n, "tensor data");
        const auto crc_start = Clock::now();
        stats_.read_seconds += std::chrono::duration<double>(crc_start - start).count();
        if (!skip_crc_) crcs_.add(storage, offset + done - storage.byte_offset, out + done, n);
        const auto hash_start = Clock::now();
        stats_.crc_seconds += std::chrono::duration<double>(hash_start - crc_start).count();
        block_hash_.landed(out + done, n);
        stats_.hash_seconds += seconds_since(hash_start);
        done += n;
    }
    finish_read(file, offset, length, 1);
}

// Bytes [offset, offset + length) of `file` read, in `calls` reads.
void CopyExecutor::finish_read(const SourceReader& file, uint64_t offset, uint64_t length, uint64_t calls) {
    if (evict_reads_ && length >= (1u << 20)) file.drop_cache(offset, length);
    stats_.bytes_read += length;
    stats_.reads += calls;
}

void CopyExecutor::read_rows_into(const StorageRef& storage, const SourceReader& file, uint64_t offset,
                                  unsigned char* out, int64_t rows, uint64_t row_size, uint64_t out_stride) {
    // Rows gathered into pieces of about kReadPiece bytes: each preadv's bytes are CRC'd while in cache.
    const int64_t per_read = std::max<int64_t>(1, static_cast<int64_t>(kReadPiece / std::max<uint64_t>(row_size, 1)));
    for (int64_t row = 0; row < rows; row += per_read) {
        const int64_t n = std::min(per_read, rows - row);
        pieces_.resize(static_cast<size_t>(n));
        for (int64_t k = 0; k < n; ++k)
            pieces_[static_cast<size_t>(k)] = {out + static_cast<uint64_t>(row + k) * out_stride, row_size};
        const uint64_t at = offset + static_cast<uint64_t>(row) * row_size;
        const auto start = Clock::now();
        scattered_ = pieces_;  // read_scattered consumes its pieces
        file.read_scattered(at, scattered_.data(), scattered_.size(), "tensor data");
        const auto crc_start = Clock::now();
        stats_.read_seconds += std::chrono::duration<double>(crc_start - start).count();
        if (!skip_crc_) crcs_.add_pieces(storage, at - storage.byte_offset, pieces_.data(), pieces_.size());
        stats_.crc_seconds += seconds_since(crc_start);
    }
    block_hash_.disturb();  // the rows land apart: the block is hashed whole
    const auto calls = static_cast<uint64_t>((rows + per_read - 1) / per_read);
    finish_read(file, offset, static_cast<uint64_t>(rows) * row_size, calls);
}

namespace {

// The boxes of `t`'s copies that write output rows [row_begin, row_end), cut to those rows
// (`dst_start` counted from row_begin): what assemble copies and prefetch asks for.
template <typename Visit>
void for_each_box(const OutputTensor& t, int64_t row_begin, int64_t row_end, const Visit& visit) {
    for (const BoxCopy& copy : t.copies) {
        Shape src_start = copy.src_start, dst_start = copy.dst_start, extent = copy.extent;
        if (!t.shape.empty()) {
            const int64_t lo = std::max(row_begin, copy.dst_start[0]);
            const int64_t hi = std::min(row_end, copy.dst_start[0] + copy.extent[0]);
            if (lo >= hi) continue;
            src_start[0] += lo - copy.dst_start[0];
            dst_start[0] = lo - row_begin;
            extent[0] = hi - lo;
        }
        visit(copy.source, src_start, extent, dst_start);
    }
}

// The bytes of the source file a box lies in: from its first element to its last.
struct SourceSpan {
    uint64_t offset = 0;
    uint64_t length = 0;
};
SourceSpan source_span(const TensorRef& src, const Shape& src_start, const Shape& extent) {
    int64_t first = src.storage_offset, last = src.storage_offset;
    for (size_t d = 0; d < extent.size(); ++d) {
        first += src_start[d] * src.stride[d];
        last += (src_start[d] + extent[d] - 1) * src.stride[d];
    }
    const uint64_t esize = element_size(src.dtype);
    return {src.storage.byte_offset + static_cast<uint64_t>(first) * esize, static_cast<uint64_t>(last - first + 1) * esize};
}

}  // namespace

void CopyExecutor::assemble(const OutputTensor& t, int64_t row_begin, int64_t row_end,
                            unsigned char* block) {
    Shape block_shape = t.assembled_shape();
    if (!block_shape.empty()) block_shape[0] = row_end - row_begin;
    for_each_box(t, row_begin, row_end, [&](size_t source, const Shape& src_start, const Shape& extent, const Shape& dst_start) {
        copy_box(mapping_.sources[source], src_start, extent, block_shape, dst_start, block);
    });
}

CopyExecutor::BlockRows CopyExecutor::first_block(const WriteTask& task) const {
    const int64_t rows = sizing_of(mapping_.tensors.at(task.tensor), max_memory_).block_rows;
    return {task.tensor, task.row_begin, std::min(task.row_end, task.row_begin + rows)};
}

// The block after the one that ends at row `end` of tasks[task]: the rest of this task, or the
// first block of the next one.
std::optional<CopyExecutor::BlockRows> CopyExecutor::next_block(const std::vector<WriteTask>& tasks, size_t task,
                                                                int64_t end, int64_t block_rows) const {
    if (end < tasks[task].row_end)
        return BlockRows{tasks[task].tensor, end, std::min(tasks[task].row_end, end + block_rows)};
    if (task + 1 == tasks.size()) return std::nullopt;
    return first_block(tasks[task + 1]);
}

// Asked for once a block is read (or, for the first, before): the disk reads the next block
// while this one is checksummed and handed on, instead of each block's reads waiting in turn
// (cold, the merge read at the disk's speed only between the checksums).
void CopyExecutor::prefetch(const BlockRows& block) {
    const OutputTensor& t = mapping_.tensors.at(block.tensor);
    if (t.role == OutputTensor::Role::Constant) return;
    for_each_box(t, block.row_begin, block.row_end, [&](size_t source, const Shape& src_start, const Shape& extent, const Shape&) {
        if (numel(extent) == 0) return;
        const TensorRef& src = mapping_.sources[source];
        const SourceSpan span = source_span(src, src_start, extent);
        open(src.storage.file).will_need(span.offset, span.length);
    });
}

void CopyExecutor::copy_box(const TensorRef& src, const Shape& src_start, const Shape& extent,
                            const Shape& block_shape, const Shape& dst_start, unsigned char* block) {
    const size_t esize = element_size(src.dtype);
    const size_t ndim = extent.size();
    if (numel(extent) == 0) return;
    const Shape dst_strides = contiguous_strides(block_shape);
    int64_t first_dst = 0;
    for (size_t d = 0; d < ndim; ++d) first_dst += dst_start[d] * dst_strides[d];
    const SourceReader& file = open(src.storage.file);
    const auto [file_offset, span] = source_span(src, src_start, extent);

    // The box is one contiguous run in both source and destination when, past its first
    // dim, it spans whole rows of a contiguous source and of the block.
    bool one_run = src.is_contiguous();
    for (size_t d = 1; d < ndim && one_run; ++d)
        one_run = extent[d] == src.shape[d] && extent[d] == block_shape[d];
    if (one_run) {
        read(src.storage, file, file_offset, block + first_dst * esize, span);
        return;
    }
    // Whole rows of a contiguous source that land in the block as equal segments, one per row
    // along dim 0 (a tensor-parallel shard split along dim 1): read straight into place.
    bool source_rows = src.is_contiguous() && ndim >= 2;
    for (size_t d = 1; d < ndim && source_rows; ++d) source_rows = extent[d] == src.shape[d];
    for (size_t d = 2; d < ndim && source_rows; ++d) source_rows = extent[d] == block_shape[d];
    if (source_rows) {
        read_rows_into(src.storage, file, file_offset, block + first_dst * esize, extent[0], span / extent[0],
                       static_cast<uint64_t>(dst_strides[0]) * esize);
        return;
    }
    // General case: read the covering span once, then gather the box out of it.
    if (span > max_memory_ / 2 && ndim > 0 && extent[0] > 1) {
        // Split along dim 0 so the span stays bounded.
        const int64_t half = extent[0] / 2;
        Shape s2 = src_start, d2 = dst_start, e1 = extent, e2 = extent;
        e1[0] = half;
        e2[0] = extent[0] - half;
        s2[0] += half;
        d2[0] += half;
        copy_box(src, src_start, e1, block_shape, dst_start, block);
        copy_box(src, s2, e2, block_shape, d2, block);
        return;
    }
    span_.resize(span);
    read(src.storage, file, file_offset, span_.data(), span);
    block_hash_.disturb();
    // The span starts at the box's first element, so the box's offsets there are the strides'.
    copy_strided_box(span_.data(), src.stride, block + first_dst * esize, dst_strides, extent, esize);
}

}  // namespace vmerge
