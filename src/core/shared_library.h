// Shared libraries opened at run time (dlopen). A CUDA build keeps its CUDA backend in a module of
// its own, libamp_cuda.so (src/backend/backend_cuda_factory.cpp loads it), so that a process that
// computes on the CPU never loads the CUDA libraries: their start-up alone costs about 0.4 s of CPU
// a process, and a machine without them still runs amp_ddp on its CPU.
#pragma once

#include <string>

namespace amp {

// Opens the library at path (a file, or a bare name the dynamic loader looks up) with every symbol
// bound at once (RTLD_NOW): a library that cannot be used fails here, not at its first call. Each
// library is opened once per process and never closed. nullptr when it cannot be opened, with the
// loader's reason in *why (if given).
void* open_library(const std::string& path, std::string* why);

// The address of symbol in lib, or nullptr.
void* library_symbol(void* lib, const char* symbol);

// The folder of this process's executable (/proc/self/exe), "" when it cannot be read.
std::string executable_dir();

}  // namespace amp
