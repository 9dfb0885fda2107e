// Sums in lanes, shared by the fused kernel's row sums and the head sums' norms. gcc ends an
// `omp simd` float sum with one serial add per lane (16 at 512 bits): for rows of 16 to 64 numbers
// that epilogue took a fifth of the kernel's time on a 64-key row, and most of a norm of 16
// (measured, Intel Xeon). These keep kLanes partial sums, one cache line, and add them by halves:
// log2(kLanes) steps, in the same order on every thread.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace attnscale {

template <typename T>
inline constexpr int64_t kLanes = 64 / static_cast<int64_t>(sizeof(T));  // 16 float, 8 double

template <typename T>
using Lanes = std::array<T, kLanes<T>>;

// Σ x by halves (x[i] + x[i + n/2], …), in registers (vector extensions). Written
// as loops over the array (as sum_of_squares below), gcc kept the kernel's halves in memory and each
// step's load waited on the previous step's wider store: a tenth of the kernel's time on 20-key
// rows (perf, Intel Xeon, 2026-12-04; the forward 231 → 218 µs at (8, 12, 20, 32)). The same
// additions in the same order: the same bits (checked).
// A vector's two halves added: the low half + the high half (GCC and Clang vector extensions).
template <typename Half, typename Whole>
inline Half halves_added(const Whole& v) {
  static_assert(sizeof(Whole) == 2 * sizeof(Half), "halves_added: Half must be half of Whole");
  Half lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  return lo + hi;
}

template <typename T>
inline T tree_sum(const Lanes<T>& x) {
  typedef T V16 __attribute__((vector_size(16 * sizeof(T))));
  typedef T V8 __attribute__((vector_size(8 * sizeof(T))));
  typedef T V4 __attribute__((vector_size(4 * sizeof(T))));
  typedef T V2 __attribute__((vector_size(2 * sizeof(T))));
  static_assert(kLanes<T> == 16 || kLanes<T> == 8, "tree_sum: 16 floats or 8 doubles");
  V8 a8;
  if constexpr (kLanes<T> == 16) {
    V16 v;
    std::memcpy(&v, x.data(), sizeof v);
    a8 = halves_added<V8>(v);
  } else {
    std::memcpy(&a8, x.data(), sizeof a8);
  }
  const V2 a2 = halves_added<V2>(halves_added<V4>(a8));
  return a2[0] + a2[1];
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
  // By halves as tree_sum, but as loops: here, one call per row of a norm, tree_sum's shuffles made
  // the head table's norms 2.5x slower (measured, Intel Xeon, 2026-12-04); the same bits either way.
  for (int64_t half = kLanes<T> / 2; half > 0; half /= 2) {
    for (int64_t i = 0; i < half; ++i) lane[i] += lane[i + half];
  }
  return lane[0];
}

}  // namespace attnscale
