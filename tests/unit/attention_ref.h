// A float64 reference of the fused causal attention of one head (backend/attention_args.h):
// out = softmax_causal(scale Q K^T) V and the gradients dq, dk, dv of out . dout, from the
// (widened) stored inputs; row-major [T, D] each. Next to each result, the sum of its terms'
// magnitudes, the scale of what rounding the terms can move it by: a bound for paths that round
// P or dS before their products (the CUDA tensor-core path) is a multiple of it. Shared by the
// CPU tests (tests/unit/test_attention.cpp) and the device tests (tests/gpu/).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "ops_general_ref.h"

namespace attention_ref {

struct Head {
  std::vector<double> out, dq, dk, dv;
  // sum_j p_ij |v_j|, sum_j |ds|_ij |k_j|, sum_i |ds|_ij |q_i|, sum_i p_ij |dout_i| elementwise, where
  // |ds|_ij = scale p_ij (sum_d |dout_id v_jd| + sum_d |dout_id out_id|) bounds dS's terms.
  std::vector<double> mag_out, mag_dq, mag_dk, mag_dv;
};

inline Head reference_head(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                           const std::vector<double>& dout, int64_t T, int64_t D, double scale) {
  Head r;
  r.out.assign(size_t(T * D), 0.0), r.dq = r.out, r.dk = r.out, r.dv = r.out;
  r.mag_out = r.out, r.mag_dq = r.out, r.mag_dk = r.out, r.mag_dv = r.out;
  std::vector<double> p(static_cast<size_t>(T)), dp(static_cast<size_t>(T)), adp(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += q[size_t(i * D + d)] * k[size_t(j * D + d)];
      p[size_t(j)] = scale * s;
      m = std::max(m, p[size_t(j)]);
    }
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - m);
    for (int64_t j = 0; j <= i; ++j) p[size_t(j)] /= sum;
    double dot = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double a = 0, aa = 0;
      for (int64_t d = 0; d < D; ++d) {
        a += dout[size_t(i * D + d)] * v[size_t(j * D + d)];
        aa += std::fabs(dout[size_t(i * D + d)] * v[size_t(j * D + d)]);
      }
      dp[size_t(j)] = a, adp[size_t(j)] = aa;
      dot += p[size_t(j)] * a;
    }
    double abs_delta = 0;  // sum_d |dout_id out_id|
    for (int64_t d = 0; d < D; ++d) {
      double o = 0;
      for (int64_t j = 0; j <= i; ++j) o += p[size_t(j)] * v[size_t(j * D + d)];
      abs_delta += std::fabs(dout[size_t(i * D + d)] * o);
    }
    for (int64_t j = 0; j <= i; ++j) {
      const double ds = scale * p[size_t(j)] * (dp[size_t(j)] - dot);
      const double ads = std::fabs(scale) * p[size_t(j)] * (adp[size_t(j)] + abs_delta);
      for (int64_t d = 0; d < D; ++d) {
        const size_t id = size_t(i * D + d), jd = size_t(j * D + d);
        r.out[id] += p[size_t(j)] * v[jd];
        r.dv[jd] += p[size_t(j)] * dout[id];
        r.dq[id] += ds * k[jd];
        r.dk[jd] += ds * q[id];
        r.mag_out[id] += p[size_t(j)] * std::fabs(v[jd]);
        r.mag_dv[jd] += p[size_t(j)] * std::fabs(dout[id]);
        r.mag_dq[id] += ads * std::fabs(k[jd]);
        r.mag_dk[jd] += ads * std::fabs(q[id]);
      }
    }
  }
  return r;
}

// The fused attention's results (out [B*T, H*D], dqkv [B*T, 3*H*D]) against the float64 reference
// of every head, from the stored inputs: |got - want| <= (4u + 2^-18) mag + 2u |want| + tiny, u the
// dtype's unit roundoff and mag the sum of the terms' magnitudes (reference_head). Rounding P and dS
// to the dtype before their products (the CUDA tensor-core path, cuda/attention_tc.h, and the CPU's
// matmul path, src/backend/cpu/ops_attention_matmul.cpp) moves a result by
// at most 2u mag; the FP32 chains' own error stays far below 2^-18 mag at these lengths; the output's
// rounding is the 2u |want|. Reports the worst element of each result.
inline void check_bound(int64_t B, int64_t T, int64_t H, int64_t D, float scale, const ops_ref::Raw& qkv,
                        const ops_ref::Raw& dout, const ops_ref::Raw& out, const ops_ref::Raw& dqkv) {
  const int64_t C = H * D;
  const double u = ops_ref::unit_roundoff(qkv.t), tiny = ops_ref::tiny_of(qkv.t);
  const char* names[] = {"out", "dq", "dk", "dv"};
  double worst[4] = {0, 0, 0, 0};
  std::string where[4];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> q, k, v, go;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const size_t row = size_t((b * T + i) * 3 * C);
          q.push_back(qkv.get(row + size_t(h * D + d)));
          k.push_back(qkv.get(row + size_t(C + h * D + d)));
          v.push_back(qkv.get(row + size_t(2 * C + h * D + d)));
          go.push_back(dout.get(size_t((b * T + i) * C + h * D + d)));
        }
      const Head ref = reference_head(q, k, v, go, T, D, double(scale));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const size_t e = size_t(i * D + d), row = size_t((b * T + i) * 3 * C);
          const double got[4] = {out.get(size_t((b * T + i) * C + h * D + d)), dqkv.get(row + size_t(h * D + d)),
                                 dqkv.get(row + size_t(C + h * D + d)), dqkv.get(row + size_t(2 * C + h * D + d))};
          const double want[4] = {ref.out[e], ref.dq[e], ref.dk[e], ref.dv[e]};
          const double mag[4] = {ref.mag_out[e], ref.mag_dq[e], ref.mag_dk[e], ref.mag_dv[e]};
          for (int r = 0; r < 4; ++r) {
            const double bound = (4 * u + 0x1p-18) * mag[r] + 2 * u * std::fabs(want[r]) + tiny;
            const double ratio = std::fabs(got[r] - want[r]) / bound;
            if (!(ratio <= worst[r])) {  // NaN too
              worst[r] = ratio;
              std::ostringstream w;
              w << "b " << b << " h " << h << " t " << i << " d " << d << ": got " << got[r] << " want " << want[r]
                << " magnitude " << mag[r];
              where[r] = w.str();
            }
          }
        }
    }
  for (int r = 0; r < 4; ++r) {
    INFO(names[r] << " against float64: worst error " << worst[r] << " of the bound at " << where[r]);
    CHECK(worst[r] <= 1.0);
  }
}

}  // namespace attention_ref
