#pragma once
#include <cstdint>

namespace vmerge {

// The resident memory of this process, as the kernel counts it (/proc/self/status): what a
// rank's metadata really costs, including allocator overhead, not an estimate.
uint64_t resident_bytes();        // VmRSS now
uint64_t resident_peak_bytes();   // VmHWM: the high-water mark since start or the last reset

// Returns freed heap to the kernel and sets the high-water mark to the current size (Linux
// >= 4.0, /proc/self/clear_refs "5"), so the peak of one phase of a longer run can be read
// afterwards with resident_peak_bytes(). False where the kernel refuses: the peak then counts
// from the start of the process.
bool reset_resident_peak();

}  // namespace vmerge
