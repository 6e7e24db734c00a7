#include "backend/cpu/no_fp_contract.h"  // first: no FMA contraction in this file

#include "backend/cpu/cpu_ops.h"

#include <mutex>

#include "backend/cpu/transformer_rows.h"
#include "core/error.h"

namespace amp::cpu {

using namespace trows;

// Token + position embedding, forward and backward (transformer_args.h). The backward is
// deterministic without atomics: dwpe by (position, column tile), dwte by a stable counting sort of
// the positions by token, then (token, column tile) items summing their positions in order.

void CpuOps::reserve_embedding(int64_t max_tokens, int64_t vocab) {
  AMP_CHECK(max_tokens >= 0 && max_tokens <= int64_t(INT32_MAX) && vocab >= 0 && vocab < int64_t(INT32_MAX),
            "reserve: max_tokens ", max_tokens, " vocab ", vocab, " out of range");
  std::lock_guard<std::mutex> lock(embedding_.mu);
  EmbeddingScratch& s = embedding_;
  s.max_tokens = std::max(s.max_tokens, max_tokens);
  s.vocab = std::max(s.vocab, vocab);
  s.start.resize(size_t(s.vocab + 1));
  s.cursor.resize(size_t(s.vocab));
  s.order.resize(size_t(s.max_tokens));
  s.present.reserve(size_t(std::min(s.max_tokens, s.vocab)));
}

void CpuOps::embedding_forward(const EmbeddingArgs& a) {
  check_args(a);
  const int64_t N = a.B * a.T, C = a.C;
  if (N == 0 || C == 0) return;
#pragma omp parallel if (N * C >= kParallelMin && N > 1)
  {
    std::vector<float> v(static_cast<size_t>(C)), w(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t tok = a.tokens[i];
      if (tok < 0 || tok >= a.vocab) {
        std::fill(v.begin(), v.end(), kQuietNaN);  // a caller's bug, shown in the loss
      } else {
        load(a.wte, a.type, tok * C, C, v.data());
        load(a.wpe, a.type, (i % a.T) * C, C, w.data());
        for (int64_t j = 0; j < C; ++j) v[size_t(j)] = v[size_t(j)] + w[size_t(j)];
      }
      store(v.data(), a.x, a.type, i * C, C);
    }
  }
}

void CpuOps::embedding_backward(const EmbeddingBackwardArgs& a) {
  check_args(a);
  const int64_t N = a.B * a.T, C = a.C, T = a.T;
  if (C == 0) return;
  const int64_t tiles = (C + kTile - 1) / kTile;
  // dwpe: written entirely; row t < T is the sum over b in increasing order.
  {
    const int64_t items = a.max_positions * tiles;
#pragma omp parallel for schedule(static) if (a.max_positions * C >= kParallelMin && items > 1)
    for (int64_t w = 0; w < items; ++w) {
      const int64_t t = w / tiles, c0 = (w % tiles) * kTile, len = std::min(kTile, C - c0);
      alignas(64) float acc[kTile];
      std::fill(acc, acc + len, 0.0f);
      if (t < T)
        for (int64_t b = 0; b < a.B; ++b) widen_add(at(a.dx, a.type, (b * T + t) * C + c0), a.type, acc, size_t(len));
      store(acc, a.dwpe, a.type, t * C + c0, len);
    }
  }
  if (N == 0) return;
  // dwte: a stable counting sort of the positions by token, then each (token, column tile) sums
  // its positions in increasing order and adds the sum to the old value.
  std::lock_guard<std::mutex> lock(embedding_.mu);
  EmbeddingScratch& s = embedding_;
  AMP_CHECK(N <= s.max_tokens && a.vocab <= s.vocab, "embedding_backward: B*T = ", N, " and vocab ", a.vocab,
            " exceed the reserve (", s.max_tokens, " tokens, vocab ", s.vocab, "): call reserve() first");
  const int64_t V = a.vocab;
  std::fill(s.start.begin(), s.start.begin() + V + 1, 0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t tok = a.tokens[i];
    if (tok >= 0 && tok < V) ++s.start[size_t(tok + 1)];
  }
  s.present.clear();
  for (int64_t v = 0; v < V; ++v) {
    if (s.start[size_t(v + 1)] > 0) s.present.push_back(int32_t(v));
    s.start[size_t(v + 1)] += s.start[size_t(v)];
  }
  std::copy(s.start.begin(), s.start.begin() + V, s.cursor.begin());
  for (int64_t i = 0; i < N; ++i) {
    const int64_t tok = a.tokens[i];
    if (tok >= 0 && tok < V) s.order[size_t(s.cursor[size_t(tok)]++)] = int32_t(i);
  }
  const int64_t items = int64_t(s.present.size()) * tiles;
#pragma omp parallel for schedule(dynamic, 1) if (N * C >= kParallelMin && items > 1)
  for (int64_t w = 0; w < items; ++w) {
    const int64_t v = s.present[size_t(w / tiles)], c0 = (w % tiles) * kTile, len = std::min(kTile, C - c0);
    alignas(64) float acc[kTile], x[kTile];
    std::fill(acc, acc + len, 0.0f);
    for (int64_t k = s.start[size_t(v)]; k < s.start[size_t(v + 1)]; ++k) {
      load(a.dx, a.type, int64_t(s.order[size_t(k)]) * C + c0, len, x);
      for (int64_t j = 0; j < len; ++j) acc[j] += x[j];
    }
    load(a.dwte, a.type, v * C + c0, len, x);
    for (int64_t j = 0; j < len; ++j) x[j] = x[j] + acc[j];
    store(x, a.dwte, a.type, v * C + c0, len);
  }
}

}  // namespace amp::cpu
