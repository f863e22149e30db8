// pickle::load on arbitrary bytes, then the tree walked with the accessors the torch layer uses.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "pickle/pickle.h"

namespace {

size_t walk(const vmerge::pickle::Value& v, size_t budget) {
    if (budget == 0) return 0;
    --budget;
    (void)vmerge::pickle::describe(v);
    (void)vmerge::pickle::object_class(v);
    (void)vmerge::pickle::dict_get(v, "_metadata");
    for (const auto& item : v.items) budget = walk(*item, budget);
    for (const auto& [key, value] : v.entries) budget = walk(*value, walk(*key, budget));
    if (v.callable) budget = walk(*v.callable, budget);
    if (v.args) budget = walk(*v.args, budget);
    if (v.state) budget = walk(*v.state, budget);
    return budget;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto root = vmerge::pickle::load(
            std::string_view(reinterpret_cast<const char*>(data), size), "fuzz:data.pkl");
        walk(*root, 1u << 16);
    } catch (const vmerge::Error&) {
    }
    return 0;
}
