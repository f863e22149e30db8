#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/row_block.h"
#include "io/page_cache.h"
#include "core/tensor_mapping.h"
#include "output/output_folder.h"
#include "output/target_guard.h"
#include "output/write_journal.h"
#include "plan/output_layout.h"
#include "plan/rank_work.h"

namespace vmerge {

// What every output format is told about the merge it writes.
struct OutputOptions {
    std::string target;           // --target_dir
    bool force = false;           // --force
    bool resume = false;          // --resume: continue an earlier staging folder
    bool restart = false;         // --restart: discard an earlier staging folder and start over
    std::string reuse;            // --reuse: an earlier output whose unchanged files are taken over
    bool check_free_space = true; // off with --skip_free_space_check
    // A merge --resume can continue: ranks journal their blocks (progress display), CRCs are
    // checked before the commit, a failure keeps the staging folder. A format without --resume
    // turns it off.
    bool resumable = false;
    uint64_t max_shard_size = 0;  // --max_shard_size (formats with several files)
    int zstd_level = 0;           // --compress zstd:LEVEL; 0: none
    uint64_t chunk_bytes = 0;     // --hdf5_chunk_size: bytes per compressed chunk
    uint64_t max_memory = 0;      // this rank's budget
    PageCachePolicy page_cache = PageCachePolicy::Keep;  // for what is read and what is written
    int rank = 0;
    int ranks = 1;
    // The job's communicator, opaque here: mpi/ fills it (Comm::parallel_context) and the formats
    // that write collectively read it (the HDF5 archive: a `const MPI_Comm*`); null when the job
    // runs as one process without MPI.
    const void* parallel = nullptr;
    std::string hf_dir;                          // the HF folder whose non-weight files are kept ("" none)
    std::vector<std::string> hf_training_files;  // in hf_dir, not copied (plan_hf_file_copies)
    std::map<std::string, std::string> generated;  // files the merge writes itself (they replace copied ones)
    uint64_t upload_part_size = 0;  // a bucket target's multipart part size (0: the default)
};

// The collectives a format that trades facts or bytes between ranks gets from the driver (which
// alone knows the communicator): Comm::allgather and Comm::alltoall.
struct OutputExchange {
    std::function<std::vector<std::string>(const std::string&)> allgather;
    std::function<std::vector<std::string>(std::vector<std::string>)> alltoall;
};

// One merge's output in one format, written inside the shared staging lifecycle
// (output_folder.h). The driver calls, on every rank unless said otherwise, in this order:
//   check_adapter, check, plan, prepare (rank 0), gather_files, open, the copy executor's run over
//   tasks() with write / holds / task_done, finish, commit (rank 0, after every rank finished).
// On a failure of this rank: abandon.
class OutputFormat {
public:
    virtual ~OutputFormat() = default;

    // Error (on every rank) when the output cannot hold these tensors' names.
    virtual void check(const TensorMapping& /*mapping*/) const {}
    // Error when the output cannot hold an adapter that was not folded into the weights.
    virtual void check_adapter(const std::string& /*local_dir*/, bool /*unfolded_adapter*/) const {}
    // Where every tensor goes (the same on every rank). May realign `mapping`'s rows (a
    // compressed chunk gets one writer); it must outlive this object.
    virtual void plan(TensorMapping& mapping) = 0;
    virtual const OutputLayout& layout() const = 0;
    // Rank 0, with the target checked and locked: the staging folder.
    virtual StagingState prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) = 0;
    // The HF files the output holds besides tensors; notes on files not kept (for rank 0 to print).
    virtual std::vector<std::string> gather_files() { return {}; }
    // Every rank, after prepare: what rank 0 prepared that the others need (a bucket's upload ids).
    // The collective comes first, so a rank that fails afterwards fails the step on every rank.
    virtual void share_prepared(const OutputExchange& /*with*/) {}
    // This rank's writer.
    virtual void open() = 0;
    // This rank's executor tasks in write order (after open), and the memory the executor may use.
    virtual std::vector<WriteTask> tasks() const = 0;
    virtual uint64_t executor_memory() const { return options_.max_memory; }
    // The row-block sink: rows [row_begin, row_end) of `tensor` in the output dtype (called on
    // the executor's writer thread).
    virtual void write(const RowBlock& block) = 0;
    // A format that checksums what it writes takes the bytes' xxh64 with the block (RowBlock::xxh64)
    // from the executor, which computes it on its reading thread (CopyExecutor::hash_blocks).
    virtual bool takes_block_hashes() const { return false; }
    // Whether an earlier run already wrote these rows intact (--resume).
    virtual bool holds(size_t /*tensor*/, int64_t /*row_begin*/, int64_t /*row_end*/) { return false; }
    // Every block of `task` went through write (called on the executor's own thread).
    virtual void task_done(const WriteTask& /*task*/) {}
    // This rank wrote its last block.
    virtual void finish() = 0;
    // Every rank, after every rank finished its copy: rounds of trading between ranks before the
    // commit (a bucket's part pieces, then its part ETags), each a collective step of its own that
    // begins with its collective.
    virtual int exchange_rounds() const { return 0; }
    virtual void exchange(int /*round*/, const OutputExchange& /*with*/) {}
    // --reuse (formats that take it): this rank's findings, and, with every rank's, what
    // completes the reuse before the commit (notes for rank 0 to print).
    virtual std::string reuse_state() const { return ""; }
    virtual std::vector<std::string> complete_reuse(const std::vector<std::string>& /*states*/) { return {}; }
    // This rank failed: close what it opened; the staging folder goes unless it is resumable.
    virtual void abandon() = 0;
    // Rank 0: everything into place. Returns notes for the user.
    virtual std::vector<std::string> commit() = 0;
    // Whether the format describes what it wrote itself (summary), instead of the merge's report.
    virtual bool has_summary() const { return false; }
    // Rank 0, after the commit: lines that describe what was written.
    virtual std::vector<std::string> summary(double /*seconds*/, double /*copy_seconds*/) const { return {}; }
    // Whether ranks write collectively (a failing rank must stop the others, who would wait).
    virtual bool collective() const { return false; }

    const OutputOptions& options() const { return options_; }

protected:
    explicit OutputFormat(OutputOptions options) : options_(std::move(options)) {}
    OutputOptions options_;
};

}  // namespace vmerge
