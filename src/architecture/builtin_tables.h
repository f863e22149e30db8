#pragma once
#include <string>
#include <vector>

namespace vmerge {

// A shipped architecture table built into the binary: its file name in
// share/vmerge/architectures and its JSON text.
struct BuiltinTable {
    const char* name;
    const char* text;
};

// Every shipped table, sorted by name (the generated builtin_architecture_tables.cpp).
const std::vector<BuiltinTable>& builtin_architecture_tables();

}  // namespace vmerge
