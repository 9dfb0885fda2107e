// The per-head sums of one attention call's row figures: what the monitor folds into its running
// aggregates (attnscale.torch.monitor_aggregates.call_figures, whose NumPy path is the reference
// this file matches, row rule for row rule; the module docstring there says what each row counts).
//
// Why C++: the NumPy path takes ~45 array calls per attention call, each a few µs, and in a model's
// forward, between the layers' GEMMs, each runs with cold caches: measured on MiniLM, 380 µs per
// call there against 90 µs in a loop. Here it is one pass over the rows, the ‖q‖ and ‖k‖ norms
// included, and one small array back.
//
// Inputs: the five figures (N, H, L) of dtype T (float32 or float64): entropy, max and min logit,
// lse, weight on key 0; q (N, H, L, d) the rows they are of and k (N_k, H_kv, S, d) the call's keys
// (N_k may be 1, or its stride 0: keys broadcast over the batch are read once), any strides, dtype
// T; valid None or bool (N, L), the rows that are real tokens.
// Output: float64 (kRowCount, H), the rows of head_tally.h's enum Row; and, on request, the
// entropies (N, H, L) with NaN where a row is not counted (a single-key row, a padding row), else an
// empty tensor. The row rules and their arithmetic: head_tally.h. Sums run in row order, NumPy's
// pairwise, so the two agree to rounding (a few ulp of a sum; a norm's own summation order, a few
// ulp of it), not bit for bit.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "head_tally.h"

namespace {

using attnscale::HeadTally;
using attnscale::kRowCount;

template <typename T>
void sums_of(const at::Tensor& ent, const at::Tensor& hi, const at::Tensor& lo, const at::Tensor& lse,
             const at::Tensor& first, const at::Tensor& q, const at::Tensor& k, const at::Tensor* valid,
             const attnscale::Thresholds<T>& thresholds, double* out, T* ent_out) {
  const int64_t N = ent.size(0), H = ent.size(1), L = ent.size(2), d = q.size(3);
  const int64_t H_kv = k.size(1), S = k.size(2);
  const int64_t N_k = k.stride(0) == 0 ? 1 : k.size(0);  // keys broadcast over the batch: read once
  const int64_t q0 = q.stride(0), q1 = q.stride(1), q2 = q.stride(2), q3 = q.stride(3);
  const T *E = ent.const_data_ptr<T>(), *A = hi.const_data_ptr<T>(), *B = lo.const_data_ptr<T>();
  const T *Z = lse.const_data_ptr<T>(), *F = first.const_data_ptr<T>(), *Q = q.const_data_ptr<T>();
  const bool* V = valid ? valid->const_data_ptr<bool>() : nullptr;
  const int64_t v0 = valid ? valid->stride(0) : 0, v1 = valid ? valid->stride(1) : 0;
  std::vector<double> key_sums(H_kv, 0.0);  // Σ ‖k_j‖ per KV head, then each query head its group's
  const T* K = k.const_data_ptr<T>();
  for (int64_t hk = 0; hk < H_kv; ++hk)
    for (int64_t n = 0; n < N_k; ++n)
      key_sums[hk] += attnscale::key_norm_sum(K + n * k.stride(0) + hk * k.stride(1), S, k.stride(2), d, k.stride(3));
  for (int64_t h = 0; h < H; ++h) {
    HeadTally<T> tally;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = (n * H + h) * L;
      const T* plane = Q + n * q0 + h * q1;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t r = base + i;
        if (V && !V[n * v0 + i * v1]) {  // padding: no row at all
          if (ent_out) ent_out[r] = std::numeric_limits<T>::quiet_NaN();
          continue;
        }
        const T counted = tally.add(E[r], A[r], B[r], Z[r], F[r], attnscale::row_norm(plane + i * q2, d, q3), thresholds);
        if (ent_out) ent_out[r] = counted;
      }
    }
    tally.write(out, h, H, key_sums[h / (H / H_kv)]);
  }
}

std::tuple<at::Tensor, at::Tensor> head_sums(const at::Tensor& entropy, const at::Tensor& max_logit,
                                             const at::Tensor& min_logit, const at::Tensor& lse,
                                             const at::Tensor& first_key, const at::Tensor& q, const at::Tensor& k,
                                             const std::optional<at::Tensor>& valid, double log_saturated,
                                             double log_half, double float16_max, bool entropies) {
  const auto dtype = entropy.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble, "head_sums: dtype must be float32 or float64");
  TORCH_CHECK(entropy.dim() == 3, "head_sums: figures must be (N, H, L)");
  for (const at::Tensor* x : {&max_logit, &min_logit, &lse, &first_key})
    TORCH_CHECK(x->sizes() == entropy.sizes() && x->scalar_type() == dtype,
                "head_sums: the five figures must be (N, H, L) of one dtype");
  TORCH_CHECK(q.dim() == 4 && q.size(0) == entropy.size(0) && q.size(1) == entropy.size(1) &&
                  q.size(2) == entropy.size(2) && q.scalar_type() == dtype,
              "head_sums: q must be (N, H, L, d), the figures' rows, of their dtype");
  TORCH_CHECK(k.dim() == 4 && k.size(3) == q.size(3) && k.size(1) > 0 &&
                  q.size(1) % k.size(1) == 0 && k.scalar_type() == dtype,
              "head_sums: k must be (N_k, H_kv, S, d), H_kv dividing H, of the figures' dtype");
  if (valid.has_value())
    TORCH_CHECK(valid->scalar_type() == at::kBool && valid->dim() == 2 && valid->size(0) == q.size(0) &&
                    valid->size(1) == q.size(2),
                "head_sums: valid must be bool (N, L)");
  const int64_t H = entropy.size(1);
  at::Tensor out = at::empty({kRowCount, H}, entropy.options().dtype(at::kDouble));
  at::Tensor ent_out = entropies ? at::empty(entropy.sizes(), entropy.options()) : at::empty({0}, entropy.options());
  const at::Tensor* vp = valid.has_value() ? &valid.value() : nullptr;
  const at::Tensor e = entropy.contiguous(), hi = max_logit.contiguous(), lo = min_logit.contiguous(),
                   z = lse.contiguous(), f = first_key.contiguous();
  if (dtype == at::kFloat) {
    sums_of<float>(e, hi, lo, z, f, q, k, vp, {log_saturated, log_half, float16_max}, out.data_ptr<double>(),
                   entropies ? ent_out.data_ptr<float>() : nullptr);
  } else {
    sums_of<double>(e, hi, lo, z, f, q, k, vp, {log_saturated, log_half, float16_max}, out.data_ptr<double>(),
                    entropies ? ent_out.data_ptr<double>() : nullptr);
  }
  return {out, ent_out};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnscale_health, m) {
  m.def("head_sums(Tensor entropy, Tensor max_logit, Tensor min_logit, Tensor lse, Tensor first_key, Tensor q, "
        "Tensor k, Tensor? valid, float log_saturated, float log_half, float float16_max, bool entropies) "
        "-> (Tensor, Tensor)");
  m.impl("head_sums", c10::DispatchKey::CPU, &head_sums);
}
