#pragma once
#include <cstdint>
#include <string>

namespace vmerge {

// "1.6 MiB", "812 B": sizes for people (powers of 1024).
std::string human_bytes(double bytes);
// "812 MiB/s", "1.9 GiB/s": a rate for people (never "0.00 GB/s" for a small one).
std::string human_rate(double bytes_per_second);
// "16MiB", "1000B": a size as a flag takes it back, exact (the largest binary unit that
// divides it), for messages that tell the user what to type.
std::string exact_size_flag(uint64_t bytes);
// "2m41s", "1h03m".
std::string human_duration(double seconds);

}  // namespace vmerge
