// Which forms of cuBLASLt's FP8 GEMM this GPU and library run: one shape (cuBLAS m=2304, n=512,
// k=768, E4M3 x E4M3 -> BF16, "TN"), each variant's heuristic asked for 8 algorithms and every one
// called; one line per variant with how many ran. Written when LtGemm::run_fp8 failed on an H200
// (cuBLASLt 13.1): there, 16-byte aligned scale pointers ran every algorithm, with or without the
// bias epilogue, and scale pointers 4 bytes off alignment ran none (CUBLAS_STATUS_NOT_SUPPORTED).
// Usage: probe_fp8_gemm            (needs a GPU of compute capability 8.9 or later)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

struct Variant {
  const char* name;
  bool bias;        // EPILOGUE_BIAS with a BF16 bias
  bool scales;      // A and B scale pointers set
  size_t a_offset;  // byte offsets of the scale pointers into a 256-byte aligned buffer
  size_t b_offset;
  bool e5m2_a;      // A in E5M2 instead of E4M3
};

void* device_zeros(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) return nullptr;
  return p;
}

}  // namespace

int main() {
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "probe_fp8_gemm: cublasLtCreate failed (no GPU?)\n");
    return 1;
  }
  const int64_t m = 2304, n = 512, k = 768;
  size_t ws_bytes = size_t(32) << 20;
  void *a = device_zeros(m * k), *b = device_zeros(n * k), *c = device_zeros(m * n * 2), *bias = device_zeros(m * 2);
  float* scales = static_cast<float*>(device_zeros(256));
  void* ws = device_zeros(ws_bytes);
  if (!a || !b || !c || !bias || !scales || !ws) {
    std::fprintf(stderr, "probe_fp8_gemm: cudaMalloc failed\n");
    return 1;
  }
  const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice);
  const Variant variants[] = {
      {"bias, scales at +4 and +0 bytes", true, true, 4, 0, false},
      {"bias, scales at +0 and +16 bytes", true, true, 0, 16, false},
      {"no bias, scales at +4 and +0 bytes", false, true, 4, 0, false},
      {"no bias, scales at +0 and +16 bytes", false, true, 0, 16, false},
      {"bias, no scale pointers", true, false, 0, 0, false},
      {"bias, scales at +0 and +16, A in E5M2", true, true, 0, 16, true},
  };
  int failures = 0;
  for (const Variant& v : variants) {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (v.scales) {
      const void* sa = reinterpret_cast<const char*>(scales) + v.a_offset;
      const void* sb = reinterpret_cast<const char*>(scales) + v.b_offset;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
    }
    if (v.bias) {
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = CUDA_R_16BF;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatrixLayoutCreate(&la, v.e5m2_a ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, k, m, k);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t results[8];
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 8, results, &found);
    const float alpha = 1.0f, beta = 0.0f;
    int ran = 0;
    cublasStatus_t refused = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < found; ++i) {
      const cublasStatus_t s =
          cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &results[i].algo, ws, ws_bytes, nullptr);
      if (s == CUBLAS_STATUS_SUCCESS) ++ran;
      else refused = s;
    }
    const cudaError_t sync = cudaDeviceSynchronize();
    std::printf("%-40s heuristic %s, %d of %d algorithms ran%s%s%s\n", v.name, cublasLtGetStatusName(hs), ran, found,
                refused != CUBLAS_STATUS_SUCCESS ? ", the others: " : "",
                refused != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusName(refused) : "",
                sync != cudaSuccess ? cudaGetErrorString(sync) : "");
    failures += sync != cudaSuccess;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
  std::printf("cuBLASLt %zu\n", cublasLtGetVersion());
  cublasLtDestroy(h);
  return failures ? 1 : 0;
}
