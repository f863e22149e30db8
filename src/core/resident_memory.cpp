#include "core/resident_memory.h"

#include <malloc.h>

#include <fstream>
#include <string>

namespace vmerge {
namespace {

// "VmRSS:     1234 kB" -> bytes; 0 when the line is absent (not Linux).
uint64_t status_kilobytes(const std::string& field) {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (!line.starts_with(field + ":")) continue;
        uint64_t kb = 0;
        for (char c : line.substr(field.size() + 1))
            if (c >= '0' && c <= '9') kb = kb * 10 + static_cast<uint64_t>(c - '0');
        return kb * 1024;
    }
    return 0;
}

}  // namespace

uint64_t resident_bytes() { return status_kilobytes("VmRSS"); }

uint64_t resident_peak_bytes() { return status_kilobytes("VmHWM"); }

bool reset_resident_peak() {
    ::malloc_trim(0);
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    return static_cast<bool>(clear);
}

}  // namespace vmerge
