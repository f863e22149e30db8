#include "formats/megatron/megatron_lora.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/text_pattern.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const TextPattern kAdapterFile(R"(mp_rank_(\d+)(?:_(\d+))?(?:_(\d+))?_adapter\.pt)");

}  // namespace

bool has_megatron_adapters(const std::string& dir) {
    for (const auto& entry : list_input_folder(join_path(dir, "adapter_checkpoint")))
        if (kAdapterFile.full_match(entry.name)) return true;
    return false;
}

MegatronLegacyCheckpoint discover_megatron_adapters(const std::string& dir) {
    MegatronLegacyCheckpoint ckpt;
    ckpt.dir = join_path(dir, "adapter_checkpoint");
    ckpt.flavor = "verl";
    for (const auto& entry : list_input_folder(ckpt.dir)) {
        const std::string& name = entry.name;
        TextMatch m;
        if (!kAdapterFile.full_match(name, m)) continue;
        MegatronRankFile file = rank_file_from_name(m, name);
        file.path = join_path(ckpt.dir, name);
        require_regular_file(file.path);
        ckpt.files.push_back(std::move(file));
    }
    if (ckpt.files.empty()) throw Error(ckpt.dir + ": no mp_rank_*_adapter.pt files");
    std::sort(ckpt.files.begin(), ckpt.files.end(), [](const auto& a, const auto& b) { return a.dir_name < b.dir_name; });
    return ckpt;
}

TensorMapping take_megatron_adapters(TensorMapping& canonical) {
    TensorMapping adapters;
    adapters.sources = canonical.sources;
    std::vector<OutputTensor> base;
    for (OutputTensor& t : canonical.tensors)
        (t.name.find(".adapter.") != std::string::npos ? adapters.tensors : base).push_back(std::move(t));
    canonical.tensors = std::move(base);
    return adapters;
}

TensorMapping megatron_adapters_to_peft(const TensorMapping& canonical, const ArchitectureInfo& arch,
                                        const HfConfig& config, std::vector<std::string>& notes) {
    static const TextPattern adapter_key(R"(^(decoder\.layers\.(\d+)\..*)\.adapter\.(linear_in|linear_out)\.weight$)");
    // A grouped-experts adapter has no expert number: `mlp.experts.linear_fcN.adapter.*`
    // (per-expert ones are `mlp.experts.<e>.linear_fcN.adapter.*` once the rank files or the
    // archive's expert axis are read).
    static const TextPattern grouped_expert_adapter(R"(^.*\.mlp\.experts\.linear_fc[12]\.adapter\..*$)");
    TensorMapping out;
    out.sources = canonical.sources;
    std::set<int64_t> layers;
    for (const OutputTensor& t : canonical.tensors) {
        TextMatch m;
        if (t.name.find("weight_magnitude") != std::string::npos)
            throw Error("'" + t.name + "' is a DoRA magnitude: DoRA is not a plain LoRA update and vmerge does not support it");
        if (grouped_expert_adapter.full_match(t.name))
            throw Error("'" + t.name + "': one adapter shared by the grouped experts (TEGroupedMLP) of an expert-parallel "
                        "rank; Megatron-Bridge exports it to every expert of that rank, a layout vmerge could not confirm "
                        "from a real checkpoint (it needs transformer-engine), so it is not supported. Adapters on "
                        "SequentialMLP experts (mlp.experts.local_experts.<e>) and on shared experts are supported");
        if (!adapter_key.full_match(t.name, m))
            throw Error("'" + t.name + "': expected <module>.adapter.linear_in.weight or .adapter.linear_out.weight "
                        "(Megatron-Bridge LoRA; canonical_lora's per-projection adapters are not supported)");
        layers.insert(parse_bounded_int(m.str(2), 0, kMaxLayers - 1, "'" + t.name + "': layer number"));
        const std::string base = std::string(m[1]) + ".weight";
        const auto match = match_rule(arch, base);
        if (!match) throw Error("'" + t.name + "': no " + arch.name + " name for its base weight '" + base + "'");
        if (match->rule->stack_experts)
            throw Error("'" + t.name + "': its base weight '" + base + "' is written fused with the other experts (" +
                        match->hf_names[0] + ", stack_experts in " + arch.table_file + "), which a PEFT adapter cannot "
                        "name per expert; exporting or folding adapters on fused experts is not supported");
        const bool is_a = m[3] == "linear_in";
        std::vector<OutputTensor> made;
        if (is_a) {
            // linear_in feeds every projection the fused base splits into.
            for (const auto& hf : match->hf_names) {
                OutputTensor a = t;
                a.name = hf;
                made.push_back(std::move(a));
            }
        } else {
            OutputTensor b = t;
            b.name = base;
            made = split_to_hf(b, *match, arch, config, notes);
        }
        for (auto& o : made) {
            const std::string module = o.name.substr(0, o.name.size() - std::string(".weight").size());
            o.name = "base_model.model." + module + (is_a ? ".lora_A.default.weight" : ".lora_B.default.weight");
            check_copies_tile_output(o, out.sources);
            out.tensors.push_back(std::move(o));
        }
    }
    if (static_cast<int64_t>(layers.size()) != arch.layers) {
        std::string missing;
        for (int64_t i = 0; i < arch.layers; ++i)
            if (!layers.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
        throw Error("the adapter checkpoint covers " + std::to_string(layers.size()) + " of the " + std::to_string(arch.layers) +
                    " layers of " + config.dir + "/config.json (missing: " + missing +
                    "); verl saves only the first virtual-pipeline chunk's adapters, so a run with virtual pipeline "
                    "parallelism cannot be exported from them");
    }
    return out;
}

}  // namespace vmerge
