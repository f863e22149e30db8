#include "check_commands.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "collective_step.h"
#include "core/dtype.h"
#include "exit_code.h"
#include "exec/copy_executor.h"
#include "exec/reference_compare.h"
#include "hdf5/archive_layout.h"
#include "io/checksum.h"
#include "io/input_file.h"
#include "merge_inputs.h"
#include "output/write_journal.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/output_layout.h"
#include "plan/rank_work.h"
#include "rank_resources.h"
#include "safetensors/safetensors_file.h"
#include "verify_archive.h"

namespace vmerge {
namespace {

// The reference's headers and those of its lora_adapter/ folder (every rank reads the values
// of the rows it compares).
HfWeights read_reference(const std::string& dir) {
    HfWeights reference = read_hf_weights(dir);
    // An extracted adapter is compared with the reference's lora_adapter/ folder.
    const std::string adapter = dir + "/" + kAdapterWeightsFile;
    if (std::filesystem::exists(adapter)) {
        reference.files.push_back(read_safetensors_header(adapter));
        const auto& entries = reference.files.back().entries;
        for (size_t e = 0; e < entries.size(); ++e) reference.by_name[entries[e].name] = {reference.files.size() - 1, e};
    }
    return reference;
}

// Names, shapes and dtypes of the merge against the reference: the problems found, and the
// dtype each tensor is compared in (none: not comparable).
std::vector<std::optional<DType>> compare_names(const std::vector<OutputTensor>& tensors, const HfWeights& reference,
                                                std::vector<std::string>& problems,
                                                std::map<std::string, size_t>& cast_notes) {
    std::vector<std::optional<DType>> compare_as(tensors.size());  // reference_compare.h
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        auto it = reference.by_name.find(t.name);
        if (it == reference.by_name.end()) {
            problems.push_back(t.name + ": in the merge, not in the reference");
            continue;
        }
        const auto& e = reference.files[it->second.first].entries[it->second.second];
        if (e.shape != t.shape) {
            problems.push_back(t.name + ": shape " + shape_to_string(t.shape) + ", reference " + shape_to_string(e.shape));
            continue;
        }
        compare_as[i] = comparison_dtype(t.dtype, e.dtype);
        const std::string dtypes = "dtype " + std::string(torch_name(t.dtype)) + ", reference " + std::string(torch_name(e.dtype));
        if (!compare_as[i]) problems.push_back(t.name + ": " + dtypes);
        else if (e.dtype != t.dtype) ++cast_notes[dtypes + ": compared after casting to " + std::string(torch_name(*compare_as[i]))];
    }
    std::set<std::string> merged;
    for (const auto& t : tensors) merged.insert(t.name);
    for (const auto& [name, _] : reference.by_name)
        if (!merged.count(name)) problems.push_back(name + ": in the reference, not in the merge");
    return compare_as;
}

// verify --target_dir on a folder holding an archive (model.h5 and no safetensors weights).
bool holds_hdf5_archive(const std::string& dir) {
    std::error_code ec;
    return std::filesystem::exists(std::filesystem::symlink_status(std::filesystem::path(dir) / kArchiveFileName, ec)) &&
           !std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors", ec) &&
           !std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json", ec);
}

}  // namespace

int run_test(const Options& o, Comm& comm, std::ostream& out) {
    MergeInputs in = load_inputs(o, comm);
    const auto& tensors = in.mapping().tensors;
    HfWeights reference;
    std::vector<std::string> problems;
    collective_step(comm, "read the reference", [&] { reference = read_reference(o.test_hf_dir); });
    std::map<std::string, size_t> cast_notes;
    const auto compare_as = compare_names(tensors, reference, problems, cast_notes);
    const OutputLayout layout = plan_safetensors_layout(tensors, o.output.max_shard_size);
    const auto work = plan_rank_work(tensors, layout, comm.size());
    std::vector<std::string> value_problems;
    // With --merge_lora, a reference that differs from the merge is also compared with the
    // unmerged base weight: equal means whoever wrote it dropped the adapter.
    TensorMapping base = in.mapping();
    for (auto& t : base.tensors) t.lora_delta.reset();
    collective_step(comm, "compare", [&] {
        const uint64_t budget = max_memory(o, comm);
        CopyExecutor executor(in.mapping(), budget);
        CopyExecutor base_executor(base, budget);
        executor.skip_crc(o.debug.skip_crc);
        base_executor.skip_crc(o.debug.skip_crc);
        std::map<std::string, std::unique_ptr<InputFile>> files;
        std::vector<unsigned char> expected;
        CastComparison compare;
        executor.run(work[comm.rank()], [&](const RowBlock& b) {
            const size_t t = b.tensor;
            const int64_t row = b.row_begin, row_end = b.row_end;
            if (!compare_as[t] || value_problems.size() >= 10) return;
            const auto [f, e] = reference.by_name.at(tensors[t].name);
            const auto& entry = reference.files[f].entries[e];
            auto& file = files[reference.files[f].path];
            if (!file) file = std::make_unique<InputFile>(reference.files[f].path);
            const size_t count = b.size / element_size(tensors[t].dtype);
            const size_t row_elems = row_bytes(tensors[t]) / element_size(tensors[t].dtype);
            expected.resize(count * element_size(entry.dtype));
            file->read_exact(entry.begin + row * row_elems * element_size(entry.dtype), expected.data(), expected.size(),
                             "reference tensor");
            size_t bad = 0;
            if (!compare.match(b.data, tensors[t].dtype, expected.data(), entry.dtype, *compare_as[t], count, o.atol, o.rtol, &bad)) {
                bool equals_base = false;
                if (tensors[t].lora_delta)
                    base_executor.run({{t, row, row_end}}, [&](const RowBlock& unmerged) {
                        size_t ignored = 0;
                        equals_base = unmerged.size == b.size &&
                                      compare.match(unmerged.data, tensors[t].dtype, expected.data(), entry.dtype,
                                                    *compare_as[t], count, 0, 0, &ignored);
                    });
                value_problems.push_back(tensors[t].name + ": values differ first at row " +
                                         std::to_string(row + static_cast<int64_t>(bad / std::max<size_t>(row_elems, 1))) +
                                         " (rows " + std::to_string(row) + ".." + std::to_string(row_end) + " checked)" +
                                         (equals_base ? "; the reference equals the base weight without the LoRA update: "
                                                        "the adapter was not merged into it (lora_alpha 0?)" : ""));
            }
        });
    });
    nlohmann::json mine = value_problems;
    const auto gathered = comm.allgather(mine.dump());
    for (const auto& g : gathered)
        for (const auto& p : nlohmann::json::parse(g)) problems.push_back(p.get<std::string>());
    if (comm.rank() != 0) return problems.empty() ? kExitSuccess : kExitFailure;
    for (const auto& [what, n] : cast_notes) out << "vmerge test: note: " << n << " tensors " << what << "\n";
    if (problems.empty()) {
        out << "vmerge test: OK, " << tensors.size() << " tensors match " << o.test_hf_dir
            << (o.atol > 0 || o.rtol > 0 ? " within tolerance" : " bit for bit") << "\n";
        return kExitSuccess;
    }
    out << "vmerge test: " << problems.size() << " difference" << (problems.size() > 1 ? "s" : "")
        << " against " << o.test_hf_dir << ":\n";
    constexpr size_t kListed = 20;
    for (size_t i = 0; i < problems.size() && i < kListed; ++i) out << "  " << problems[i] << "\n";
    if (problems.size() > kListed) out << "  and " << problems.size() - kListed << " more\n";
    return kExitFailure;
}

int run_verify(const Options& o, Comm& comm, std::ostream& out) {
    if (holds_hdf5_archive(o.output.target)) return verify_hdf5_archive(o, comm, out);
    std::vector<std::string> warnings;
    HfWeights weights;
    collective_step(comm, "verify", [&] {
        if (comm.rank() != 0) return;
        weights = read_hf_weights(o.output.target);
        for (const auto& f : weights.files) {
            for (const auto& w : f.convention_warnings) warnings.push_back(f.path + ": " + w);
            auto it = f.metadata.find("format");
            if (it == f.metadata.end() || it->second != "pt")
                warnings.push_back(f.path + ": __metadata__ lacks {\"format\":\"pt\"} (transformers < 4.4x fails on it)");
        }
    });
    if (comm.rank() != 0) return kExitSuccess;
    for (const auto& w : warnings) out << "warning: " << w << "\n";
    if (std::filesystem::exists(o.output.target + "/" + kChecksumsFile)) {
        const auto problems = verify_checksums(o.output.target);
        if (!problems.empty()) {
            out << "vmerge verify: " << problems.size() << (problems.size() > 1 ? " ranges differ" : " range differs")
                << " from what merge wrote:\n";
            for (const auto& p : problems) out << "  " << p << "\n";
            return kExitFailure;
        }
        out << "vmerge verify: every byte matches the checksums merge recorded (" << kChecksumsFile << ")\n";
    } else {
        out << "vmerge verify: no " << kChecksumsFile << " (not written by vmerge merge): checksums not checked\n";
    }
    out << "vmerge verify: OK, " << weights.by_name.size() << " tensors in " << weights.files.size() << " file"
        << (weights.files.size() > 1 ? "s" : "") << " follow the safetensors rules\n";
    return kExitSuccess;
}


}  // namespace vmerge
