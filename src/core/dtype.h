// Element types of tensors and collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace amp {

enum class DType : uint8_t { F32, F16, BF16, I32, U8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
  }
  return "?";
}

inline bool is_float16(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace amp
