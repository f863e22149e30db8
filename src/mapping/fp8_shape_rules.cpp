#include "mapping/fp8_shape_rules.h"

#include <map>
#include <utility>

#include "mapping/fp8_quantization.h"

namespace vmerge {
namespace {

constexpr int64_t kBlock = 128;

std::string last_name(const std::string& module) {
    const size_t dot = module.rfind('.');
    return dot == std::string::npos ? module : module.substr(dot + 1);
}

bool is_expert(const std::string& module) { return module.find(".experts.") != std::string::npos; }

// vLLM's tensor-parallel split of a layer: its output rows (column parallel) or its input
// columns (row parallel); k/v are left out (replicated when there are fewer KV heads than ranks).
enum class Split { None, Rows, Cols };
Split tp_split(const std::string& module) {
    const std::string name = last_name(module);
    if (name == "o_proj" || name == "down_proj" || name == "w2") return Split::Cols;
    if (name == "q_proj" || name == "gate_proj" || name == "up_proj" || name == "q_b_proj" || name == "kv_b_proj" ||
        name == "w1" || name == "w3")
        return Split::Rows;
    return Split::None;
}

// One rule: how many layers break it and the first, with what is wrong.
struct Broken {
    size_t count = 0;
    std::string example;
    void add(const std::string& what) {
        if (count++ == 0) example = what;
    }
};

std::string shape_text(const QuantizedLinear& l) {
    return l.module + " [" + std::to_string(l.rows) + ", " + std::to_string(l.cols) + "]";
}

std::string line(const char* rule, const std::string& requirement, const Broken& b) {
    return "warning: block FP8 shape rule " + std::string(rule) + " (" + requirement + "): " + std::to_string(b.count) +
           " layers break it, e.g. " + b.example + "; the file is written as asked, but vLLM will refuse to load it";
}

}  // namespace

std::vector<std::string> block_fp8_shape_warnings(const std::vector<QuantizedLinear>& linears) {
    Broken fused, moe;
    std::map<int, Broken> tp;  // by TP size
    for (const QuantizedLinear& l : linears) {
        const FusedPart part = fused_part(l.module);
        const bool expert = is_expert(l.module);
        if (!expert && !part.group.empty() && !part.last && l.rows % kBlock != 0)
            fused.add(shape_text(l) + ": " + std::to_string(l.rows) + " rows");
        if (expert) {
            const Split split = tp_split(l.module);
            const int64_t intermediate = split == Split::Cols ? l.cols : l.rows;
            if (split != Split::None && intermediate % kBlock != 0)
                moe.add(shape_text(l) + ": intermediate size " + std::to_string(intermediate));
        }
        const Split split = tp_split(l.module);
        if (split == Split::None) continue;
        const int64_t size = split == Split::Rows ? l.rows : l.cols;
        for (int ranks : {2, 4, 8}) {
            if (size % (kBlock * ranks) == 0) continue;
            const std::string per_rank =
                size % ranks ? "not divisible by " + std::to_string(ranks)
                             : std::to_string(size) + " / " + std::to_string(ranks) + " = " + std::to_string(size / ranks);
            tp[ranks].add(shape_text(l) + (split == Split::Rows ? ": output " : ": input ") + per_rank);
        }
    }
    std::vector<std::string> out;
    if (fused.count)
        out.push_back(line("fused-parts-128",
                           "vLLM fuses q/k/v, gate/up and q_a/kv_a_with_mqa; every part but the last must have a "
                           "multiple of 128 rows, at any tensor-parallel size",
                           fused));
    if (moe.count)
        out.push_back(line("moe-intermediate-128", "vLLM's FP8 MoE layer needs the expert intermediate size a multiple of 128",
                           moe));
    for (const auto& [ranks, broken] : tp)
        out.push_back(line("tp-shard-128",
                           "at tensor-parallel size " + std::to_string(ranks) +
                               ", each rank's part of a column-parallel output or row-parallel input must be a multiple "
                               "of 128",
                           broken));
    return out;
}

}  // namespace vmerge
