// Scan routing over MPI on a real checkpoint: every rank maps the checkpoint as a merge does
// (load_inputs: the scans all-gathered), plans the merge over the job's ranks, scans its own
// files again (r, r+P, ...) and routes their entries (route_scans over MpiComm::alltoall). Each
// rank then checks that it received exactly the stored records its share's copies and LoRA
// factors read (worked out here from the mapping, copy by copy), each once, as scanned, and
// prints a line saying what it received. Exit 0 when every rank's check holds.
//   scan_routing_check --local_dir DIR [other inspect options]
// With --routed_merge first: the merge's own routed planning (load_inputs of a merge, routed_fsdp_merge.h)
// instead of routing here: each rank must have planned routed and hold, as its mapping's sources,
// exactly the records its share reads in the all-gather's mapping, each once.
//   scan_routing_check --routed_merge --local_dir DIR [other inspect options]
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "command_line.h"
#include "formats/registry.h"
#include "merge_inputs.h"
#include "mpi_comm.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/rank_inputs.h"
#include "plan/rank_work.h"
#include "plan/storage_readers.h"
#include "scan_routing.h"

namespace vmerge {
namespace {

using Record = StorageRecord;

// The records `tasks` read, each with the view the mapping reads of it (a view of the record:
// the scanned entry's own storage).
std::map<Record, StorageRef> records_read(const TensorMapping& mapping, const std::vector<WriteTask>& tasks) {
    std::map<Record, StorageRef> records;
    auto add = [&](const BoxCopy& c) {
        const StorageRef& s = mapping.sources[c.source].storage;
        records.emplace(Record{s.file, s.byte_offset}, s);
    };
    for (const WriteTask& task : tasks) {
        const OutputTensor& t = mapping.tensors[task.tensor];
        for (const BoxCopy& c : t.copies)
            if (numel(c.extent) > 0 && feeds_rows(t, c, task)) add(c);
        if (t.lora_delta)
            for (const OutputTensor* factor : {&mapping.lora_deltas[*t.lora_delta].a, &mapping.lora_deltas[*t.lora_delta].b})
                for (const BoxCopy& c : factor->copies) add(c);
    }
    return records;
}

// This rank's check; returns the problems found (0: all well).
int check_rank(Comm& comm, const Options& o) {
    const MergeInputs in = load_inputs(o, comm);
    const std::vector<OutputTensor>& tensors = in.mapping().tensors;
    const auto work = plan_rank_work(tensors, plan_safetensors_layout(tensors, o.output.max_shard_size), comm.size());
    std::vector<ScannedFile> mine;
    for (size_t i = comm.rank(); i < in.checkpoint.jobs.size(); i += comm.size())
        mine.push_back(scan_job(in.checkpoint, in.checkpoint.jobs[i]));
    std::vector<std::string> messages =
        comm.alltoall(routed_scan_messages(mine, storage_readers(in.mapping(), work), comm.size()));
    uint64_t bytes = 0;
    for (const auto& m : messages) bytes += m.size();
    const std::vector<ScannedFile> received = received_scans(messages);
    const std::map<Record, StorageRef> expected = records_read(in.mapping(), work[comm.rank()]);
    int problems = 0;
    std::set<Record> got;
    size_t entries = 0;
    for (const ScannedFile& file : received)
        for (const StateDictEntry& e : file.tensors) {
            ++entries;
            const Record record{e.tensor.storage.file, e.tensor.storage.byte_offset};
            const auto it = expected.find(record);
            if (it == expected.end() || it->second.key != e.tensor.storage.key ||
                it->second.byte_size != e.tensor.storage.byte_size) {
                std::fprintf(stderr, "rank %d received %s '%s', which its share does not read as such\n", comm.rank(),
                             file.path.c_str(), e.key.c_str());
                ++problems;
            }
            got.insert(record);
        }
    for (const auto& [record, _] : expected)
        if (!got.count(record)) {
            std::fprintf(stderr, "rank %d did not receive the record at byte %llu of %s\n", comm.rank(),
                         static_cast<unsigned long long>(record.second), record.first.c_str());
            ++problems;
        }
    std::printf("rank %d: %zu row ranges read %zu records; received %zu entries of %zu files, %llu bytes%s\n",
                comm.rank(), work[comm.rank()].size(), expected.size(), entries, received.size(),
                static_cast<unsigned long long>(bytes), problems ? "" : ": ok");
    return problems;
}

// The merge's routed planning on this rank against the all-gather's mapping; returns the
// problems found (0: all well).
int check_routed_merge(Comm& comm, Options o) {
    const MergeInputs gathered = load_inputs(o, comm);  // inspect: the all-gather
    o.command = "merge";
    const MergeInputs routed = load_inputs(o, comm);
    const std::vector<OutputTensor>& tensors = gathered.mapping().tensors;
    const auto work = plan_rank_work(tensors, plan_safetensors_layout(tensors, o.output.max_shard_size), comm.size());
    const std::map<Record, StorageRef> expected = records_read(gathered.mapping(), work[comm.rank()]);
    int problems = 0;
    if (routed.planning != "routed") {
        std::fprintf(stderr, "rank %d planned %s: %s\n", comm.rank(), routed.planning.c_str(), routed.planning_note.c_str());
        ++problems;
    }
    std::map<Record, int> held;
    for (const TensorRef& source : routed.mapping().sources) ++held[{source.storage.file, source.storage.byte_offset}];
    for (const auto& [record, count] : held)
        if (count != 1 || !expected.count(record)) {
            std::fprintf(stderr, "rank %d holds the record at byte %llu of %s %d times; its share reads it %s\n",
                         comm.rank(), static_cast<unsigned long long>(record.second), record.first.c_str(), count,
                         expected.count(record) ? "once" : "not at all");
            ++problems;
        }
    for (const auto& [record, _] : expected)
        if (!held.count(record)) {
            std::fprintf(stderr, "rank %d did not receive the record at byte %llu of %s\n", comm.rank(),
                         static_cast<unsigned long long>(record.second), record.first.c_str());
            ++problems;
        }
    std::printf("rank %d: routed merge, %zu row ranges read %zu records; received %zu entries (the all-gather: %zu)%s\n",
                comm.rank(), work[comm.rank()].size(), expected.size(), routed.entries_received,
                gathered.entries_received, problems ? "" : ": ok");
    return problems;
}

}  // namespace
}  // namespace vmerge

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int problems = 0;
    {
        vmerge::MpiComm comm(MPI_COMM_WORLD);
        std::vector<const char*> args{"vmerge-mpi", "inspect"};
        const bool routed_merge = argc > 1 && std::string(argv[1]) == "--routed_merge";
        for (int i = routed_merge ? 2 : 1; i < argc; ++i) args.push_back(argv[i]);
        try {
            const auto options = vmerge::parse_command_line(static_cast<int>(args.size()), args.data(), false);
            if (!options) problems = 1;
            else problems = routed_merge ? vmerge::check_routed_merge(comm, *options) : vmerge::check_rank(comm, *options);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
            comm.abort(1);
        }
        int total = 0;
        MPI_Allreduce(&problems, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        problems = total;
    }
    MPI_Finalize();
    return problems == 0 ? 0 : 1;
}
