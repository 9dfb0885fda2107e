// Fused CPU attention that also returns each query row's log-sum-exp, entropy and logit range.
//
// Flash-style online softmax over key blocks (Dao et al. 2022, "FlashAttention", algorithm 1), with
// one more running sum next to the softmax sum. For row i, with running max m and d_j = s_j − m:
//
//     l = Σ_j e^{d_j}          u = Σ_j e^{d_j} · d_j   (≤ 0)
//     lse = m + ln l           entropy = −Σ p_j ln p_j = ln l − u / l
//
// Both terms of the entropy are ≥ 0, so it is never a difference of two large numbers (as
// lse − Σ p·s would be for huge logits). When the max moves from m to m' = m + δ, every term is
// rescaled by α = e^{−δ}:  l ← α·l,  u ← α·(u − δ·l) (α = 0 exactly once e^{−δ} underflows).  The max logit is the final m (free); the min
// logit, computed only on request, costs a compare and a select per score inside the max pass.
//
// Shapes (PyTorch SDPA layout): q (B, H_q, L, d_k), k (B, H_kv, S, d_k), v (B, H_kv, S, d_v), last
// dimension contiguous, any other strides; mask bool and bias float broadcast (strided) to
// (B, H_q, L, S). Work is split over (batch, head, query block) with at::parallel_for; the two
// products per block go to the BLAS that libtorch_cpu carries (sgemm_/dgemm_).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*);
}

namespace {

// Row-major C (m×n) = alpha · A (m×k) · op(B) + beta · C, through column-major BLAS (C^T = op(B)^T A^T).
// b_transposed: B is stored as (n×k) rows (keys), else as (k×n) rows (values).
template <typename T>
void gemm_rows(int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb, bool b_transposed,
               T beta, T* c, int ldc) {
  const char tb = b_transposed ? 'T' : 'N';
  const char ta = 'N';
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  } else {
    dgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  }
}

// e^x for x ≤ 0, vectorisable: x = n·ln2 + r with |r| ≤ ln2/2, degree-7 Taylor polynomial for e^r
// (truncation < 2e-8 relative, about 1 float32 ulp), 2^n from the exponent bits.
inline float exp_nonpositive(float x) {
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// Below this shifted logit a weight underflows (float32: e^-87 ≈ 1.6e-38): it counts as exactly 0.
template <typename T> constexpr T kUnderflow = std::is_same_v<T, float> ? T(-87) : T(-708);

// A 64-byte-aligned scratch array. Every row of scores starts on a 64-byte boundary, so the
// vectorised reductions split a row the same way on every thread: results do not depend on which
// thread (or how many) ran a block.
template <typename T>
class Scratch {
 public:
  explicit Scratch(size_t n)
      : data_(static_cast<T*>(std::aligned_alloc(64, std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64)))) {
    TORCH_CHECK(data_ != nullptr, "attnscale_health: out of memory for ", n, " scratch numbers");
  }
  ~Scratch() { std::free(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() { return data_; }

 private:
  T* data_;
};

struct Strides {
  int64_t b, h, row, col;
};

inline Strides strides_of(const at::Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <typename T>
void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor* mask,
         const at::Tensor* bias, bool causal, int64_t causal_offset, double scale_d, bool logit_range,
         int64_t q_block, int64_t kv_block, at::Tensor& out, at::Tensor& lse, at::Tensor& entropy,
         at::Tensor& max_logit, at::Tensor& min_logit) {
  const int64_t B = q.size(0), H_q = q.size(1), L = q.size(2), d_k = q.size(3);
  const int64_t H_kv = k.size(1), S = k.size(2), d_v = v.size(3);
  const int64_t group = H_q / H_kv;
  const int64_t qb = std::max<int64_t>(1, std::min(q_block, L));
  const int64_t kb = std::max<int64_t>(1, std::min(kv_block, S));
  const int64_t n_qblocks = (L + qb - 1) / qb;
  constexpr int64_t per_line = 64 / sizeof(T);
  const int64_t ld = (kb + per_line - 1) / per_line * per_line;  // scores row stride: whole cache lines
  const T scale = static_cast<T>(scale_d);
  constexpr T lowest = std::numeric_limits<T>::lowest();  // a masked logit (finite: 0·it stays 0)
  constexpr T nan = std::numeric_limits<T>::quiet_NaN();
  constexpr T inf = std::numeric_limits<T>::infinity();
  constexpr T under = kUnderflow<T>;

  const T* qp = q.const_data_ptr<T>();
  const T* kp = k.const_data_ptr<T>();
  const T* vp = v.const_data_ptr<T>();
  const Strides qs = strides_of(q), ks = strides_of(k), vs = strides_of(v);
  const bool* mp = mask ? mask->const_data_ptr<bool>() : nullptr;
  const Strides ms = mask ? strides_of(*mask) : Strides{0, 0, 0, 0};
  const T* bp = bias ? bias->const_data_ptr<T>() : nullptr;
  const Strides bs = bias ? strides_of(*bias) : Strides{0, 0, 0, 0};
  T* op = out.data_ptr<T>();
  T* lse_p = lse.data_ptr<T>();
  T* ent_p = entropy.data_ptr<T>();
  T* max_p = max_logit.data_ptr<T>();
  T* min_p = logit_range ? min_logit.data_ptr<T>() : nullptr;

  at::parallel_for(0, B * H_q * n_qblocks, 1, [&](int64_t begin, int64_t end) {
    Scratch<T> scores_buffer(static_cast<size_t>(qb * ld));
    T* const scores = scores_buffer.get();
    std::vector<T> m(qb), l(qb), u(qb), lo(qb);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (H_q * n_qblocks);
      const int64_t h = (task / n_qblocks) % H_q;
      const int64_t i0 = (task % n_qblocks) * qb;
      const int64_t rows = std::min(qb, L - i0);
      const int64_t hk = h / group;
      const T* Q = qp + b * qs.b + h * qs.h + i0 * qs.row;
      const T* K = kp + b * ks.b + hk * ks.h;
      const T* V = vp + b * vs.b + hk * vs.h;
      T* O = op + ((b * H_q + h) * L + i0) * d_v;
      std::fill(O, O + rows * d_v, T(0));
      std::fill(m.begin(), m.end(), lowest);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(u.begin(), u.end(), T(0));
      std::fill(lo.begin(), lo.end(), inf);
      // Causal: row i attends keys j ≤ i + offset, so no key past the block's last row's limit.
      const int64_t j_end = causal ? std::min<int64_t>(S, i0 + rows + causal_offset) : S;
      for (int64_t j0 = 0; j0 < j_end; j0 += kb) {
        const int64_t cols = std::min(kb, j_end - j0);
        gemm_rows<T>(static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(d_k), scale, Q,
                     static_cast<int>(qs.row), K + j0 * ks.row, static_cast<int>(ks.row), true, T(0),
                     scores, static_cast<int>(ld));
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          T* s = scores + r * ld;
          if (bp) {
            const T* brow = bp + b * bs.b + h * bs.h + i * bs.row + j0 * bs.col;
            for (int64_t c = 0; c < cols; ++c) {
              const T add = brow[c * bs.col];
              s[c] = add == -inf ? lowest : s[c] + add;
            }
          }
          if (mp) {
            const bool* mrow = mp + b * ms.b + h * ms.h + i * ms.row + j0 * ms.col;
            for (int64_t c = 0; c < cols; ++c) s[c] = mrow[c * ms.col] ? s[c] : lowest;
          }
          if (causal) {
            const int64_t allowed = std::clamp<int64_t>(i + causal_offset + 1 - j0, 0, cols);
            std::fill(s + allowed, s + cols, lowest);
          }
          // Plain selects, not std::max/min: their reference returns made gcc vectorise these reductions
          // with gathers, and this pass then cost a fifth of the whole kernel (measured).
          T mx = lowest;
          if (logit_range) {  // the min in the same pass as the max: one more compare and select per score
            T mn = lo[r];
#pragma omp simd reduction(max : mx) reduction(min : mn)
            for (int64_t c = 0; c < cols; ++c) {
              const T x = s[c];
              mx = x > mx ? x : mx;
              mn = (x != lowest && x < mn) ? x : mn;
            }
            lo[r] = mn;
          } else {
#pragma omp simd reduction(max : mx)
            for (int64_t c = 0; c < cols; ++c) mx = s[c] > mx ? s[c] : mx;
          }
          const T m_new = std::max(m[r], mx);
          if (m_new == lowest) {  // nothing attended yet in this row: no weight reaches the values...
            bool poisoned = false;  // ...unless a logit is NaN (the max pass skips NaN): keep it visible
            for (int64_t c = 0; c < cols; ++c) {
              poisoned |= s[c] != s[c];
              s[c] = s[c] == s[c] ? T(0) : nan;
            }
            if (poisoned) l[r] = nan;
            continue;
          }
          T sum = 0, sum_d = 0;
#pragma omp simd reduction(+ : sum, sum_d)
          for (int64_t c = 0; c < cols; ++c) {
            const T d = s[c] - m_new;
            const bool keep = d >= under;  // masked entries (lowest) and underflow weigh exactly 0
            const T dk = keep ? d : T(0);
            // d is NaN for a NaN logit, or for a +inf one (inf − inf: q·k overflowed): the weight is
            // NaN, so the row reads as broken downstream instead of as "nothing attended" (l = 0).
            const T e = keep ? exp_nonpositive(dk) : (d == d ? T(0) : nan);
            s[c] = e;
            sum += e;
            sum_d += e * dk;
          }
          if (l[r] != T(0)) {  // > 0, or NaN (a broken row stays NaN)
            const T delta = m_new - m[r];
            // exp_nonpositive is valid only down to `under`: a jump of the max beyond it (a later key
            // block with a logit ≥ 87 above the running max, in float32) weighs the old sums exactly 0.
            const T alpha = -delta >= under ? exp_nonpositive(-delta) : T(0);
            u[r] = alpha * (u[r] - delta * l[r]) + sum_d;
            l[r] = alpha * l[r] + sum;
            if (alpha != T(1)) {
              T* orow = O + r * d_v;
#pragma omp simd
              for (int64_t c = 0; c < d_v; ++c) orow[c] *= alpha;
            }
          } else {
            u[r] = sum_d;
            l[r] = sum;
          }
          m[r] = m_new;
        }
        gemm_rows<T>(static_cast<int>(rows), static_cast<int>(d_v), static_cast<int>(cols), T(1),
                     scores, static_cast<int>(ld), V + j0 * vs.row, static_cast<int>(vs.row), false,
                     T(1), O, static_cast<int>(d_v));
      }
      const int64_t row0 = (b * H_q + h) * L + i0;
      for (int64_t r = 0; r < rows; ++r) {
        if (l[r] > T(0)) {
          const T inv = T(1) / l[r];
          T* orow = O + r * d_v;
#pragma omp simd
          for (int64_t c = 0; c < d_v; ++c) orow[c] *= inv;
          const T log_l = std::log(l[r]);
          lse_p[row0 + r] = m[r] + log_l;
          ent_p[row0 + r] = log_l - u[r] * inv;
          max_p[row0 + r] = m[r];
          if (min_p) min_p[row0 + r] = lo[r];
        } else if (l[r] != l[r]) {  // a NaN or +inf logit (q·k overflowed): no distribution, and say so
          T* orow = O + r * d_v;
          std::fill(orow, orow + d_v, nan);
          const bool overflowed = m[r] == inf;  // as the chunked backend: lse +inf, the range as seen
          lse_p[row0 + r] = overflowed ? inf : nan;
          ent_p[row0 + r] = nan;
          max_p[row0 + r] = overflowed ? inf : nan;
          if (min_p) min_p[row0 + r] = overflowed ? lo[r] : nan;
        } else {  // a fully masked row: zero output (already), no distribution
          lse_p[row0 + r] = -inf;
          ent_p[row0 + r] = nan;
          max_p[row0 + r] = nan;
          if (min_p) min_p[row0 + r] = nan;
        }
      }
    }
  });
}

// Returns [out (B, H_q, L, d_v), lse, entropy, max_logit, min_logit (each (B, H_q, L); min_logit empty
// unless logit_range)], in the inputs' dtype (float32 or float64).
std::vector<at::Tensor> health_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const std::optional<at::Tensor>& mask,
                                         const std::optional<at::Tensor>& bias, bool causal,
                                         int64_t causal_offset, double scale, bool logit_range,
                                         int64_t q_block, int64_t kv_block) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be 4-D (B, H, N, d)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v must share one dtype");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "last dimension must be contiguous");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "H_kv must divide H_q");
  const auto B = q.size(0), H_q = q.size(1), L = q.size(2);
  auto opts = q.options();
  at::Tensor out = at::empty({B, H_q, L, v.size(3)}, opts);
  at::Tensor lse = at::empty({B, H_q, L}, opts);
  at::Tensor entropy = at::empty({B, H_q, L}, opts);
  at::Tensor max_logit = at::empty({B, H_q, L}, opts);
  at::Tensor min_logit = logit_range ? at::empty({B, H_q, L}, opts) : at::empty({0}, opts);
  const at::Tensor* mp = mask.has_value() ? &mask.value() : nullptr;
  const at::Tensor* bp = bias.has_value() ? &bias.value() : nullptr;
  if (mp) TORCH_CHECK(mp->scalar_type() == at::kBool && mp->dim() == 4, "mask must be 4-D bool");
  if (bp) TORCH_CHECK(bp->scalar_type() == q.scalar_type() && bp->dim() == 4, "bias must be 4-D, q's dtype");
  if (q.scalar_type() == at::kFloat) {
    run<float>(q, k, v, mp, bp, causal, causal_offset, scale, logit_range, q_block, kv_block, out, lse,
               entropy, max_logit, min_logit);
  } else if (q.scalar_type() == at::kDouble) {
    run<double>(q, k, v, mp, bp, causal, causal_offset, scale, logit_range, q_block, kv_block, out, lse,
                entropy, max_logit, min_logit);
  } else {
    TORCH_CHECK(false, "dtype must be float32 or float64, got ", q.scalar_type());
  }
  return {out, lse, entropy, max_logit, min_logit};
}

}  // namespace

TORCH_LIBRARY(attnscale_health, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor? mask, Tensor? bias, bool causal, int causal_offset, "
        "float scale, bool logit_range, int q_block, int kv_block) -> Tensor[]");
  m.impl("attention", c10::DispatchKey::CPU, &health_attention);
}
