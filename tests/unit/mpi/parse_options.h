#pragma once
// The options a command line gives, parsed as main parses them (without --help output).
#include <stdexcept>
#include <string>
#include <vector>

#include "command_line.h"

namespace vmerge::testing {

inline Options parse_options(std::vector<std::string> args) {
    args.insert(args.begin(), "vmerge-mpi");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    auto o = parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
    if (!o) throw std::runtime_error("parse_command_line returned no options");
    return *o;
}

}  // namespace vmerge::testing
