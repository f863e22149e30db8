#include "learned_map/tensor_matching.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "learned_map/layer_numbers.h"

namespace vmerge {
namespace {

// Rows already read, kept for one group of tensors (one layer): several guesses read the same
// rows, and memory stays bounded by a layer's samples.
class CachedRows final : public RowValues {
public:
    explicit CachedRows(RowValues& inner) : inner_(inner) {}
    std::vector<double> row(size_t tensor, int64_t row) override {
        auto [it, fresh] = rows_.try_emplace({tensor, row});
        if (fresh) it->second = inner_.row(tensor, row);
        return it->second;
    }
    void clear() { rows_.clear(); }

private:
    RowValues& inner_;
    std::map<std::pair<size_t, int64_t>, std::vector<double>> rows_;
};

bool same_trailing(const Shape& a, const Shape& b) {
    return a.size() == b.size() && !a.empty() && std::equal(a.begin() + 1, a.end(), b.begin() + 1);
}

std::string distance_text(double d) {
    std::ostringstream out;
    out.precision(3);
    out << d;
    return out.str();
}

// The guesses that take several base tensors (Megatron's fused qkv and gate/up).
void add_fused_guesses(const NamedShape& s, const std::vector<NamedShape>& base, const std::vector<size_t>& candidates,
                       const ModelShape& heads, std::vector<LayoutGuess>& guesses) {
    const int64_t rows = tensor_rows(s.shape);
    auto with_rows = [&](int64_t n) {
        std::vector<size_t> found;
        for (size_t b : candidates)
            if (same_trailing(base[b].shape, s.shape) && base[b].shape[0] == n) found.push_back(b);
        return found;
    };
    const int64_t d = heads.head_dim, nq = heads.heads, ng = heads.kv_heads;
    if (d > 0 && ng > 0 && nq % ng == 0 && rows == (nq + 2 * ng) * d)
        for (size_t q : with_rows(nq * d))
            for (size_t k : with_rows(ng * d))
                for (size_t v : with_rows(ng * d))
                    if (q != k && q != v && k != v) {
                        guesses.push_back({RowLayout::Qkv, {q, k, v}, 0, ""});
                        // One query group: [Q; K; V] is the grouped layout itself.
                        if (ng > 1) guesses.push_back({RowLayout::PlainQkv, {q, k, v}, 0, ""});
                    }
    if (rows > 0 && rows % 2 == 0)
        for (size_t gate : with_rows(rows / 2))
            for (size_t up : with_rows(rows / 2))
                if (gate != up) guesses.push_back({RowLayout::GateUp, {gate, up}, 0, ""});
}

void add_rope_guesses(const NamedShape& s, size_t b, const ModelShape& heads, std::vector<LayoutGuess>& guesses) {
    const int64_t rows = tensor_rows(s.shape);
    const std::pair<int64_t, const char*> counts[] = {{heads.heads, "num_attention_heads"},
                                                      {heads.kv_heads, "num_key_value_heads"}};
    for (const auto& [n, key] : counts) {
        if (n <= 0 || rows % n != 0 || (rows / n) % 2 != 0) continue;
        if (n == heads.kv_heads && heads.kv_heads == heads.heads && std::string(key) == "num_key_value_heads")
            continue;  // the same permutation as num_attention_heads'
        guesses.push_back({RowLayout::RopePermute, {b}, n, key});
    }
}

// A vision tower's qkv grouped per head ([q_h; k_h; v_h]) holding the base's fused [Q; K; V]
// `b` of its shape: one guess per head count of another tower (one head: the same rows).
void add_per_head_qkv_guesses(const NamedShape& s, size_t b, const ModelShape& heads, std::vector<LayoutGuess>& guesses) {
    const int64_t rows = tensor_rows(s.shape);
    for (const auto& [n, key] : heads.tower_heads)
        if (n > 1 && rows % (3 * n) == 0) guesses.push_back({RowLayout::QkvPerHead, {b}, n, key});
}

// The decision for one checkpoint tensor from its measured fits.
SourceDecision decide(size_t source, std::vector<Fit> fits, const std::vector<NamedShape>& src,
                      const std::vector<NamedShape>& base) {
    SourceDecision d;
    d.source = source;
    std::stable_sort(fits.begin(), fits.end(), [](const Fit& a, const Fit& b) { return a.distance < b.distance; });
    if (fits.empty()) return d;
    d.best = fits[0];
    for (const Fit& f : fits)
        if (f.guess.parts != fits[0].guess.parts) {
            d.runner_up = f;
            break;
        }
    const Fit& best = fits[0];
    const std::string name = src[source].name;
    if (best.zero_part) {
        d.refused = name + ": base tensor " + base[best.guess.parts[*best.zero_part]].name +
                    " is all zeros in the sampled rows: its values cannot say which checkpoint tensor it is";
        return d;
    }
    // All zeros against base tensors that are not: none of them (distance 1 from each); settled
    // as a tensor no base tensor holds (a buffer such as torchtitan's expert_bias_E).
    if (best.zero_source) return d;
    if (!(best.distance <= kMatchDistance)) return d;  // no counterpart (decided by the caller)
    if (d.runner_up && d.runner_up->distance <= kAmbiguityRatio * best.distance) {
        auto names = [&](const Fit& f) {
            std::string text;
            for (size_t b : f.guess.parts) text += (text.empty() ? "" : " + ") + base[b].name;
            return text;
        };
        d.refused = name + " matches " + names(best) + " (distance " + distance_text(best.distance) + ") and " +
                    names(*d.runner_up) + " (distance " + distance_text(d.runner_up->distance) +
                    ") alike: the base holds tensors its values cannot tell apart";
        return d;
    }
    if (best.guess.layout == RowLayout::PlainQkv) {
        d.refused = name + " holds " + base[best.guess.parts[0]].name + ", " + base[best.guess.parts[1]].name + " and " +
                    base[best.guess.parts[2]].name + " one after another, [Q; K; V] (distance " +
                    distance_text(best.distance) + "), not grouped per query group as split \"qkv\" reads them: "
                    "no table rule states that layout";
        return d;
    }
    d.match = best;
    return d;
}

// Whether the tp pieces of a name are copies, read from its "dim0" assembly (`joined`, the
// pieces one after another) on the sampled rows of its "replicated" one (`one`, rank 0's).
bool pieces_are_copies(const NamedShape& one, const NamedShape& joined, size_t joined_index, RowValues& rows) {
    const int64_t piece_rows = tensor_rows(one.shape);
    if (piece_rows <= 0 || tensor_rows(joined.shape) % piece_rows != 0) return false;
    const int64_t pieces = tensor_rows(joined.shape) / piece_rows;
    for (int64_t r : sample_rows(piece_rows, sample_count(row_length(one.shape)))) {
        const std::vector<double> first = rows.row(joined_index, r);
        double norm = 0;
        for (double v : first) norm += v * v;
        for (int64_t p = 1; p < pieces; ++p) {
            const std::vector<double> other = rows.row(joined_index, p * piece_rows + r);
            double diff = 0;
            for (size_t k = 0; k < first.size(); ++k) diff += (other[k] - first[k]) * (other[k] - first[k]);
            if (diff > kReplicaDistance * kReplicaDistance * norm) return false;
        }
    }
    return true;
}

// The tp assemblies of one name worth comparing: all of them, less "replicated" when its
// pieces are not copies (then rank 0's piece alone is not the tensor, whatever it matches).
std::vector<size_t> possible_assemblies(const std::vector<size_t>& assemblies, const std::vector<NamedShape>& src,
                                        RowValues& rows) {
    auto find = [&](const char* tp) {
        for (size_t s : assemblies)
            if (src[s].tp == tp) return std::optional<size_t>(s);
        return std::optional<size_t>();
    };
    const auto replicated = find("replicated"), joined = find("dim0");
    if (!replicated || !joined || pieces_are_copies(src[*replicated], src[*joined], *joined, rows)) return assemblies;
    std::vector<size_t> kept;
    for (size_t s : assemblies)
        if (s != *replicated) kept.push_back(s);
    return kept;
}

// The decision for one name from the fits of its tp assemblies (`assemblies`: its tensors;
// one for a whole tensor): the assembly of the closest fit decides, the others are
// other_assembly. Another assembly of the same base tensors that fits nearly as well is a
// refusal: the values cannot say how the pieces join.
std::vector<SourceDecision> decide_assemblies(const std::vector<size_t>& assemblies,
                                              std::vector<std::pair<size_t, Fit>> fits,
                                              const std::vector<NamedShape>& src, const std::vector<NamedShape>& base) {
    size_t chosen = assemblies[0];
    double closest = std::numeric_limits<double>::infinity();
    for (const auto& [s, fit] : fits)
        if (fit.distance < closest) {
            closest = fit.distance;
            chosen = s;
        }
    std::vector<Fit> all;
    for (const auto& [s, fit] : fits) all.push_back(fit);
    std::vector<SourceDecision> out{decide(chosen, std::move(all), src, base)};
    SourceDecision& d = out[0];
    if (d.match)
        for (const auto& [s, fit] : fits)
            if (s != chosen && fit.guess.parts == d.match->guess.parts &&
                fit.distance <= kAssemblyRatio * d.match->distance) {
                d.refused = src[chosen].name + ": its tensor-parallel pieces joined " + src[chosen].tp +
                            " (distance " + distance_text(d.match->distance) + ") and " + src[s].tp +
                            " (distance " + distance_text(fit.distance) + ") fit alike: the values cannot say how they join";
                d.match.reset();
                break;
            }
    for (size_t s : assemblies)
        if (s != chosen) {
            SourceDecision other;
            other.source = s;
            other.other_assembly = true;
            out.push_back(std::move(other));
        }
    return out;
}

// Two checkpoint tensors taking one base tensor: neither is proposed. Except when config.json
// ties the embeddings and the two take the embedding alone: a save that keeps the output head
// as a copy of the embedding (Megatron-LM's last pipeline stage); the later of the two in the
// checkpoint's order (models put the embedding first) is the tied head.
void refuse_shared_targets(std::vector<SourceDecision>& decisions, const std::vector<NamedShape>& src,
                           const std::vector<NamedShape>& base, bool tied_embeddings) {
    std::map<size_t, std::vector<size_t>> takers;  // base tensor -> decisions
    for (size_t i = 0; i < decisions.size(); ++i)
        if (decisions[i].match)
            for (size_t b : decisions[i].match->guess.parts) takers[b].push_back(i);
    for (const auto& [b, who] : takers) {
        if (who.size() < 2) continue;
        const bool alone = std::all_of(who.begin(), who.end(), [&](size_t i) { return decisions[i].match->guess.parts.size() == 1; });
        if (tied_embeddings && who.size() == 2 && alone && base[b].name.ends_with("embed_tokens.weight")) {
            decisions[who[1]].tied_head = true;  // keeps its match: the evidence of the copy
            continue;
        }
        std::string names;
        for (size_t i : who) names += (names.empty() ? "" : " and ") + src[decisions[i].source].name;
        for (size_t i : who) {
            decisions[i].match.reset();
            decisions[i].refused = base[b].name + " is matched by " + names + ": one base tensor cannot be two";
        }
    }
}

// A tensor no base tensor holds: the reason it has no HF name, or its tied-head role.
void settle_unmatched(SourceDecision& d, const std::vector<NamedShape>& src, const std::vector<NamedShape>& base,
                      const std::vector<SourceDecision>& all, bool tied_embeddings) {
    const NamedShape& s = src[d.source];
    if (s.name.find("_extra_state") != std::string::npos) {
        d.dropped = "TransformerEngine _extra_state (FP8 metadata, no weights)";
        return;
    }
    if (s.name.starts_with("optimizer.") || s.name.find(".optimizer.") != std::string::npos) {
        d.dropped = "optimizer state";
        return;
    }
    if (tied_embeddings)
        for (const SourceDecision& other : all)
            if (other.match && base[other.match->guess.parts[0]].name.ends_with("embed_tokens.weight") &&
                src[other.source].shape == s.shape) {
                d.tied_head = true;  // the embedding's twin: the head config.json ties to it
                return;
            }
    if (d.best && d.best->zero_source) {
        d.dropped = "all zeros in the sampled rows, and every base tensor its shape fits is not: a buffer no base "
                    "tensor holds";
        return;
    }
    d.dropped = "no base tensor holds its values";
    if (d.best) {
        d.dropped += " (closest: ";
        for (size_t i = 0; i < d.best->guess.parts.size(); ++i)
            d.dropped += (i ? " + " : "") + base[d.best->guess.parts[i]].name;
        d.dropped += " at distance " + distance_text(d.best->distance) + ")";
    }
}

// The base groups a checkpoint group meets: its own numbers and, for torchtitan (whose table
// can state a layer_offset), the layer num_hidden_layers further (an MTP layer's HF number).
std::vector<std::vector<std::string>> candidate_groups(const std::vector<std::string>& numbers, const ModelShape& heads,
                                                       TableSource source_kind) {
    std::vector<std::vector<std::string>> keys{numbers};
    if (source_kind == TableSource::Torchtitan && heads.layers > 0 && !numbers.empty() && numbers[0].size() < 10) {
        std::vector<std::string> offset = numbers;
        offset[0] = std::to_string(std::stoll(numbers[0]) + heads.layers);
        keys.push_back(std::move(offset));
    }
    return keys;
}

}  // namespace

std::vector<std::string> names_of(const std::vector<NamedShape>& tensors) {
    std::vector<std::string> names;
    for (const NamedShape& t : tensors) names.push_back(t.name);
    return names;
}

std::vector<std::string> name_numbers(const std::string& name) { return LayerNumbers().numbers(name); }

std::vector<LayoutGuess> layout_guesses(const NamedShape& s, const std::vector<NamedShape>& base,
                                        const std::vector<size_t>& same_numbers, const ModelShape& heads,
                                        TableSource source_kind) {
    std::vector<LayoutGuess> guesses;
    for (size_t b : same_numbers) {
        const Shape& bs = base[b].shape;
        if (bs == s.shape) {
            guesses.push_back({RowLayout::Same, {b}, 0, ""});
            if (source_kind == TableSource::Torchtitan && bs.size() == 2) add_rope_guesses(s, b, heads, guesses);
            if (source_kind == TableSource::Megatron && bs.size() <= 2) add_per_head_qkv_guesses(s, b, heads, guesses);
        } else if (source_kind == TableSource::Megatron && bs.size() == 2 && same_trailing(bs, s.shape) &&
                   bs[0] == heads.vocab && s.shape[0] > bs[0]) {
            guesses.push_back({RowLayout::Vocab, {b}, 0, ""});
        }
    }
    if (source_kind == TableSource::Megatron) add_fused_guesses(s, base, same_numbers, heads, guesses);
    return guesses;
}

Fit measure_fit(const LayoutGuess& guess, size_t source, const std::vector<NamedShape>& base, RowValues& source_rows,
                RowValues& base_rows, const ModelShape& heads) {
    std::vector<int64_t> part_rows;
    for (size_t b : guess.parts) part_rows.push_back(tensor_rows(base[b].shape));
    double diff = 0, source_norm = 0, base_norm = 0, dot = 0;
    Fit fit;
    fit.guess = guess;
    for (size_t part = 0; part < guess.parts.size(); ++part) {
        const size_t b = guess.parts[part];
        double part_norm = 0;
        for (int64_t r : sample_rows(part_rows[part], sample_count(row_length(base[b].shape)))) {
            const std::vector<double> want = base_rows.row(b, r);
            const std::vector<double> got = source_rows.row(source, source_row_of(guess, heads, part_rows, part, r));
            if (got.size() != want.size())
                throw Error("internal: map read " + std::to_string(got.size()) + " elements of a checkpoint row for a base row of " +
                            std::to_string(want.size()));
            for (size_t k = 0; k < want.size(); ++k) {
                diff += (got[k] - want[k]) * (got[k] - want[k]);
                part_norm += want[k] * want[k];
                source_norm += got[k] * got[k];
                dot += got[k] * want[k];
            }
        }
        if (part_norm == 0 && !fit.zero_part) fit.zero_part = part;
        base_norm += part_norm;
    }
    fit.zero_source = source_norm == 0;
    fit.distance = base_norm > 0 ? std::sqrt(diff / base_norm) : (diff == 0 ? 0 : std::numeric_limits<double>::max());
    fit.cosine = base_norm > 0 && source_norm > 0 ? dot / std::sqrt(base_norm * source_norm) : 0;
    return fit;
}

std::vector<SourceDecision> decide_tensors(const std::vector<NamedShape>& source, RowValues& source_rows,
                                           const std::vector<NamedShape>& base, RowValues& base_rows,
                                           const ModelShape& heads, TableSource source_kind, int rank, int ranks) {
    // Group both sides by their layer/expert numbers: a layer's tensors only meet its own.
    // A number that is part of a name (a Sequential's module index) is no layer: layer_numbers.h.
    const LayerNumbers base_numbers(names_of(base)), source_numbers(names_of(source));
    std::map<std::vector<std::string>, std::vector<size_t>> base_groups, source_groups;
    for (size_t b = 0; b < base.size(); ++b) base_groups[base_numbers.numbers(base[b].name)].push_back(b);
    for (size_t s = 0; s < source.size(); ++s) source_groups[source_numbers.numbers(source[s].name)].push_back(s);
    std::vector<SourceDecision> decisions;
    CachedRows cached_source(source_rows), cached_base(base_rows);
    size_t group = 0;
    for (const auto& [numbers, members] : source_groups) {
        if (static_cast<int>(group++ % static_cast<size_t>(ranks)) != rank) continue;
        std::vector<size_t> candidates;
        for (const auto& key : candidate_groups(numbers, heads, source_kind))
            if (const auto it = base_groups.find(key); it != base_groups.end())
                candidates.insert(candidates.end(), it->second.begin(), it->second.end());
        // The tp assemblies of one name (a legacy Megatron save's) are decided together.
        std::vector<std::string> names;
        std::map<std::string, std::vector<size_t>> assemblies;
        for (size_t s : members) {
            auto& same_name = assemblies[source[s].name];
            if (same_name.empty()) names.push_back(source[s].name);
            same_name.push_back(s);
        }
        for (const std::string& name : names) {
            const std::vector<size_t>& all = assemblies[name];
            const std::vector<size_t> possible = possible_assemblies(all, source, cached_source);
            std::vector<std::pair<size_t, Fit>> fits;
            for (size_t s : possible)
                for (const LayoutGuess& g : layout_guesses(source[s], base, candidates, heads, source_kind))
                    fits.emplace_back(s, measure_fit(g, s, base, cached_source, cached_base, heads));
            for (SourceDecision& d : decide_assemblies(possible, std::move(fits), source, base))
                decisions.push_back(std::move(d));
            for (size_t s : all)  // "replicated" of pieces that are no copies
                if (std::find(possible.begin(), possible.end(), s) == possible.end()) {
                    SourceDecision other;
                    other.source = s;
                    other.other_assembly = true;
                    decisions.push_back(std::move(other));
                }
        }
        cached_source.clear();
        cached_base.clear();
    }
    return decisions;
}

MatchResult settle_matches(std::vector<SourceDecision> decisions, const std::vector<NamedShape>& source,
                           const std::vector<NamedShape>& base, bool tied_embeddings) {
    MatchResult result;
    result.decisions.resize(source.size());
    for (SourceDecision& d : decisions) {
        if (d.source >= source.size()) throw Error("internal: a map decision names checkpoint tensor " + std::to_string(d.source));
        result.decisions[d.source] = std::move(d);
    }
    refuse_shared_targets(result.decisions, source, base, tied_embeddings);
    for (SourceDecision& d : result.decisions)
        if (!d.match && d.refused.empty() && !d.other_assembly) settle_unmatched(d, source, base, result.decisions, tied_embeddings);
    std::vector<bool> taken(base.size(), false);
    for (const SourceDecision& d : result.decisions)
        if (d.match)
            for (size_t b : d.match->guess.parts) taken[b] = true;
    for (size_t b = 0; b < base.size(); ++b)
        if (!taken[b]) result.unmapped_base.push_back(b);
    return result;
}

MatchResult match_tensors(const std::vector<NamedShape>& source, RowValues& source_rows,
                          const std::vector<NamedShape>& base, RowValues& base_rows, const ModelShape& heads,
                          TableSource source_kind, bool tied_embeddings) {
    return settle_matches(decide_tensors(source, source_rows, base, base_rows, heads, source_kind, 0, 1), source, base,
                          tied_embeddings);
}

nlohmann::json decisions_json(const std::vector<SourceDecision>& decisions) {
    auto fit_json = [](const std::optional<Fit>& f) -> nlohmann::json {
        if (!f) return nullptr;
        return {{"layout", static_cast<int>(f->guess.layout)}, {"parts", f->guess.parts},
                {"head_count", f->guess.head_count}, {"heads_key", f->guess.heads_key}, {"distance", f->distance},
                {"cosine", f->cosine}, {"zero_part", f->zero_part ? nlohmann::json(*f->zero_part) : nlohmann::json()},
                {"zero_source", f->zero_source}};
    };
    nlohmann::json doc = nlohmann::json::array();
    for (const SourceDecision& d : decisions)
        doc.push_back({{"source", d.source}, {"match", fit_json(d.match)}, {"best", fit_json(d.best)},
                       {"runner_up", fit_json(d.runner_up)}, {"refused", d.refused},
                       {"other_assembly", d.other_assembly}});
    return doc;
}

std::vector<SourceDecision> decisions_from_json(const nlohmann::json& doc) {
    auto fit_of = [](const nlohmann::json& j) -> std::optional<Fit> {
        if (j.is_null()) return std::nullopt;
        Fit f;
        f.guess.layout = static_cast<RowLayout>(j.at("layout").get<int>());
        f.guess.parts = j.at("parts").get<std::vector<size_t>>();
        f.guess.head_count = j.at("head_count").get<int64_t>();
        f.guess.heads_key = j.at("heads_key").get<std::string>();
        // JSON has no NaN (values that are not numbers give it): written as null, read back as NaN.
        const auto number = [](const nlohmann::json& v) {
            return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
        };
        f.distance = number(j.at("distance"));
        f.cosine = number(j.at("cosine"));
        if (!j.at("zero_part").is_null()) f.zero_part = j.at("zero_part").get<size_t>();
        f.zero_source = j.at("zero_source").get<bool>();
        return f;
    };
    std::vector<SourceDecision> decisions;
    for (const auto& j : doc) {
        SourceDecision d;
        d.source = j.at("source").get<size_t>();
        d.match = fit_of(j.at("match"));
        d.best = fit_of(j.at("best"));
        d.runner_up = fit_of(j.at("runner_up"));
        d.refused = j.at("refused").get<std::string>();
        d.other_assembly = j.at("other_assembly").get<bool>();
        decisions.push_back(std::move(d));
    }
    return decisions;
}

}  // namespace vmerge
