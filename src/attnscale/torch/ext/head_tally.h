// One head's tally of the monitor's row figures over some of its rows: the row rules of
// attnscale.torch.monitor_aggregates (its module docstring says what each row counts; its NumPy path
// is the reference), shared by head_sums.cpp (the figures given as tensors) and the fused kernel
// (the figures as it makes them, the q row still in cache).
//
// Arithmetic as NumPy's: comparisons in T against constants rounded to T, sums in double of T
// values, each norm in T (as torch's). A tally's rows are summed in order; tallies merge in the
// order they are given, so a result does not depend on which thread made which.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "lanes.h"

namespace attnscale {

// The rows of a head table, monitor_aggregates.ROWS in this order: the additive rows first, then
// the extremes, so that adding two tables is three array operations.
enum Row : int64_t {
  kNoEntropy,  // rows with no entropy: empty or broken (NaN entropy), single-key rows not among them
  kEmpty,      // lse = −inf: nothing attended
  kSaturated,  // largest weight e^{max − lse} above the saturation threshold, single-key rows excepted
  kSingle,     // one key attended: max = min and largest weight above 1/2
  kOverflow,   // a logit beyond ±float16's largest number
  kEntropySum, // Σ entropy over the rows with one (and not single-key)
  kEntropySquares,
  kFirstKeySum,  // Σ weight on key 0, over the same rows
  kQNormSum,     // Σ ‖q_i‖, over the same rows
  kKNormSum,     // Σ ‖k_j‖ over every key of the query head's KV head
  kRows,         // rows read (real tokens)
  kMaxLogit,     // NaN-skipping max of the rows' max logits (−inf: none)
  kMinEntropy,   // NaN-skipping min of the counted rows' entropies (inf: none)
  kMinLogit,     // NaN-skipping min of the rows' min logits (inf: none)
  kRowCount
};

// The constants the rules compare with, in T: log SATURATED_WEIGHT, log 1/2, float16's largest number.
template <typename T>
struct Thresholds {
  T log_saturated, log_half, float16_max;
  Thresholds(double saturated, double half, double big)
      : log_saturated(static_cast<T>(saturated)), log_half(static_cast<T>(half)), float16_max(static_cast<T>(big)) {}
};

// ‖x‖ of d numbers at the given stride, summed in T as torch's norm of a T tensor is (in lanes).
template <typename T>
T row_norm(const T* x, int64_t d, int64_t stride) {
  if (stride == 1) return std::sqrt(sum_of_squares(x, d));
  T s = 0;
  for (int64_t c = 0; c < d; ++c) s += x[c * stride] * x[c * stride];
  return std::sqrt(s);
}

template <typename T>
struct HeadTally {
  int64_t rows = 0, no_entropy = 0, empty = 0, saturated = 0, singles = 0, overflow = 0;
  double entropy_sum = 0, entropy_squares = 0, first_sum = 0, q_norm_sum = 0;
  T top_logit = -std::numeric_limits<T>::infinity();
  T least_entropy = std::numeric_limits<T>::infinity(), least_logit = std::numeric_limits<T>::infinity();

  // One row read: entropy e, largest and smallest logit a, b, lse z, weight on key 0 f, ‖q‖ of its q
  // row (row_norm). Returns its entropy as the figures count it: NaN for a row in no entropy figure
  // (broken, empty, single-key).
  T add(T e, T a, T b, T z, T f, T q_norm, const Thresholds<T>& t) {
    const T top = a - z;
    const bool broken = e != e;
    const bool single = a == b && top > t.log_half && !broken;
    ++rows;
    no_entropy += broken;
    empty += z == -std::numeric_limits<T>::infinity();
    saturated += top > t.log_saturated && !single;
    singles += single;
    overflow += a > t.float16_max || b < -t.float16_max;
    top_logit = a > top_logit ? a : top_logit;  // NaN compares false: skipped
    least_logit = b < least_logit ? b : least_logit;
    if (broken || single) return std::numeric_limits<T>::quiet_NaN();
    least_entropy = e < least_entropy ? e : least_entropy;
    entropy_sum += static_cast<double>(e);
    entropy_squares += static_cast<double>(e) * static_cast<double>(e);
    first_sum += static_cast<double>(f);
    q_norm_sum += static_cast<double>(q_norm);
    return e;
  }

  void merge(const HeadTally& o) {
    rows += o.rows, no_entropy += o.no_entropy, empty += o.empty, saturated += o.saturated;
    singles += o.singles, overflow += o.overflow;
    entropy_sum += o.entropy_sum, entropy_squares += o.entropy_squares, first_sum += o.first_sum;
    q_norm_sum += o.q_norm_sum;
    top_logit = o.top_logit > top_logit ? o.top_logit : top_logit;
    least_entropy = o.least_entropy < least_entropy ? o.least_entropy : least_entropy;
    least_logit = o.least_logit < least_logit ? o.least_logit : least_logit;
  }

  // Column h of a table (kRowCount, H), row-major; key_norm_sum: Σ ‖k_j‖ of the head's KV head.
  void write(double* table, int64_t h, int64_t H, double key_norm_sum) const {
    double* col = table + h;
    col[kNoEntropy * H] = double(no_entropy), col[kEmpty * H] = double(empty);
    col[kSaturated * H] = double(saturated), col[kSingle * H] = double(singles);
    col[kOverflow * H] = double(overflow), col[kEntropySum * H] = entropy_sum;
    col[kEntropySquares * H] = entropy_squares, col[kFirstKeySum * H] = first_sum;
    col[kQNormSum * H] = q_norm_sum, col[kKNormSum * H] = key_norm_sum, col[kRows * H] = double(rows);
    col[kMaxLogit * H] = double(top_logit), col[kMinEntropy * H] = double(least_entropy);
    col[kMinLogit * H] = double(least_logit);
  }
};

// ‖x_r‖ of `rows` rows of d unit-stride numbers, rows `ld` apart, into out: row_norm's bits, the
// sums of squares made kLanes rows at a time (lanes.h).
template <typename T>
void row_norms(const T* x, int64_t rows, int64_t d, int64_t ld, T* out) {
  sums_of_squares(x, rows, d, ld, out);
#pragma omp simd
  for (int64_t r = 0; r < rows; ++r) out[r] = std::sqrt(out[r]);
}

// Σ ‖k_j‖ over `keys` rows of d numbers (row stride `row`, column stride `col`), in double of T
// norms, in row order.
template <typename T>
double key_norm_sum(const T* k, int64_t keys, int64_t row, int64_t d, int64_t col) {
  double s = 0;
  if (col != 1) {
    for (int64_t j = 0; j < keys; ++j) s += static_cast<double>(row_norm(k + j * row, d, col));
    return s;
  }
  constexpr int64_t kChunk = 4 * kLanes<T>;
  T norms[kChunk];
  for (int64_t j0 = 0; j0 < keys; j0 += kChunk) {
    const int64_t n = std::min(kChunk, keys - j0);
    row_norms(k + j0 * row, n, d, row, norms);
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(norms[j]);
  }
  return s;
}

}  // namespace attnscale
