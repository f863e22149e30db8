#include "learned_map/layer_numbers.h"

#include <algorithm>
#include <functional>
#include <map>

namespace vmerge {
namespace {

bool all_digits(const std::string& part) {
    return !part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Calls `visit(prefix, part, is_number)` for each dot-separated part of `name`; `prefix` is the
// name before the part with its earlier numbers written "#".
void for_each_part(const std::string& name,
                   const std::function<void(const std::string& prefix, const std::string& part, bool number)>& visit) {
    std::string prefix;
    size_t start = 0;
    while (start <= name.size()) {
        size_t end = name.find('.', start);
        if (end == std::string::npos) end = name.size();
        const std::string part = name.substr(start, end - start);
        const bool number = all_digits(part);
        visit(prefix, part, number);
        prefix += (prefix.empty() ? "" : ".") + (number ? std::string("#") : part);
        start = end + 1;
    }
}

}  // namespace

LayerNumbers::LayerNumbers(const std::vector<std::string>& names) {
    std::map<std::string, std::set<long long>> seen;  // prefix -> the numbers after it
    for (const std::string& name : names)
        for_each_part(name, [&](const std::string& prefix, const std::string& part, bool number) {
            if (number) seen[prefix].insert(std::stoll(part));
        });
    for (const auto& [prefix, values] : seen)
        // A set of n numbers is 0..n-1 exactly when it starts at 0 and ends at n - 1.
        if (*values.begin() != 0 || *values.rbegin() != static_cast<long long>(values.size()) - 1)
            module_indices_.insert(prefix);
}

std::vector<std::string> LayerNumbers::numbers(const std::string& name) const {
    std::vector<std::string> out;
    for_each_part(name, [&](const std::string& prefix, const std::string& part, bool number) {
        if (number && counts(prefix)) out.push_back(part);
    });
    return out;
}

std::string LayerNumbers::pattern(const std::string& name) const {
    std::string out;
    size_t seen = 0;
    for_each_part(name, [&](const std::string& prefix, const std::string& part, bool number) {
        const bool placeholder = number && counts(prefix) && seen < 2;
        out += (prefix.empty() ? "" : ".") + (placeholder ? std::string(seen == 0 ? "{i}" : "{e}") : part);
        if (number && counts(prefix)) ++seen;
    });
    return out;
}

}  // namespace vmerge
