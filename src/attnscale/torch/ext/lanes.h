// Sums in lanes, shared by the fused kernel's row sums and the head sums' norms. gcc ends an
// `omp simd` float sum with one serial add per lane (16 at 512 bits): for rows of 16 to 64 numbers
// that epilogue took a fifth of the kernel's time on a 64-key row, and most of a norm of 16
// (measured, Intel Xeon). These keep kLanes partial sums, one cache line, and add them by halves:
// log2(kLanes) steps, in the same order on every thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

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

// x_c² added into each of kLanes lanes (lane w: x_w², x_{w+kLanes}², … in order), over d unit-stride numbers.
template <typename T>
inline void add_squares(const T* x, int64_t d, Lanes<T>& lane) {
  int64_t c0 = 0;
  for (; c0 + kLanes<T> <= d; c0 += kLanes<T>) {
#pragma omp simd
    for (int64_t w = 0; w < kLanes<T>; ++w) lane[w] += x[c0 + w] * x[c0 + w];
  }
  for (int64_t w = 0; c0 + w < d; ++w) lane[w] += x[c0 + w] * x[c0 + w];
}

// Σ x_c² over d unit-stride numbers.
template <typename T>
inline T sum_of_squares(const T* x, int64_t d) {
  alignas(64) Lanes<T> lane{};
  add_squares(x, d, lane);
  // By halves as tree_sum, but as loops: here, one call per row of a norm, tree_sum's shuffles made
  // the head table's norms 2.5x slower (measured, Intel Xeon, 2026-12-04); the same bits either way.
  for (int64_t half = kLanes<T> / 2; half > 0; half /= 2) {
    for (int64_t i = 0; i < half; ++i) lane[i] += lane[i + half];
  }
  return lane[0];
}

namespace detail {

template <typename T>
struct Wide {
  typedef T V __attribute__((vector_size(64)));  // one cache line: kLanes<T> numbers
  typedef std::conditional_t<sizeof(T) == 4, int32_t, int64_t> I;
  typedef I M __attribute__((vector_size(64)));  // a shuffle's indices
};

// Where element k of a halving step takes its low half from: rows of W partials, P = kLanes / W of
// them in each of two vectors a and b (b's indices from kLanes on), become 2P rows of W / 2.
constexpr int64_t low_half(int64_t k, int64_t W, int64_t N) {
  const int64_t half = W / 2, row = k / half, i = k % half, rows = N / W;
  return row < rows ? row * W + i : N + (row - rows) * W + i;
}

// One step of sum_of_squares' halving, for the rows of two vectors at once: each row's partial i
// and i + W/2 added (lane[i] += lane[i + half]), the rows of a, then b's, in the result.
template <typename T, int64_t W, size_t... K>
inline typename Wide<T>::V halves_across(typename Wide<T>::V a, typename Wide<T>::V b, std::index_sequence<K...>) {
  constexpr int64_t N = kLanes<T>;
#if defined(__clang__)
  return __builtin_shufflevector(a, b, low_half(K, W, N)...) +
         __builtin_shufflevector(a, b, (low_half(K, W, N) + W / 2)...);
#else
  using M = typename Wide<T>::M;
  return __builtin_shuffle(a, b, M{low_half(K, W, N)...}) + __builtin_shuffle(a, b, M{(low_half(K, W, N) + W / 2)...});
#endif
}

// v[0 .. W): rows of W partials each, one row per vector (W = kLanes); halved down to one vector
// of every row's sum, in row order. The vector count is W at every step: loops of constant trip
// count, unrolled, so the vectors stay in registers.
template <typename T, int64_t W>
inline typename Wide<T>::V halved(typename Wide<T>::V* v) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    for (int64_t j = 0; j < W / 2; ++j)
      v[j] = halves_across<T, W>(v[2 * j], v[2 * j + 1], std::make_index_sequence<kLanes<T>>{});
    return halved<T, W / 2>(v);
  }
}

}  // namespace detail

// Σ x_c² of each of `rows` rows (d unit-stride numbers, rows `ld` apart) into out[0 .. rows): each
// row by sum_of_squares' own additions (the same bits), kLanes rows at a time, their halving steps
// made across the rows' lanes in registers (two shuffles and an add per pair of vectors): the
// head table's norms, a horizontal sum per row of 16 to 128 numbers, took ~4 ns a row one at a time.
template <typename T>
inline void sums_of_squares(const T* x, int64_t rows, int64_t d, int64_t ld, T* out) {
  using V = typename detail::Wide<T>::V;
  constexpr int64_t N = kLanes<T>;
  for (int64_t r0 = 0; r0 < rows; r0 += N) {
    const int64_t n = std::min(N, rows - r0);
    V v[N];
    for (int64_t i = 0; i < N; ++i) {
      if (i >= n) {
        v[i] = V{};
      } else if (d % N == 0) {  // whole lines: the lanes in a register
        const T* row = x + (r0 + i) * ld;
        V acc{};
        for (int64_t c0 = 0; c0 < d; c0 += N) {
          V y;
          std::memcpy(&y, row + c0, sizeof y);
          acc += y * y;
        }
        v[i] = acc;
      } else {
        alignas(64) Lanes<T> lane{};
        add_squares(x + (r0 + i) * ld, d, lane);
        std::memcpy(&v[i], lane.data(), sizeof(V));
      }
    }
    const V sums = detail::halved<T, N>(v);
    for (int64_t i = 0; i < n; ++i) out[r0 + i] = sums[i];
  }
}

}  // namespace attnscale
