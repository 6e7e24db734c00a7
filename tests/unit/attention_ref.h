// A float64 reference of the fused causal attention of one head (backend/attention_args.h):
// out = softmax_causal(scale Q K^T) V and the gradients dq, dk, dv of out . dout, from the
// (widened) stored inputs; row-major [T, D] each. Next to each result, the sum of its terms'
// magnitudes, the scale of what rounding the terms can move it by: a bound for paths that round
// P or dS before their products (the CUDA tensor-core path) is a multiple of it. Shared by the
// CPU tests (tests/unit/test_attention.cpp) and the device tests (tests/gpu/).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace attention_ref
