#pragma once
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "learned_map/row_layout.h"

namespace vmerge {

// A tensor map compares: its name and shape (the checkpoint's canonical tensors, or the base's).
struct NamedShape {
    std::string name;
    Shape shape;
    // A legacy Megatron save's tensor as one tp rule joined its tensor-parallel pieces (the
    // table's name of the rule: "dim0", "glu_halves", ...): a name appears once per rule its
    // pieces allow, and the values choose. "" : a whole tensor.
    std::string tp;
    // A grouped torchtitan tensor [E, a, b] whole with its last two axes swapped ([E, b, a], as
    // transformers stores GPT-OSS's experts): its rule's transform is "transpose".
    bool transposed = false;
};

// The values of one side's tensors, a row at a time (a row: the elements past the first axis,
// those compared_spans names, in its order; a 1-D tensor's rows are its elements). The command
// reads only those from the files; tests hold them.
class RowValues {
public:
    virtual ~RowValues() = default;
    virtual std::vector<double> row(size_t tensor, int64_t row) = 0;
};

// The layouts a table of the checkpoint's source can state: Megatron tables split (qkv, gate_up,
// vocab), torchtitan tables transform (rope_permute).
enum class TableSource { Megatron, Torchtitan };

// How close a guess is: over the sampled rows of its parts, the relative distance
// |s - b| / |b| and the cosine of the checkpoint's values s and the base's b.
struct Fit {
    LayoutGuess guess;
    double distance = 0;
    double cosine = 0;
    std::optional<size_t> zero_part;  // a part whose sampled rows are all zeros: its values say nothing
    bool zero_source = false;  // the checkpoint tensor's sampled rows are all zeros
};

// What map decided for one checkpoint tensor.
struct SourceDecision {
    size_t source = 0;
    std::optional<Fit> match;      // the accepted guess
    std::optional<Fit> best;       // the closest guess (evidence, also when not accepted)
    std::optional<Fit> runner_up;  // the closest guess naming other base tensors
    std::string refused;           // why no rule can be proposed ("" when none)
    std::string dropped;           // why it has no HF name ("" when matched or refused)
    bool tied_head = false;        // the output head of a model whose config ties the embeddings
    // Another tp assembly of a name whose decision is another tensor's (the values chose that
    // one): no decision of its own, not a tensor of the table.
    bool other_assembly = false;
};

struct MatchResult {
    std::vector<SourceDecision> decisions;  // one per checkpoint tensor, in its order
    std::vector<size_t> unmapped_base;      // base tensors no decision takes
};

// A fine-tuned tensor stays within this relative distance of its base; a tensor further from
// every candidate is not matched.
inline constexpr double kMatchDistance = 0.5;
// The runner-up must be more than this many times further than the match: otherwise the values
// cannot tell the two apart and map refuses (two identical base tensors: equal distances).
inline constexpr double kAmbiguityRatio = 3.0;

// The numbers of a name: its dot-separated all-digit parts, in order
// ("decoder.layers.3.mlp.experts.local_experts.5.linear_fc1.weight" -> {3, 5}), every one read
// as a layer or expert number; map reads a side's names through LayerNumbers (layer_numbers.h),
// which keeps a Sequential's module indices in the name.
std::vector<std::string> name_numbers(const std::string& name);

// The names of `tensors`, in order.
std::vector<std::string> names_of(const std::vector<NamedShape>& tensors);

// Every layout a table of `source_kind` can state that fits the shapes of checkpoint tensor
// `s` and base tensors of the same layer/expert numbers (`same_numbers`): pure, from the
// shapes and `heads` alone.
std::vector<LayoutGuess> layout_guesses(const NamedShape& s, const std::vector<NamedShape>& base,
                                        const std::vector<size_t>& same_numbers, const ModelShape& heads,
                                        TableSource source_kind);

// Compares the sampled rows of a guess (sample_rows of each part).
Fit measure_fit(const LayoutGuess& guess, size_t source, const std::vector<NamedShape>& base, RowValues& source_rows,
                RowValues& base_rows, const ModelShape& heads);

// Two tp assemblies of one name (the same base tensors) must be further apart than this ratio
// too: otherwise the values cannot tell how the pieces join and map refuses.
inline constexpr double kAssemblyRatio = kAmbiguityRatio;
// Pieces read once from rank 0 ("replicated") must be copies: each within this relative
// distance of rank 0's on the sampled rows. Pieces that differ (a vocabulary's shards, whose
// first shard alone holds every base row) are no replicated tensor.
inline constexpr double kReplicaDistance = 1e-3;

// Matches every checkpoint tensor with the base tensors whose values it holds: candidates from
// the shapes and the layer/expert numbers, decided by the values (kMatchDistance,
// kAmbiguityRatio); two checkpoint tensors taking one base tensor are both refused; a tensor
// matching nothing is dropped with its reason (TransformerEngine _extra_state, training state,
// or no counterpart), or, when config.json ties the embeddings and it has the embedding's
// shape, is the tied output head. decide_tensors and settle_matches in one process.
MatchResult match_tensors(const std::vector<NamedShape>& source, RowValues& source_rows,
                          const std::vector<NamedShape>& base, RowValues& base_rows, const ModelShape& heads,
                          TableSource source_kind, bool tied_embeddings);

// The first half, shared by `ranks`: the decisions of the layer groups (checkpoint tensors of
// one set of layer/expert numbers) numbered `rank`, `rank + ranks`, ... in name order, each from
// its own values alone.
std::vector<SourceDecision> decide_tensors(const std::vector<NamedShape>& source, RowValues& source_rows,
                                           const std::vector<NamedShape>& base, RowValues& base_rows,
                                           const ModelShape& heads, TableSource source_kind, int rank, int ranks);

// The second half, once every group is decided (`decisions` in any order, each tensor once):
// shared targets refused, unmatched tensors settled, base tensors nothing takes listed.
MatchResult settle_matches(std::vector<SourceDecision> decisions, const std::vector<NamedShape>& source,
                           const std::vector<NamedShape>& base, bool tied_embeddings);

// Decisions as JSON and back, for the ranks to exchange (doubles round-trip exactly).
nlohmann::json decisions_json(const std::vector<SourceDecision>& decisions);
std::vector<SourceDecision> decisions_from_json(const nlohmann::json& doc);

}  // namespace vmerge
