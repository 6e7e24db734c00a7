// Activation functions of the models (shared by the config, the models and the backends' kernels).
#pragma once

#include <cstdint>

namespace amp {

enum class Activation : int32_t { Relu = 0, Gelu = 1, GeluTanh = 2 };

}  // namespace amp
