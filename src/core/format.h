// Units, human-readable sizes and quoted input for messages and logs.
#pragma once

#include <string>
#include <string_view>

namespace amp {

// One MiB in bytes (distributed.bucket_mb, first_bucket_mb and the logs count in MiB).
constexpr double kBytesPerMiB = 1048576.0;

// "512 B", "1.5 KiB", "3.2 GiB".
std::string format_bytes(double bytes);

// Input bytes as they can be shown in a message: control bytes (a NUL would end the message when
// printed, an escape would drive the terminal) and bytes that are not well-formed UTF-8 as \xNN,
// and at most max_bytes of them, "..." marking a cut.
std::string printable(std::string_view bytes, size_t max_bytes = 80);

}  // namespace amp
