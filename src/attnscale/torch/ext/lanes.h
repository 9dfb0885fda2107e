// Sums in lanes, shared by the fused kernel's row sums and the head sums' norms. gcc ends an
// `omp simd` float sum with one serial add per lane (16 at 512 bits): for rows of 16 to 64 numbers
// that epilogue took a fifth of the kernel's time on a 64-key row, and most of a norm of 16
// (measured, Intel Xeon). These keep kLanes partial sums, one cache line, and add them by halves:
// log2(kLanes) steps, in the same order on every thread.
#pragma once

#include <array>
#include <cstdint>

namespace attnscale {

template <typename T>
inline constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(T));  // 16 float, 8 double

template <typename T>
using Lanes = std::array<T, kLanes<T>>;

// Σ x by halves (x[i] + x[i + n/2], …). Adds into x.
template <typename T>
inline T tree_sum(Lanes<T>& x) {
  for (int64_t half = kLanes<T> / 2; half > 0; half /= 2) {
    for (int64_t i = 0; i < half; ++i) x[i] += x[i + half];
  }
  return x[0];
}

// Σ x_c² over d unit-stride numbers.
template <typename T>
inline T sum_of_squares(const T* x, int64_t d) {
  alignas(64) Lanes<T> lane{};
  int64_t c0 = 0;
  for (; c0 + kLanes<T> <= d; c0 += kLanes<T>) {
#pragma omp simd
    for (int64_t w = 0; w < kLanes<T>; ++w) lane[w] += x[c0 + w] * x[c0 + w];
  }
  for (int64_t w = 0; c0 + w < d; ++w) lane[w] += x[c0 + w] * x[c0 + w];
  return tree_sum(lane);
}

}  // namespace attnscale
