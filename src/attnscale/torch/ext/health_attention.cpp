// Fused CPU attention that also returns each query row's log-sum-exp, entropy and logit range, and
// its flash-style backward.
//
// Forward: online softmax over key blocks (Dao et al. 2022, "FlashAttention", algorithm 1), with
// one more running sum next to the softmax sum. For row i, with running max m and d_j = s_j − m:
//
//     l = Σ_j e^{d_j}          u = Σ_j e^{d_j} · d_j   (≤ 0)
//     lse = m + ln l           entropy = −Σ p_j ln p_j = ln l − u / l
//
// Both terms of the entropy are ≥ 0, so it is never a difference of two large numbers (as
// lse − Σ p·s would be for huge logits). When the max moves from m to m' = m + δ, every term is
// rescaled by α = e^{−δ}:  l ← α·l,  u ← α·(u − δ·l) (α = 0 exactly once e^{−δ} underflows).  The max logit is the final m (free); the min
// logit, computed only on request, costs a compare and a select per score inside the max pass; the
// weight on key 0 (an attention sink's figure), on request too, is e^{s_i0 − lse} from the logit of
// the first key block, kept as it is made.
//
// Backward (Dao 2023, "FlashAttention-2", algorithm 2): the probabilities are recomputed block by
// block from the saved lse, p_ij = e^{s_ij − lse_i}, never stored whole. With D_i = Σ_c dO_ic·O_ic
// (= Σ_j p_ij dP_ij):  dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dbias = dS,
// dZ = dS ∘ cap'(z),  dQ = scale · dZ K,  dK = scale · dZᵀ Q.  One task owns a (batch, KV head) and
// every query head of its group, so dK and dV are summed over the group without atomics.
//
// Determinism: no sum depends on which thread ran which task, so for a given thread count the
// results are the same bits run after run. Across thread counts they may differ by rounding (a few
// ulp of the largest entry; tests/test_torch_backward.py allows 16): the BLAS may choose its GEMM
// kernels by the number of threads, and MKL does on Intel Xeon CPUs (not on AMD EPYC).
//
// Logits: s = cap(scale · q·k) + bias, cap(z) = c·tanh(z / c) when softcap c > 0 (Gemma 2), else z;
// a masked entry (mask False, bias −inf, past the causal limit) is not attended.
//
// Shapes (PyTorch SDPA layout): q (B, H_q, L, d_k), k (B, H_kv, S, d_k), v (B, H_kv, S, d_v), last
// dimension contiguous, any other strides; mask bool and bias float broadcast (strided) to
// (B, H_q, L, S). Work is split with at::parallel_for; the products per block go to the BLAS that
// libtorch_cpu carries (sgemm_/dgemm_). Memory beyond inputs and outputs: one block of scores per
// thread (two, three with a cap, in the backward).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "head_tally.h"
#include "lanes.h"

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*);
}

namespace {

// Row-major C (m×n) = alpha · op(A) (m×k) · op(B) (k×n) + beta · C, through column-major BLAS
// (Cᵀ = op(B)ᵀ op(A)ᵀ). a_transposed: A is stored as (k×m) rows; b_transposed: B is stored as (n×k)
// rows (keys), else as (k×n) rows (values).
template <typename T>
void gemm(int m, int n, int k, T alpha, const T* a, int lda, bool a_transposed, const T* b, int ldb,
          bool b_transposed, T beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  const char tb = b_transposed ? 'T' : 'N';
  const char ta = a_transposed ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  } else {
    dgemm_(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc);
  }
}

// e^x for x ≤ 0, vectorisable: x = n·ln2 + r with |r| ≤ ln2/2, degree-7 Taylor polynomial for e^r
// (truncation < 2e-8 relative, about 1 float32 ulp), 2^n from the exponent bits.
inline float exp_nonpositive(float x) {
  // NaN x gives NaN; the clamp keeps its int conversion below defined (NaN > −127 is false).
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  n = n > -127.0f ? n : -127.0f;
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
// vectorised reductions split a row the same way on every thread: their results do not depend on
// which thread ran a block (the GEMMs' may depend on the thread count: see the header).
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

// A new 4-D tensor of `sizes` laid out as x (empty_like's rule, another last dimension allowed): its
// first three dimensions in the order of x's strides, largest first (ties: in order), the last
// innermost. A model's q is usually its (B, L, H, d) projection viewed as (B, H, L, d): the output
// and the gradients in that order are what its reshapes back read as views; contiguous ones cost a
// copy each (four per call in training, measured, where SDPA makes none). ext/__init__.py's fake
// implementations follow the same rule.
at::Tensor new_like_layout(const at::Tensor& x, at::IntArrayRef sizes, bool zero) {
  std::array<int64_t, 3> order{0, 1, 2};
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  const std::vector<int64_t> laid{sizes[order[0]], sizes[order[1]], sizes[order[2]], sizes[3]};
  at::Tensor t = zero ? at::zeros(laid, x.options()) : at::empty(laid, x.options());
  std::vector<int64_t> back(4, 3);
  for (int64_t i = 0; i < 3; ++i) back[order[i]] = i;
  return t.permute(back);
}

// What forward and backward share: the inputs, and how a block of logits is made from them.
template <typename T>
struct Logits {
  int64_t B, H_q, L, d_k, H_kv, S, d_v, group;
  const T *q, *k, *v;
  Strides qs, ks, vs;
  const bool* mask;
  Strides ms;
  const T* bias;
  Strides bs;
  bool causal;
  int64_t causal_offset;
  T scale, softcap;
  static constexpr T lowest = std::numeric_limits<T>::lowest();  // a masked logit (finite: 0·it stays 0)

  Logits(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor* mask_,
         const at::Tensor* bias_, bool causal_, int64_t offset, double scale_, double softcap_)
      : B(q_.size(0)), H_q(q_.size(1)), L(q_.size(2)), d_k(q_.size(3)), H_kv(k_.size(1)), S(k_.size(2)),
        d_v(v_.size(3)), group(q_.size(1) / k_.size(1)), q(q_.const_data_ptr<T>()), k(k_.const_data_ptr<T>()),
        v(v_.const_data_ptr<T>()), qs(strides_of(q_)), ks(strides_of(k_)), vs(strides_of(v_)),
        mask(mask_ ? mask_->const_data_ptr<bool>() : nullptr), ms(mask_ ? strides_of(*mask_) : Strides{0, 0, 0, 0}),
        bias(bias_ ? bias_->const_data_ptr<T>() : nullptr), bs(bias_ ? strides_of(*bias_) : Strides{0, 0, 0, 0}),
        causal(causal_), causal_offset(offset), scale(static_cast<T>(scale_)), softcap(static_cast<T>(softcap_)) {}

  const T* Q(int64_t b, int64_t h, int64_t i) const { return q + b * qs.b + h * qs.h + i * qs.row; }
  const T* K(int64_t b, int64_t hk, int64_t j) const { return k + b * ks.b + hk * ks.h + j * ks.row; }
  const T* V(int64_t b, int64_t hk, int64_t j) const { return v + b * vs.b + hk * vs.h + j * vs.row; }

  // Causal: row i attends keys j ≤ i + offset, so no key past the limit of a block's last row.
  int64_t key_end(int64_t i0, int64_t rows) const {
    return causal ? std::clamp<int64_t>(i0 + rows + causal_offset, 0, S) : S;
  }

  // scores (rows×cols, row stride ld) = scale · Q[i0..] K[j0..]ᵀ, before the cap, bias and masks.
  void products(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* scores, int64_t ld) const {
    gemm<T>(static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(d_k), scale, Q(b, h, i0),
            static_cast<int>(qs.row), false, K(b, h / group, j0), static_cast<int>(ks.row), true, T(0), scores,
            static_cast<int>(ld));
  }

  // One row of products → logits: cap (keeping tanh in `th` when given), bias, mask, causal limit.
  void finish_row(int64_t b, int64_t h, int64_t i, int64_t j0, int64_t cols, T* s, T* th) const {
    constexpr T inf = std::numeric_limits<T>::infinity();
    if (softcap > T(0)) {
      const T inv = T(1) / softcap;
      for (int64_t c = 0; c < cols; ++c) {
        const T t = std::tanh(s[c] * inv);
        if (th) th[c] = t;
        s[c] = softcap * t;
      }
    }
    if (bias) {
      const T* brow = bias + b * bs.b + h * bs.h + i * bs.row + j0 * bs.col;
      for (int64_t c = 0; c < cols; ++c) {
        const T add = brow[c * bs.col];
        s[c] = add == -inf ? lowest : s[c] + add;
      }
    }
    if (mask) {
      const bool* mrow = mask + b * ms.b + h * ms.h + i * ms.row + j0 * ms.col;
      if (ms.col == 1) {  // a mask row in one piece (a model's): its bytes compared as a vector, no branch
        const uint8_t* bytes = reinterpret_cast<const uint8_t*>(mrow);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) s[c] = bytes[c] != 0 ? s[c] : lowest;
      } else {
        for (int64_t c = 0; c < cols; ++c) s[c] = mrow[c * ms.col] ? s[c] : lowest;
      }
    }
    if (causal) {
      const int64_t allowed = std::clamp<int64_t>(i + causal_offset + 1 - j0, 0, cols);
      std::fill(s + allowed, s + cols, lowest);
    }
  }
};

// The monitor's head table, made with the figures (head_tally.h): each task tallies its rows as it
// writes their figures (the q row still in cache), the tallies merged per head in task order.
template <typename T>
struct TableRequest {
  const bool* counted;  // (B, L) rows the table counts (null: all), at strides c0, c1
  int64_t c0, c1;
  attnscale::Thresholds<T> thresholds;
  double* table;    // (kRowCount, H_q)
  T* counted_entropy;  // (B, H_q, L): each row's entropy as counted, NaN where not
};

template <typename T>
void run(const Logits<T>& in, bool logit_range, int64_t q_block, int64_t kv_block, at::Tensor& out,
         at::Tensor& lse, at::Tensor& entropy, at::Tensor& max_logit, at::Tensor& min_logit,
         at::Tensor* first_key, const TableRequest<T>* request) {
  const int64_t B = in.B, H_q = in.H_q, L = in.L, d_v = in.d_v;
  const int64_t qb = std::max<int64_t>(1, std::min(q_block, L));
  const int64_t kb = std::max<int64_t>(1, std::min(kv_block, in.S));
  const int64_t n_qblocks = (L + qb - 1) / qb;
  constexpr int64_t per_line = attnscale::kLanes<T>;  // numbers per cache line
  const int64_t ld = (kb + per_line - 1) / per_line * per_line;  // scores row stride: whole cache lines
  constexpr T lowest = Logits<T>::lowest;
  constexpr T nan = std::numeric_limits<T>::quiet_NaN();
  constexpr T inf = std::numeric_limits<T>::infinity();
  constexpr T under = kUnderflow<T>;

  T* op = out.data_ptr<T>();
  const Strides os = strides_of(out);
  T* lse_p = lse.data_ptr<T>();
  T* ent_p = entropy.data_ptr<T>();
  T* max_p = max_logit.data_ptr<T>();
  T* min_p = logit_range ? min_logit.data_ptr<T>() : nullptr;
  T* first_p = first_key ? first_key->data_ptr<T>() : nullptr;
  const int64_t tasks = B * H_q * n_qblocks;
  std::vector<attnscale::HeadTally<T>> tallies(request ? tasks : 0);
  std::vector<double> key_sums(request ? B * in.H_kv : 0, 0.0);  // Σ ‖k_j‖ per (batch, KV head)

  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    Scratch<T> scores_buffer(static_cast<size_t>(qb * ld));
    T* const scores = scores_buffer.get();
    std::vector<T> m(qb), l(qb), u(qb), lo(qb), s0(qb);  // s0: each row's logit on key 0 (lowest: not attended)
    std::vector<T> q_norm(request ? qb : 0);  // the block's ‖q_i‖, for its head table
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (H_q * n_qblocks);
      const int64_t h = (task / n_qblocks) % H_q;
      const int64_t i0 = (task % n_qblocks) * qb;
      const int64_t rows = std::min(qb, L - i0);
      const T* V = in.V(b, h / in.group, 0);
      T* O = op + b * os.b + h * os.h + i0 * os.row;
      for (int64_t r = 0; r < rows; ++r) std::fill(O + r * os.row, O + r * os.row + d_v, T(0));
      std::fill(m.begin(), m.end(), lowest);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(u.begin(), u.end(), T(0));
      std::fill(lo.begin(), lo.end(), inf);
      std::fill(s0.begin(), s0.end(), lowest);
      const int64_t j_end = in.key_end(i0, rows);
      for (int64_t j0 = 0; j0 < j_end; j0 += kb) {
        const int64_t cols = std::min(kb, j_end - j0);
        const int64_t padded = (cols + per_line - 1) / per_line * per_line;  // ≤ ld
        in.products(b, h, i0, rows, j0, cols, scores, ld);
        for (int64_t r = 0; r < rows; ++r) {
          T* s = scores + r * ld;
          in.finish_row(b, h, i0 + r, j0, cols, s, nullptr);
          if (j0 == 0) s0[r] = s[0];
          // The row's padding to whole lines holds `lowest` (weight 0, in no max or min), so that every
          // pass below runs over whole vectors: a scalar tail after the vector loop made gcc keep the
          // reductions on the stack, a narrow store then a wide load (at (8, 12, 20, 32), 20 keys, that
          // load alone took 6% of the kernel: perf, AMD EPYC, 2026-12-04). The same results.
          std::fill(s + cols, s + padded, lowest);
          // Plain selects, not std::max/min: their reference returns made gcc vectorise these reductions
          // with gathers, and this pass then cost a fifth of the whole kernel (measured).
          T mx = lowest;
          if (logit_range) {  // the min in the same pass as the max: one more compare and select per score
            T mn = lo[r];
#pragma omp simd reduction(max : mx) reduction(min : mn)
            for (int64_t c = 0; c < padded; ++c) {
              const T x = s[c];
              mx = x > mx ? x : mx;
              mn = (x != lowest && x < mn) ? x : mn;
            }
            lo[r] = mn;
          } else {
#pragma omp simd reduction(max : mx)
            for (int64_t c = 0; c < padded; ++c) mx = s[c] > mx ? s[c] : mx;
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
          // The sums in lanes (lanes.h), over whole lines of the row (its padding: weight 0).
          alignas(64) attnscale::Lanes<T> lane_l{}, lane_u{};
          for (int64_t c0 = 0; c0 < padded; c0 += per_line) {
#pragma omp simd
            for (int64_t w = 0; w < per_line; ++w) {
              const T d = s[c0 + w] - m_new;
              // Masked entries (lowest) and underflow weigh exactly 0. d is NaN for a NaN logit, or for
              // a +inf one (inf − inf: q·k overflowed): d < under is false, so the weight is NaN and the
              // row reads as broken downstream instead of as "nothing attended" (l = 0).
              const bool drop = d < under;
              const T dk = drop ? T(0) : d;
              const T e = drop ? T(0) : exp_nonpositive(d);
              s[c0 + w] = e;
              lane_l[w] += e;
              lane_u[w] += e * dk;
            }
          }
          const T sum = attnscale::tree_sum(lane_l), sum_d = attnscale::tree_sum(lane_u);
          if (l[r] != T(0)) {  // > 0, or NaN (a broken row stays NaN)
            const T delta = m_new - m[r];
            // exp_nonpositive is valid only down to `under`: a jump of the max beyond it (a later key
            // block with a logit ≥ 87 above the running max, in float32) weighs the old sums exactly 0.
            const T alpha = -delta >= under ? exp_nonpositive(-delta) : T(0);
            u[r] = alpha * (u[r] - delta * l[r]) + sum_d;
            l[r] = alpha * l[r] + sum;
            if (alpha != T(1)) {
              T* orow = O + r * os.row;
#pragma omp simd
              for (int64_t c = 0; c < d_v; ++c) orow[c] *= alpha;
            }
          } else {
            u[r] = sum_d;
            l[r] = sum;
          }
          m[r] = m_new;
        }
        gemm<T>(static_cast<int>(rows), static_cast<int>(d_v), static_cast<int>(cols), T(1), scores,
                static_cast<int>(ld), false, V + j0 * in.vs.row, static_cast<int>(in.vs.row), false, T(1), O,
                static_cast<int>(os.row));
      }
      const int64_t row0 = (b * H_q + h) * L + i0;
      for (int64_t r = 0; r < rows; ++r) {
        if (l[r] > T(0)) {
          const T inv = T(1) / l[r];
          T* orow = O + r * os.row;
#pragma omp simd
          for (int64_t c = 0; c < d_v; ++c) orow[c] *= inv;
          const T log_l = std::log(l[r]);
          lse_p[row0 + r] = m[r] + log_l;
          ent_p[row0 + r] = log_l - u[r] * inv;
          max_p[row0 + r] = m[r];
          if (min_p) min_p[row0 + r] = lo[r];
        } else if (l[r] != l[r]) {  // a NaN or +inf logit (q·k overflowed): no distribution, and say so
          T* orow = O + r * os.row;
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
      if (first_p) {
        // The weight on key 0, e^{s_i0 − lse_i}, from the logit the sums used: 0 where key 0 is not
        // attended (−inf, or underflow), NaN where the row has no distribution (lse −inf, NaN). In
        // one vectorised loop with the kernel's own exp: std::exp, a call per row, took 3% of the
        // kernel at (8, 12, 20, 32) (perf, Intel Xeon, 2026-12-04). s_i0 ≤ lse_i but for rounding:
        // the weight at most 1.
#pragma omp simd
        for (int64_t r = 0; r < rows; ++r) {
          const T x = (s0[r] == lowest ? -inf : s0[r]) - lse_p[row0 + r];
          const T w = exp_nonpositive(x < T(0) ? x : T(0));
          first_p[row0 + r] = x != x ? nan : x < under ? T(0) : w;
        }
      }
      if (request) {  // the block's rows tallied from their figures, just written, in a loop of their own
        attnscale::HeadTally<T> tally;
        const bool* counted = request->counted ? request->counted + b * request->c0 : nullptr;
        attnscale::row_norms(in.Q(b, h, i0), rows, in.d_k, in.qs.row, q_norm.data());
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = row0 + r;
          request->counted_entropy[i] =
              !counted || counted[(i0 + r) * request->c1]
                  ? tally.add(ent_p[i], max_p[i], min_p[i], lse_p[i], first_p[i], q_norm[r], request->thresholds)
                  : nan;
        }
        tallies[task] = tally;
      }
      // A KV head's keys, once per batch (once in all when broadcast over it): by its first query head's first task.
      if (request && h % in.group == 0 && i0 == 0 && (in.ks.b != 0 || b == 0))
        key_sums[b * in.H_kv + h / in.group] = attnscale::key_norm_sum(in.K(b, h / in.group, 0), in.S, in.ks.row, in.d_k, 1);
    }
  });
  if (!request) return;
  std::vector<attnscale::HeadTally<T>> heads(H_q);
  for (int64_t task = 0; task < tasks; ++task) heads[(task / n_qblocks) % H_q].merge(tallies[task]);
  for (int64_t h = 0; h < H_q; ++h) {
    double keys = 0;
    for (int64_t b = 0; b < B; ++b) keys += key_sums[b * in.H_kv + h / in.group];
    heads[h].write(request->table, h, H_q, keys);
  }
}

// The backward. dq (B, H_q, L, d_k), dk (B, H_kv, S, d_k), dv (B, H_kv, S, d_v) zero on entry,
// last dimension contiguous; dbias (B, H_q, L, S) contiguous (written in full) or null. out, dout: (B, H_q, L, d_v),
// last dimension contiguous; lse (B, H_q, L) contiguous.
template <typename T>
void run_backward(const Logits<T>& in, const at::Tensor& out, const at::Tensor& dout, const at::Tensor& lse,
                  int64_t q_block, int64_t kv_block, at::Tensor& dq, at::Tensor& dk, at::Tensor& dv,
                  at::Tensor* dbias) {
  const int64_t B = in.B, H_q = in.H_q, L = in.L, S = in.S, d_k = in.d_k, d_v = in.d_v;
  const int64_t qb = std::max<int64_t>(1, std::min(q_block, L));
  const int64_t kb = std::max<int64_t>(1, std::min(kv_block, S));
  constexpr int64_t per_line = attnscale::kLanes<T>;  // numbers per cache line
  const int64_t ld = (kb + per_line - 1) / per_line * per_line;
  constexpr T inf = std::numeric_limits<T>::infinity();
  constexpr T under = kUnderflow<T>;
  const bool capped = in.softcap > T(0);

  const T* op = out.const_data_ptr<T>();
  const Strides os = strides_of(out);
  const T* gp = dout.const_data_ptr<T>();
  const Strides gs = strides_of(dout);
  const T* lse_p = lse.const_data_ptr<T>();
  T* dq_p = dq.data_ptr<T>();
  T* dk_p = dk.data_ptr<T>();
  T* dv_p = dv.data_ptr<T>();
  const Strides dqs = strides_of(dq), dks = strides_of(dk), dvs = strides_of(dv);
  T* db_p = dbias ? dbias->data_ptr<T>() : nullptr;

  at::parallel_for(0, B * in.H_kv, 1, [&](int64_t begin, int64_t end) {
    Scratch<T> p_buffer(static_cast<size_t>(qb * ld)), dp_buffer(static_cast<size_t>(qb * ld));
    Scratch<T> th_buffer(capped ? static_cast<size_t>(qb * ld) : 1);
    T* const P = p_buffer.get();
    T* const dP = dp_buffer.get();
    T* const TH = capped ? th_buffer.get() : nullptr;
    std::vector<T> D(qb);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / in.H_kv, hk = task % in.H_kv;
      const T* K = in.K(b, hk, 0);
      const T* V = in.V(b, hk, 0);
      T* dK = dk_p + b * dks.b + hk * dks.h;
      T* dV = dv_p + b * dvs.b + hk * dvs.h;
      for (int64_t h = hk * in.group; h < (hk + 1) * in.group; ++h) {
        for (int64_t i0 = 0; i0 < L; i0 += qb) {
          const int64_t rows = std::min(qb, L - i0);
          const T* Q = in.Q(b, h, i0);
          const T* O = op + b * os.b + h * os.h + i0 * os.row;
          const T* dO = gp + b * gs.b + h * gs.h + i0 * gs.row;
          const T* lse_rows = lse_p + (b * H_q + h) * L + i0;
          T* dQ = dq_p + b * dqs.b + h * dqs.h + i0 * dqs.row;
          for (int64_t r = 0; r < rows; ++r) {
            T acc = 0;
            const T* o = O + r * os.row;
            const T* g = dO + r * gs.row;
#pragma omp simd reduction(+ : acc)
            for (int64_t c = 0; c < d_v; ++c) acc += g[c] * o[c];
            D[r] = acc;
          }
          const int64_t j_end = in.key_end(i0, rows);
          if (db_p) {  // keys past the causal limit of the whole block get no gradient: zero them here
            for (int64_t r = 0; r < rows; ++r) {
              T* drow = db_p + ((b * H_q + h) * L + i0 + r) * S;
              std::fill(drow + j_end, drow + S, T(0));
            }
          }
          for (int64_t j0 = 0; j0 < j_end; j0 += kb) {
            const int64_t cols = std::min(kb, j_end - j0);
            in.products(b, h, i0, rows, j0, cols, P, ld);
            for (int64_t r = 0; r < rows; ++r) {
              T* s = P + r * ld;
              in.finish_row(b, h, i0 + r, j0, cols, s, capped ? TH + r * ld : nullptr);
              const T m = lse_rows[r];
              if (m == -inf) {  // nothing attended: no probability, no gradient
                std::fill(s, s + cols, T(0));
                continue;
              }
#pragma omp simd
              for (int64_t c = 0; c < cols; ++c) {
                const T d = s[c] - m;  // ≤ 0 up to rounding: lse is at least the row's max
                s[c] = d < under ? T(0) : exp_nonpositive(d);  // NaN stays NaN, as in the forward
              }
            }
            // dV[j0..] += Pᵀ dO
            gemm<T>(static_cast<int>(cols), static_cast<int>(d_v), static_cast<int>(rows), T(1), P,
                    static_cast<int>(ld), true, dO, static_cast<int>(gs.row), false, T(1), dV + j0 * dvs.row,
                    static_cast<int>(dvs.row));
            // dP = dO V[j0..]ᵀ
            gemm<T>(static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(d_v), T(1), dO,
                    static_cast<int>(gs.row), false, V + j0 * in.vs.row, static_cast<int>(in.vs.row), true, T(0),
                    dP, static_cast<int>(ld));
            for (int64_t r = 0; r < rows; ++r) {
              const T* p = P + r * ld;
              T* ds = dP + r * ld;
              const T Dr = D[r];
#pragma omp simd
              for (int64_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - Dr);
              if (db_p) std::copy(ds, ds + cols, db_p + ((b * H_q + h) * L + i0 + r) * S + j0);
              if (capped) {
                const T* t = TH + r * ld;
#pragma omp simd
                for (int64_t c = 0; c < cols; ++c) ds[c] *= T(1) - t[c] * t[c];
              }
            }
            // dQ += scale · dZ K[j0..];  dK[j0..] += scale · dZᵀ Q
            gemm<T>(static_cast<int>(rows), static_cast<int>(d_k), static_cast<int>(cols), in.scale, dP,
                    static_cast<int>(ld), false, K + j0 * in.ks.row, static_cast<int>(in.ks.row), false, T(1), dQ,
                    static_cast<int>(dqs.row));
            gemm<T>(static_cast<int>(cols), static_cast<int>(d_k), static_cast<int>(rows), in.scale, dP,
                    static_cast<int>(ld), true, Q, static_cast<int>(in.qs.row), false, T(1), dK + j0 * dks.row,
                    static_cast<int>(dks.row));
          }
        }
      }
    }
  });
}

// Whether every number of x (4-D, any strides) is finite: Σ x·0 is 0 for finite numbers and NaN as
// soon as one is ±inf or NaN, a multiply-add per number that vectorises (−ffast-math is not on, so
// the compiler may not fold x·0 to 0). On one thread, on purpose: a scan of a few MiB takes well under
// a millisecond, while waking a second thread on a busy machine cost ~8 ms of CPU per parallel
// region (measured; torch's parallel aminmax, used before, paid that three times a call).
template <typename T>
bool all_finite_impl(const at::Tensor& x) {
  const int64_t n0 = x.size(0), n1 = x.size(1), n2 = x.size(2), n3 = x.size(3);
  const Strides st = strides_of(x);
  const T* base = x.const_data_ptr<T>();
  T acc = 0;
  for (int64_t t = 0; t < n0 * n1; ++t) {
    const T* plane = base + (t / n1) * st.b + (t % n1) * st.h;
    for (int64_t i = 0; i < n2; ++i) {
      const T* row = plane + i * st.row;
      if (st.col == 1) {
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < n3; ++c) acc += row[c] * T(0);
      } else {
        for (int64_t c = 0; c < n3; ++c) acc += row[c * st.col] * T(0);
      }
    }
    if (acc != acc) return false;
  }
  return true;
}

bool all_finite(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4, "all_finite: expected a 4-D tensor");
  if (x.numel() == 0) return true;
  if (x.scalar_type() == at::kFloat) return all_finite_impl<float>(x);
  TORCH_CHECK(x.scalar_type() == at::kDouble, "all_finite: dtype must be float32 or float64");
  return all_finite_impl<double>(x);
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be 4-D (B, H, N, d)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v must share one dtype");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "dtype must be float32 or float64, got ", q.scalar_type());
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1, "last dimension must be contiguous");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "H_kv must divide H_q");
  if (mask.has_value()) TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 4, "mask must be 4-D bool");
  if (bias.has_value())
    TORCH_CHECK(bias->scalar_type() == q.scalar_type() && bias->dim() == 4, "bias must be 4-D, q's dtype");
}

// Returns (out (B, H_q, L, d_v), laid out as q (new_like_layout), lse, entropy, max_logit, min_logit, first_key (each (B, H_q, L); min_logit
// empty unless logit_range, first_key (each row's weight on key 0) empty unless first_key)), in the
// inputs' dtype (float32 or float64); then, with head_table (which needs logit_range and first_key),
// the monitor's head table float64 (kRowCount, H_q) of the rows `counted` (bool (B, L), None: all)
// and each row's entropy as it counts (B, H_q, L), NaN where not (head_tally.h), else two empty
// tensors. log_saturated, log_half, float16_max: the table's thresholds (head_tally.h's Thresholds).
// backward_q_block, backward_kv_block: the backward's tile (read by the autograd below, not here).
// build: this build's digest (ext/__init__.py), read by nothing: torch.compile's caches key a graph
// on its ops' arguments, never on a C++ op's code, so a graph compiled against another build (whose
// outputs may be laid out otherwise: Inductor asserts each output's strides) is never reused.
using Figures = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor>;

Figures health_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias, bool causal,
                         int64_t causal_offset, double scale, double softcap, bool logit_range, bool first_key,
                         bool head_table, const std::optional<at::Tensor>& counted, double log_saturated,
                         double log_half, double float16_max, int64_t q_block, int64_t kv_block,
                         int64_t /*backward_q_block*/, int64_t /*backward_kv_block*/, int64_t /*build*/) {
  check_inputs(q, k, v, mask, bias);
  TORCH_CHECK(!head_table || (logit_range && first_key), "head_table needs logit_range and first_key");
  if (counted.has_value())
    TORCH_CHECK(counted->scalar_type() == at::kBool && counted->dim() == 2 && counted->size(0) == q.size(0) &&
                    counted->size(1) == q.size(2),
                "counted must be bool (B, L)");
  const auto B = q.size(0), H_q = q.size(1), L = q.size(2);
  auto opts = q.options();
  at::Tensor out = new_like_layout(q, {B, H_q, L, v.size(3)}, false);
  at::Tensor lse = at::empty({B, H_q, L}, opts);
  at::Tensor entropy = at::empty({B, H_q, L}, opts);
  at::Tensor max_logit = at::empty({B, H_q, L}, opts);
  at::Tensor min_logit = logit_range ? at::empty({B, H_q, L}, opts) : at::empty({0}, opts);
  at::Tensor first = first_key ? at::empty({B, H_q, L}, opts) : at::empty({0}, opts);
  at::Tensor table = head_table ? at::empty({attnscale::kRowCount, H_q}, opts.dtype(at::kDouble)) : at::empty({0}, opts);
  at::Tensor counted_entropy = head_table ? at::empty({B, H_q, L}, opts) : at::empty({0}, opts);
  at::Tensor* fp = first_key ? &first : nullptr;
  const at::Tensor* mp = mask.has_value() ? &mask.value() : nullptr;
  const at::Tensor* bp = bias.has_value() ? &bias.value() : nullptr;
  const bool* cp = counted.has_value() ? counted->const_data_ptr<bool>() : nullptr;
  const int64_t c0 = cp ? counted->stride(0) : 0, c1 = cp ? counted->stride(1) : 0;
  const auto go = [&](auto zero) {
    using T = decltype(zero);
    const TableRequest<T> request{cp, c0, c1, {log_saturated, log_half, float16_max},
                                  head_table ? table.data_ptr<double>() : nullptr,
                                  head_table ? counted_entropy.data_ptr<T>() : nullptr};
    run<T>(Logits<T>(q, k, v, mp, bp, causal, causal_offset, scale, softcap), logit_range, q_block, kv_block, out,
           lse, entropy, max_logit, min_logit, fp, head_table ? &request : nullptr);
  };
  if (q.scalar_type() == at::kFloat) {
    go(0.0f);
  } else {
    go(0.0);
  }
  return {out, lse, entropy, max_logit, min_logit, first, table, counted_entropy};
}

// Returns (dq, dk, dv, dbias): dq like q (B, H_q, L, d_k), dk and dv like k and v (B, H_kv, S, ·), in
// their layouts (new_like_layout); dbias (B, H_q, L, S) when bias_grad, else empty.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> health_attention_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& dout,
    const at::Tensor& lse, const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias,
    bool causal, int64_t causal_offset, double scale, double softcap, bool bias_grad, int64_t q_block,
    int64_t kv_block) {
  check_inputs(q, k, v, mask, bias);
  TORCH_CHECK(out.sizes() == dout.sizes() && out.dim() == 4 && out.size(3) == v.size(3) &&
                  out.size(2) == q.size(2) && out.size(1) == q.size(1) && out.size(0) == q.size(0),
              "out and dout must be (B, H_q, L, d_v)");
  TORCH_CHECK(out.scalar_type() == q.scalar_type() && dout.scalar_type() == q.scalar_type() &&
                  lse.scalar_type() == q.scalar_type(), "out, dout, lse must have q's dtype");
  TORCH_CHECK(out.stride(3) == 1 && dout.stride(3) == 1, "out, dout: last dimension must be contiguous");
  TORCH_CHECK(lse.is_contiguous() && lse.dim() == 3, "lse must be contiguous (B, H_q, L)");
  auto opts = q.options();
  at::Tensor dq = new_like_layout(q, q.sizes(), true);
  at::Tensor dk = new_like_layout(k, k.sizes(), true);
  at::Tensor dv = new_like_layout(v, v.sizes(), true);
  at::Tensor dbias = bias_grad ? at::empty({q.size(0), q.size(1), q.size(2), k.size(2)}, opts) : at::empty({0}, opts);
  const at::Tensor* mp = mask.has_value() ? &mask.value() : nullptr;
  const at::Tensor* bp = bias.has_value() ? &bias.value() : nullptr;
  at::Tensor* dbp = bias_grad ? &dbias : nullptr;
  if (q.scalar_type() == at::kFloat) {
    run_backward<float>(Logits<float>(q, k, v, mp, bp, causal, causal_offset, scale, softcap), out, dout, lse,
                        q_block, kv_block, dq, dk, dv, dbp);
  } else {
    run_backward<double>(Logits<double>(q, k, v, mp, bp, causal, causal_offset, scale, softcap), out, dout, lse,
                         q_block, kv_block, dq, dk, dv, dbp);
  }
  return {dq, dk, dv, dbias};
}

// The forward's autograd, in C++: registered from Python (torch.library.register_autograd) it cost
// ~90 µs of Python per call (measured, (16, 4, 64, 16)), a tenth of the call. Forward and backward
// reach the kernels through the dispatcher, so that a compiled graph's fake tensors find the ops'
// fake implementations. Saved: q, k, v, the output and lse (the probabilities are recomputed);
// the figures are not differentiable (diagnostics).
class Attention : public torch::autograd::Function<Attention> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const std::optional<at::Tensor>& mask,
                                                const std::optional<at::Tensor>& bias, bool causal, int64_t offset,
                                                double scale, double softcap, bool logit_range, bool first_key,
                                                bool head_table, const std::optional<at::Tensor>& counted,
                                                double log_saturated, double log_half, double float16_max,
                                                int64_t q_block, int64_t kv_block, int64_t backward_q_block,
                                                int64_t backward_kv_block, int64_t build) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnscale_health::attention", "")
                         .typed<Figures(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool,
                                        int64_t, double, double, bool, bool, bool, const std::optional<at::Tensor>&,
                                        double, double, double, int64_t, int64_t, int64_t, int64_t, int64_t)>();
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, lse, entropy, hi, lo, first, table, counted_entropy] =
        op.call(q, k, v, mask, bias, causal, offset, scale, softcap, logit_range, first_key, head_table, counted,
                log_saturated, log_half, float16_max, q_block, kv_block, backward_q_block, backward_kv_block, build);
    ctx->save_for_backward({q, k, v, out, lse, mask.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["bias_grad"] = bias.has_value() && bias->requires_grad();
    ctx->saved_data["q_block"] = backward_q_block;
    ctx->saved_data["kv_block"] = backward_kv_block;
    ctx->mark_non_differentiable({lse, entropy, hi, lo, first, table, counted_entropy});
    return {out, lse, entropy, hi, lo, first, table, counted_entropy};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("attnscale_health::attention_backward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                             const std::optional<at::Tensor>&, bool, int64_t, double, double, bool, int64_t,
                             int64_t)>();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    at::Tensor dout = grads[0].defined() ? grads[0] : at::zeros_like(out);
    if (dout.stride(3) != 1 || dout.stride(2) < std::max<int64_t>(1, dout.size(3)))
      dout = dout.contiguous();  // e.g. the all-stride-0 gradient of out.sum()
    const auto optional = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    const bool bias_grad = ctx->saved_data["bias_grad"].toBool();
    auto [dq, dk, dv, dbias] =
        op.call(q, k, v, out, dout, lse, optional(saved[5]), optional(saved[6]), ctx->saved_data["causal"].toBool(),
                ctx->saved_data["offset"].toInt(), ctx->saved_data["scale"].toDouble(),
                ctx->saved_data["softcap"].toDouble(), bias_grad, ctx->saved_data["q_block"].toInt(),
                ctx->saved_data["kv_block"].toInt());
    torch::autograd::variable_list grad_inputs(21);  // one per forward input: q, k, v, mask, bias, settings
    grad_inputs[0] = dq;
    grad_inputs[1] = dk;
    grad_inputs[2] = dv;
    if (bias_grad) grad_inputs[4] = dbias;
    return grad_inputs;
  }
};

Figures health_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias,
                                  bool causal, int64_t offset, double scale, double softcap, bool logit_range,
                                  bool first_key, bool head_table, const std::optional<at::Tensor>& counted,
                                  double log_saturated, double log_half, double float16_max, int64_t q_block,
                                  int64_t kv_block, int64_t backward_q_block, int64_t backward_kv_block,
                                  int64_t build) {
  auto r = Attention::apply(q, k, v, mask, bias, causal, offset, scale, softcap, logit_range, first_key, head_table,
                            counted, log_saturated, log_half, float16_max, q_block, kv_block, backward_q_block,
                            backward_kv_block, build);
  return {r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]};
}

}  // namespace

TORCH_LIBRARY(attnscale_health, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor? mask, Tensor? bias, bool causal, int causal_offset, "
        "float scale, float softcap, bool logit_range, bool first_key, bool head_table, Tensor? counted, "
        "float log_saturated, float log_half, float float16_max, int q_block, int kv_block, "
        "int backward_q_block, int backward_kv_block, int build) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, Tensor? mask, "
        "Tensor? bias, bool causal, int causal_offset, float scale, float softcap, bool bias_grad, int q_block, "
        "int kv_block) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("all_finite(Tensor x) -> bool");
  m.impl("attention", c10::DispatchKey::CPU, &health_attention);
  m.impl("attention", c10::DispatchKey::Autograd, &health_attention_autograd);
  m.impl("all_finite", c10::DispatchKey::CPU, &all_finite);
  m.impl("attention_backward", c10::DispatchKey::CPU, &health_attention_backward);
}
