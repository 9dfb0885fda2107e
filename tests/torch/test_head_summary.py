"""One call's figures summed per head: the kernel library's ``head_sums`` (C++) against the NumPy
reductions it replaces, row rule for row rule, on rows of every kind (empty, broken, single-key,
saturated, float16 overflow, padding), grouped-query and broadcast keys, strided q, both dtypes."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale.torch import head_summary as agg  # noqa: E402
from attnscale.torch.functional import FLOAT16_MAX, AttentionStats  # noqa: E402

pytestmark = pytest.mark.usefixtures("built_kernel")  # built at the first test, skipped where it cannot be


def figures(N, H, L, dtype, seed=0):
    """AttentionStats (N, H, L) with a row of each kind at fixed places, the rest random."""
    g = torch.Generator().manual_seed(seed)
    hi = torch.randn(N, H, L, generator=g, dtype=dtype) * 3
    lo = hi - torch.rand(N, H, L, generator=g, dtype=dtype) * 4
    lse = hi + torch.rand(N, H, L, generator=g, dtype=dtype) * 2
    ent = torch.rand(N, H, L, generator=g, dtype=dtype) * 2
    first = torch.rand(N, H, L, generator=g, dtype=dtype)
    nan, inf = math.nan, math.inf
    ent[0, 0, 0], hi[0, 0, 0], lo[0, 0, 0], lse[0, 0, 0], first[0, 0, 0] = nan, nan, nan, -inf, nan  # empty
    ent[0, 0, 1], hi[0, 0, 1], lse[0, 0, 1] = nan, inf, inf  # broken: an overflowed logit
    ent[0, -1, 2], lo[0, -1, 2], lse[0, -1, 2] = 0.0, hi[0, -1, 2], hi[0, -1, 2]  # single key
    lse[-1, 0, 3] = hi[-1, 0, 3] + 1e-4  # saturated: its largest weight is ~1
    hi[-1, -1, 4], lo[-1, 0, 5] = 7e4, -7e4  # beyond float16 both ways
    return AttentionStats(lse=lse, entropy=ent, max_logit=hi, min_logit=lo, backend="kernel", first_key_weight=first)


def both(stats, q, k, valid=None, population=None):
    cpp = agg.call_figures(stats, q, k, population, valid)
    q4, k4 = agg._by_head(q, k)
    if valid is not None:
        valid = valid.reshape(q4.shape[0], q4.shape[2])
    return cpp, agg.numpy_call_figures(stats, q4, k4, population, valid)


def assert_same(cpp, ref):
    (a, ea), (b, eb) = cpp, ref
    assert (a.calls, a.total, a.population, a.keys) == (b.calls, b.total, b.population, b.keys)
    for name in ("counts", "overflow", "max_logit", "mins"):  # counts and extremes: exact
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_allclose(a.entropy_sum, b.entropy_sum, rtol=1e-12)
    np.testing.assert_allclose(a.entropy_squares, b.entropy_squares, rtol=1e-12)
    np.testing.assert_allclose(a.sums[0], b.sums[0], rtol=1e-12)  # Σ weight on key 0
    # ‖q‖, ‖k‖: the C++ rounds each norm from float64, torch's float32 norm from float32 sums.
    np.testing.assert_allclose(a.sums[1:], b.sums[1:], rtol=1e-6)
    np.testing.assert_array_equal(np.isnan(ea), np.isnan(eb))
    np.testing.assert_array_equal(ea[~np.isnan(ea)], eb[~np.isnan(eb)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("H_kv", [4, 2, 1])
def test_head_sums_match_the_numpy_reductions_on_every_kind_of_row(dtype, H_kv):
    N, H, L, S, d = 3, 4, 9, 7, 5
    stats = figures(N, H, L, dtype)
    q = torch.randn(N, L, H, d, dtype=dtype).transpose(1, 2)  # strided, as a model hands it
    k = torch.randn(N, H_kv, S, d, dtype=dtype)
    cpp, ref = both(stats, q, k)
    assert_same(cpp, ref)
    run = cpp[0]
    # The rows placed in figures(), by kind: each lands where it should.
    assert run.counts[3].tolist() == [0, 0, 0, 1] and run.counts[1][0] == 1  # single key; empty
    assert run.counts[0][0] == 2 and math.isinf(run.max_logit[0])  # empty and broken; the +inf stays
    assert run.overflow.tolist() == [2, 0, 0, 1] and run.counts[2][0] >= 1  # the +inf logit overflows too
    counted = ~np.isnan(cpp[1])
    norms = torch.linalg.vector_norm(q.double(), dim=-1).numpy()
    np.testing.assert_allclose(run.sums[1], (norms * counted).sum(axis=(0, 2)), rtol=1e-6)
    keys = torch.linalg.vector_norm(k.double(), dim=-1).sum(dim=(0, 2)).numpy()
    np.testing.assert_allclose(run.sums[2], np.repeat(keys, H // H_kv), rtol=1e-6)
    assert (run.total, run.keys) == (N * L, N * S)


def test_head_sums_leave_padding_rows_out_as_numpy_does():
    N, H, L, S, d = 3, 2, 8, 8, 4
    stats = figures(N, H, L, torch.float32, seed=1)
    q, k = torch.randn(N, H, L, d), torch.randn(N, H, S, d)
    valid = torch.ones(N, L, dtype=torch.bool)
    valid[0, 5:], valid[2, :2] = False, False
    cpp, ref = both(stats, q, k, valid=valid, population=int(valid.sum()))
    assert_same(cpp, ref)
    assert cpp[0].total == int(valid.sum()) and np.isnan(cpp[1][0, :, 5:]).all()


def test_head_sums_take_inputs_without_a_head_axis_and_keys_broadcast_over_the_batch():
    stats = figures(1, 1, 12, torch.float32, seed=2)
    flat = AttentionStats(
        **{f: getattr(stats, f).reshape(3, 4) for f in ("lse", "entropy", "max_logit", "min_logit")},
        backend="kernel",
        first_key_weight=stats.first_key_weight.reshape(3, 4),
    )
    q, k = torch.randn(3, 4, 6), torch.randn(3, 5, 6)  # 3-D: one head of every row
    assert_same(*both(flat, q, k))
    stats = figures(2, 4, 6, torch.float32, seed=3)
    q, k = torch.randn(2, 4, 6, 3), torch.randn(4, 5, 3)  # k broadcast over the batch: its keys read once
    cpp, ref = both(stats, q, k)
    assert_same(cpp, ref)
    assert cpp[0].keys == 5


def test_figures_the_library_cannot_take_go_to_numpy(monkeypatch):
    """Half-precision q (figures float32) is NumPy's: the C++ is never asked."""
    stats = figures(2, 2, 6, torch.float32)
    q, k = torch.randn(2, 2, 6, 4).bfloat16(), torch.randn(2, 2, 6, 4).bfloat16()
    monkeypatch.setattr(agg, "numpy_call_figures", lambda *a, **kw: ("numpy", None))
    assert agg.call_figures(stats, q, k)[0] == "numpy"
    assert agg.call_figures(stats, q.float(), k.float())[0] != "numpy"


def test_no_entropies_unless_asked():
    stats = figures(2, 2, 6, torch.float32)
    run, ent = agg.call_figures(stats, torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4), entropies=False)
    assert ent is None and run.total == 12
    assert FLOAT16_MAX == 65504.0


def kernel_and_head_sums(q, k, v, causal=False, mask=None, counted=None):
    """The kernel's own head table of a call, and head_sums' (hence NumPy's, above) on the figures
    the same kernel returned: (Running, entropies) each."""
    from attnscale.torch.functional import attention_figures

    out, stats = attention_figures(
        q, k, v, mask=mask, causal=causal, logit_range=True, first_key=True,
        backend="kernel", head_table=True, counted=counted,
    )  # fmt: skip
    assert stats.head_table is not None and stats.head_table.dtype == torch.float64
    plain = AttentionStats(**{**vars(stats), "head_table": None, "counted_entropy": None})
    population = None if counted is None else int(counted.sum())
    return agg.call_figures(stats, q, k, population, counted), agg.call_figures(plain, q, k, population, counted)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("H_kv", [4, 1])
def test_the_kernels_head_table_is_head_sums_of_its_own_figures(dtype, H_kv):
    """Made as the rows are, in blocks of query rows merged per head (L = 70: three blocks of 32),
    with causal single-key rows, masked (empty) rows, padding rows left out, grouped-query heads and
    strided q: the counts, extremes and entropies exactly, the sums to rounding."""
    g = torch.Generator().manual_seed(5)
    B, H, L, d = 3, 4, 70, 8
    q = (torch.randn(B, L, H, d, generator=g, dtype=dtype) * 4).transpose(1, 2)  # a model's layout, large logits
    k = torch.randn(B, H_kv, L, d, generator=g, dtype=dtype)
    v = torch.randn(B, H_kv, L, d, generator=g, dtype=dtype)
    mask = torch.rand(B, 1, L, L, generator=g) > 0.2
    mask[1, :, 7] = False  # an empty row in every head
    counted = torch.ones(B, L, dtype=torch.bool)
    counted[0, 60:], counted[2, :3] = False, False  # right and left padding
    for causal, m, c in (("top_left", None, None), (False, mask, counted), ("top_left", mask, counted)):
        (kernel, ent), (ref, ref_ent) = kernel_and_head_sums(q, k, v, causal, m, c)
        assert_same((kernel, ent), (ref, ref_ent))
        assert kernel.total == (B * L if c is None else int(c.sum()))
    assert kernel.counts[1].min() >= 1 and kernel.counts[3].min() >= 1  # empty rows, single-key rows: seen
    assert np.isnan(ent[0, :, 60:]).all()


def test_the_kernels_head_table_reads_keys_broadcast_over_the_batch_once():
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 4, 6, 3, generator=g)
    k, v = torch.randn(4, 5, 3, generator=g), torch.randn(4, 5, 3, generator=g)  # no batch axis
    (kernel, ent), (ref, ref_ent) = kernel_and_head_sums(q, k, v)
    assert_same((kernel, ent), (ref, ref_ent))
    assert kernel.keys == 5


def test_a_head_table_needs_the_figures_it_sums_and_counted_rows_of_q():
    from attnscale.errors import InputError, InputTypeError
    from attnscale.torch.functional import attention_figures

    q = torch.randn(2, 3, 4, 5)
    with pytest.raises(InputError, match="head_table: .* logit_range=True and first_key=True"):
        attention_figures(q, q, q, logit_range=True, head_table=True)
    with pytest.raises(InputTypeError, match=r"counted: expected a bool tensor of shape \(2, 4\)"):
        attention_figures(q, q, q, logit_range=True, first_key=True, head_table=True, counted=torch.ones(2, 3) > 0)
    _, stats = attention_figures(q, q, q, logit_range=True, first_key=True, head_table=True, backend="chunked")
    assert stats.head_table is None and stats.counted_entropy is None  # the kernel's alone: the caller sums


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernels_norms_are_head_sums_norms_bit_for_bit(dtype):
    """The kernel makes ‖q_i‖ and ‖k_j‖ several rows at a time, head_sums one row at a time: the
    same additions either way (lanes.h), so each norm has the same bits. One query row per sequence
    (L = 1), so a head's Σ ‖q‖ adds the same norms in the same order in both; d on whole 64-byte
    lines of lanes and off them, rows more and fewer than a register's lanes."""
    q_row, k_row = agg.ROWS.index("q_norm_sum"), agg.ROWS.index("k_norm_sum")
    for d in (1, 7, 8, 16, 24, 32, 40, 64, 128):
        for S in (1, 5, 17, 40):
            g = torch.Generator().manual_seed(100 * d + S)
            q = (torch.randn(5, 1, 3, d, generator=g, dtype=dtype) * 3).transpose(1, 2)  # (5, 3, 1, d), strided
            k = torch.randn(5, 3, S, d, generator=g, dtype=dtype)
            (kernel, _), (ref, _) = kernel_and_head_sums(q, k, k)
            assert np.array_equal(kernel.table[[q_row, k_row]], ref.table[[q_row, k_row]]), (d, S)


def test_counted_rows_broadcast_with_q_over_the_keys_batch():
    """q (1, H, L, d) against keys of batch 3: q's counted rows (1, L) are every batch's, as q is."""
    from attnscale.torch.functional import attention_figures

    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 2, 5, 4, generator=g), torch.randn(3, 2, 5, 4, generator=g)
    counted = torch.tensor([[True, True, False, True, False]])
    figures = dict(logit_range=True, first_key=True, backend="kernel", head_table=True)
    _, broadcast = attention_figures(q, k, k, counted=counted, **figures)
    _, explicit = attention_figures(q.expand(3, -1, -1, -1), k, k, counted=counted.expand(3, -1), **figures)
    assert torch.equal(broadcast.head_table, explicit.head_table)
    assert broadcast.head_table[agg.ROWS.index("rows")].tolist() == [9.0, 9.0]  # 3 rows counted × 3 batches
