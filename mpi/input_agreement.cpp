#include "input_agreement.h"

#include <filesystem>
#include <set>
#include <string>

#include "collective_step.h"
#include "io/input_fingerprint.h"
#include "io/input_tree.h"
#include "plan/rank_inputs.h"

namespace vmerge {

void check_input_files(const TensorMapping& mapping, const std::vector<WriteTask>& tasks, Comm& comm) {
    std::vector<InputFingerprint> mine;
    collective_step(comm, "fingerprint inputs", [&] {
        // Each file once under its plain spelling ("a//b" and "a/./b" are one name, not two files).
        std::set<std::string> all, wanted;
        for (const auto& file : input_files_of(mapping)) all.insert(normal_input_path(file));
        for (const auto& file : input_files_of(mapping, tasks)) wanted.insert(normal_input_path(file));
        size_t i = 0;
        for (const auto& file : all)
            if (i++ % comm.size() == static_cast<size_t>(comm.rank())) wanted.insert(file);
        for (const auto& file : wanted) {
            mine.push_back(fingerprint_input(file));
            mine.back().rank = comm.rank();
            mine.back().host = comm.host();
        }
    });
    std::vector<InputFingerprint> every;
    for (const auto& message : comm.allgather(serialize_fingerprints(mine))) {
        auto part = deserialize_fingerprints(message);
        every.insert(every.end(), part.begin(), part.end());
    }
    collective_step(comm, "inputs agree", [&] {
        check_ranks_agree(every);
        if (comm.rank() != 0) return;
        for (const auto& [a, b] : same_input_candidates(every)) refuse_same_bytes(a, b);
    });
}

}  // namespace vmerge
