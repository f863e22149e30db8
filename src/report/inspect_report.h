#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_ref.h"
#include "formats/simulated/routed_planning_figures.h"
#include "formats/simulated/scan_exchange_model.h"
#include "core/tensor_mapping.h"
#include "mapping/quantization.h"
#include "plan/output_layout.h"
#include "plan/rank_work.h"

namespace vmerge {

// What `vmerge-mpi inspect` reports: one model, printed as text or as JSON (--json), so the
// two always say the same thing.
struct InspectReport {
    nlohmann::ordered_json facts;  // the mapping's facts (backend, layout, tp, pp, architecture, ...)
    std::string backend, description;
    std::string local_dir, hf_config;  // hf_config "": none read (a checkpoint written as stored)
    // How --local_dir led to the checkpoint folder (a verl run or step folder); empty: it is one.
    std::vector<std::string> resolved;
    std::string architecture;      // "" when config.json names none
    bool states_parallelism = false;  // the text states tp/pp/vpp/ep (from the facts)
    size_t scanned_archives = 0;
    std::vector<std::string> notes;
    uint64_t source_entries_written = 0;
    nlohmann::ordered_json dropped;
    // One example list per distinct DTensor sharding, in first-seen order (FSDP checkpoints).
    bool lists_shardings = false;
    std::vector<std::pair<std::string, std::vector<std::string>>> shardings;
    // The backend's own lines and JSON facts (InspectFacts: an archive's compression and storage).
    std::vector<std::pair<std::string, std::string>> backend_lines;
    std::string backend_json_key;
    nlohmann::ordered_json backend_json;
    struct Tensor {
        std::string name;
        Shape shape;
        std::string stored_dtype, dtype;
        uint64_t bytes = 0;
        size_t pieces = 0;
    };
    std::vector<Tensor> tensors;
    uint64_t total_bytes = 0;
    struct File {
        std::string name;
        uint64_t bytes = 0;
        size_t tensors = 0;
    };
    std::vector<File> files;
    struct RankShare {
        int rank = 0;
        uint64_t bytes = 0;
        size_t tasks = 0;
    };
    int ranks = 1;
    std::vector<RankShare> per_rank;
    uint64_t max_memory = 0;
    bool max_memory_automatic = true;
    std::string page_cache;         // keep | evict
    std::string page_cache_reason;  // why (PageCacheChoice::reason)
    struct Quantization {
        std::string scheme;       // quant_scheme_name: int | fp8 | fp8-block | fp8-dynamic | nvfp4 | mxfp4
        std::string description;  // quantization_description
        // The scheme's own parameters (quantization_parameters), its scale_dtype filled in with
        // the weight dtype where the scale is stored in it.
        QuantizationParameters parameters;
        uint64_t bytes_before = 0, bytes_after = 0;
        std::vector<std::string> ignored;
        std::vector<std::string> shape_warnings;  // block FP8 and FP8_BLOCK: the vLLM shape rules broken
    };
    std::optional<Quantization> quantization;
    struct Lora {
        bool merge = false;
        size_t modules = 0;
        std::vector<int64_t> ranks;
        double alpha = 0;
        std::string alpha_source;
    };
    std::optional<Lora> lora;
    double plan_seconds = 0, total_seconds = 0;
    std::optional<ScanExchangeFigures> exchange;  // --simulate: one merging rank's planning
    std::optional<RoutedExchangeFigures> routed;  // --simulate: the scans routed instead
    // --simulate: how a merge of the simulated save would plan ("routed" or "all-gather"), why
    // not routed where it would not, and the model of the routed planning where it would.
    std::string simulated_planning;
    std::string simulated_planning_note;
    std::optional<RoutedPlanningFigures> routed_planning;
};

// The model's parts that come from the scans, the mapping and the plan.
void add_tensors_and_plan(InspectReport& report, const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                          const std::vector<std::vector<WriteTask>>& work);

// The balance of the plan: the largest rank's bytes, the mean, and largest/mean - 1.
struct PlanBalance {
    uint64_t largest = 0;
    double mean = 0;
    double imbalance = 0;
};
PlanBalance plan_balance(const InspectReport& report);

// What one rank spends from encoding its scans to holding its plan (the all-gather's transfer
// itself aside: docs/scaling.md models it).
double exchange_planning_seconds(const ScanExchangeFigures& x);

nlohmann::ordered_json inspect_json(const InspectReport& report);
// The report's quantization: the scheme, its parameters (a scale stored in the weight dtype named
// by the dtype of the planned scale tensors), the sizes and the modules left unquantized.
InspectReport::Quantization inspect_quantization(const QuantizeSpec& spec, const QuantizationPlan& plan,
                                                 const std::vector<OutputTensor>& tensors);
// "float4_e2m1, a scale per 16 inputs (tensor_group), float8_e4m3fn scales, a float32 global scale
// per weight": the text line of a scheme's parameters.
std::string quantization_parameters_text(const QuantizationParameters& parameters);
void print_inspect_text(const InspectReport& report, std::ostream& out);

}  // namespace vmerge
