#include "routed_fsdp_merge.h"

#include <algorithm>

#include "collective_step.h"
#include "formats/fsdp/fsdp_routing.h"
#include "fsdp_shard_routing.h"
#include "io/checksum.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/rank_work.h"
#include "scan_routing.h"
#include "torch/scan_serialization.h"

namespace vmerge {
namespace {

// File 0's scan, from rank 0 (which scanned it) to every rank.
ScannedFile first_file(const std::vector<ScannedFile>& mine, Comm& comm) {
    std::string text;
    if (comm.rank() == 0) text = serialize_scans(std::vector<ScannedFile>{mine.at(0)});
    comm.broadcast(text, 0);
    std::vector<ScannedFile> scans = deserialize_scans(text);
    if (scans.size() != 1) throw Error("internal: file 0's scan arrived as " + std::to_string(scans.size()) + " files");
    return std::move(scans[0]);
}

// Every file's check, each made by the rank that scanned the file, in file order.
std::vector<FsdpFileCheck> checks_of_every_file(const std::vector<ScannedFile>& mine, const ScannedFile& first,
                                                size_t files, Comm& comm) {
    std::vector<FsdpFileCheck> own;
    collective_step(comm, "routing checks", [&] {
        for (size_t i = 0; i < mine.size(); ++i)
            own.push_back(check_fsdp_file(mine[i], static_cast<size_t>(comm.rank()) + i * comm.size(), first, files));
    });
    std::vector<FsdpFileCheck> every;
    for (const std::string& message : comm.allgather(serialize_file_checks(own)))
        for (FsdpFileCheck& check : deserialize_file_checks(message)) every.push_back(std::move(check));
    std::sort(every.begin(), every.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
    return every;
}

// What the all-gather path's ledger settles for a routable checkpoint: every non-empty shard
// written (the skeleton reads every key whole), every empty one dropped as such.
SourceAccount routed_account(const std::vector<FsdpFileCheck>& checks) {
    SourceAccount account;
    const std::string empty = drop_reason_text(DropReason::EmptyShard);
    for (const FsdpFileCheck& c : checks) {
        account.written += c.entries - c.empty_shards;
        if (c.empty_shards == 0) continue;
        account.dropped[empty] += c.empty_shards;
        auto& examples = account.examples[empty];
        for (const std::string& example : c.empty_examples)
            if (examples.size() < 3) examples.push_back(example);
    }
    return account;
}

// One digest of every file's scan digest, in file order: what --resume finds unchanged.
std::string digest_of_scans(const std::vector<FsdpFileCheck>& checks) {
    std::string bytes;
    for (const FsdpFileCheck& c : checks)
        for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<char>((c.scan_digest >> (8 * b)) & 0xff));
    return hex64(xxh64(bytes.data(), bytes.size()));
}

}  // namespace

std::optional<MappedModel> routed_skeleton_model(const ScannedFile& first, const std::vector<FsdpFileCheck>& checks,
                                                 const SkeletonMapper& map_skeleton, std::string& why_not) {
    std::optional<MappedModel> model = map_skeleton(fsdp_skeleton_scan(first), routed_account(checks));
    why_not = model ? skeleton_unroutable(model->mapped.mapping, first)
                    : "the mapping needs more than the output tensors' names and shapes";
    if (!why_not.empty()) return std::nullopt;
    return model;
}

std::vector<std::vector<WriteTask>> routed_rank_work(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size,
                                                     int ranks) {
    return plan_rank_work(tensors, plan_safetensors_layout(tensors, max_shard_size), ranks);
}

std::optional<RoutedFsdpMerge> route_fsdp_merge(const std::vector<ScannedFile>& mine, size_t files,
                                                const SkeletonMapper& map_skeleton, uint64_t max_shard_size,
                                                uint64_t budget, Comm& comm, std::string& why_not) {
    const ScannedFile first = first_file(mine, comm);
    const std::vector<FsdpFileCheck> checks = checks_of_every_file(mine, first, files, comm);
    why_not = routing_verdict(checks, files);
    if (!why_not.empty()) return std::nullopt;
    // The same on every rank from here to the routing: file 0's scan and the checks are.
    std::optional<MappedModel> model = routed_skeleton_model(first, checks, map_skeleton, why_not);
    // The same on every rank unless a rank ran out of something the others had: agree.
    const std::vector<std::string> verdicts = comm.allgather(why_not.empty() ? "" : "all-gather");
    if (std::any_of(verdicts.begin(), verdicts.end(), [](const std::string& v) { return !v.empty(); })) {
        if (why_not.empty()) why_not = "another rank could not map the skeleton";
        return std::nullopt;
    }
    RoutedFsdpMerge routed;
    if (comm.rank() == 0) routed.scans_digest = digest_of_scans(checks);
    const std::vector<OutputTensor>& tensors = model->mapped.mapping.tensors;
    const auto work = routed_rank_work(tensors, max_shard_size, comm.size());
    StorageReaders readers;
    collective_step(comm, "route", [&] { readers = fsdp_shard_readers(mine, first, model->mapped.mapping, work); });
    const std::vector<ScannedFile> received = route_scans(comm, mine, readers);
    for (const ScannedFile& file : received) routed.received_entries += file.tensors.size();
    collective_step(comm, "compose", [&] {
        model->mapped.mapping = compose_routed_mapping(model->mapped.mapping, first, received, work.at(comm.rank()));
    });
    collective_step(comm, "planning budget", [&] {
        const MetadataBytes bytes = mapping_metadata_bytes(model->mapped.mapping);
        if (const std::string over = metadata_over_budget(routed.received_entries, bytes, budget, comm.size()); !over.empty())
            throw Error(over);
    });
    routed.model = std::move(*model);
    return routed;
}

}  // namespace vmerge
