// Units and human-readable sizes for messages and logs.
#pragma once

#include <string>

namespace amp {

// One MiB in bytes (distributed.bucket_mb, first_bucket_mb and the logs count in MiB).
constexpr double kBytesPerMiB = 1048576.0;

// "512 B", "1.5 KiB", "3.2 GiB".
std::string format_bytes(double bytes);

}  // namespace amp
