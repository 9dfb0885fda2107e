"""A table of bad inputs (as einops keeps one): each must raise ValueError or TypeError (attnscale's
InputError / InputTypeError, so the CLI can turn it into one line) whose message names the argument,
what it got (shape, dtype or value) and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

from attnscale import attention, attention_backward
from attnscale.errors import AttnScaleError, InputError, InputTypeError

# A valid problem: q (H=2, L=4, d_k=3), k (2, S=5, 3), v (2, 5, d_v=2).
Q, K, V = np.ones((2, 4, 3)), np.ones((2, 5, 3)), np.ones((2, 5, 2))


def with_value(a: np.ndarray, index, value) -> np.ndarray:
    a = a.copy()
    a[index] = value
    return a


# (id, call, error class, substrings the message must contain: the argument, what it got, what was expected)
BAD_INPUTS = [
    (
        "rank < 2",
        lambda: attention(np.ones(3), K, V),
        InputError,
        ["q:", "got shape (3,)", "expected at least 2 dimensions"],
    ),
    ("rank 0 key", lambda: attention(Q, np.float64(1.0), V), InputError, ["k:", "got shape ()", "expected"]),
    (
        "d_k mismatch q/k",
        lambda: attention(Q, np.ones((2, 5, 4)), V),
        InputError,
        ["k:", "(2, 5, 4)", "expected last dimension d_k = 3"],
    ),
    (
        "d_k = 0",
        lambda: attention(np.ones((4, 0)), np.ones((5, 0)), np.ones((5, 2))),
        InputError,
        ["q, k:", "(4, 0)", "expected d_k >= 1"],
    ),
    (
        "S = 0",
        lambda: attention(Q, np.ones((2, 0, 3)), np.ones((2, 0, 2))),
        InputError,
        ["k shape (2, 0, 3)", "expected", "S >= 1"],
    ),
    (
        "S mismatch k/v",
        lambda: attention(Q, K, np.ones((2, 6, 2))),
        InputError,
        ["v:", "got v shape (2, 6, 2)", "expected S = 5"],
    ),
    (
        "H_kv mismatch k/v",
        lambda: attention(Q, K, np.ones((1, 5, 2))),
        InputError,
        ["v:", "(1, 5, 2)", "expected H_kv = 2"],
    ),
    (
        "H_q not a multiple of H_kv",
        lambda: attention(np.ones((3, 4, 3)), K, V),
        InputError,
        ["k:", "H_kv = 2", "H_q = 3", "must divide"],
    ),
    (
        "leading dims do not broadcast",
        lambda: attention(np.ones((3, 2, 4, 3)), np.ones((2, 2, 5, 3)), np.ones((2, 2, 5, 2))),
        InputError,
        ["q, k, v:", "(3, 2, 4, 3)", "(2, 2, 5, 3)", "must broadcast"],
    ),
    (
        "mask not broadcastable",
        lambda: attention(Q, K, V, mask=np.ones((4, 6), dtype=bool)),
        InputError,
        ["mask:", "(4, 6)", "(2, 4, 5)"],
    ),
    (
        "mask of ints",
        lambda: attention(Q, K, V, mask=np.ones((4, 5), dtype=int)),
        InputTypeError,
        ["mask:", "int64", "expected a boolean"],
    ),
    (
        "mask of floats",
        lambda: attention(Q, K, V, mask=np.zeros((4, 5))),
        InputTypeError,
        ["mask:", "float64", "expected a boolean"],
    ),
    (
        "NaN in q",
        lambda: attention(with_value(Q, (0, 1, 2), np.nan), K, V),
        InputError,
        ["q:", "1 NaN", "expected finite", "check_finite=False"],
    ),
    (
        "Inf in k",
        lambda: attention(Q, with_value(K, (1, 0, 0), -np.inf), V),
        InputError,
        ["k:", "1 Inf", "expected finite"],
    ),
    ("NaN in v", lambda: attention(Q, K, with_value(V, 0, np.nan)), InputError, ["v:", "10 NaN", "expected finite"]),
    (
        "NaN in bias",
        lambda: attention(Q, K, V, bias=with_value(np.zeros((4, 5)), 0, np.nan)),
        InputError,
        ["bias:", "5 NaN", "expected finite values or -inf"],
    ),
    (
        "+Inf in bias",
        lambda: attention(Q, K, V, bias=with_value(np.zeros((4, 5)), (1, 1), np.inf)),
        InputError,
        ["bias:", "1 +Inf", "expected finite values or -inf"],
    ),
    (
        "bias not broadcastable",
        lambda: attention(Q, K, V, bias=np.zeros((3, 5))),
        InputError,
        ["bias:", "(3, 5)", "(2, 4, 5)"],
    ),
    (
        "bias of ints",
        lambda: attention(Q, K, V, bias=np.zeros((4, 5), dtype=int)),
        InputTypeError,
        ["bias:", "int64", "expected a float16, float32 or float64"],
    ),
    (
        "dropout_p = 1",
        lambda: attention(Q, K, V, dropout_p=1.0, seed=0),
        InputError,
        ["dropout_p:", "got 1.0", "expected a number in [0, 1)"],
    ),
    (
        "dropout_p < 0",
        lambda: attention(Q, K, V, dropout_p=-0.1, seed=0),
        InputError,
        ["dropout_p:", "got -0.1", "[0, 1)"],
    ),
    (
        "dropout_p NaN",
        lambda: attention(Q, K, V, dropout_p=float("nan"), seed=0),
        InputError,
        ["dropout_p:", "got nan", "[0, 1)"],
    ),
    (
        "dropout_p a string",
        lambda: attention(Q, K, V, dropout_p="0.1", seed=0),
        InputTypeError,
        ["dropout_p:", "str '0.1'", "expected a number"],
    ),
    ("dropout without seed", lambda: attention(Q, K, V, dropout_p=0.1), InputError, ["seed:", "got None", "required"]),
    (
        "seed a string",
        lambda: attention(Q, K, V, dropout_p=0.1, seed="a"),
        InputTypeError,
        ["seed:", "str 'a'", "expected None or an int"],
    ),
    (
        "seed negative",
        lambda: attention(Q, K, V, dropout_p=0.1, seed=-1),
        InputError,
        ["seed:", "got -1", "expected None or an int >= 0"],
    ),
    (
        "unknown scale rule",
        lambda: attention(Q, K, V, scale="sqrt2"),
        InputError,
        ["scale:", "'sqrt2'", "expected one of", "inverse_sqrt_dk"],
    ),
    ("scale NaN", lambda: attention(Q, K, V, scale=float("nan")), InputError, ["scale:", "nan", "expected a finite"]),
    ("scale a list", lambda: attention(Q, K, V, scale=[1.0]), InputTypeError, ["scale:", "list", "expected a number"]),
    ("scale a bool", lambda: attention(Q, K, V, scale=True), InputTypeError, ["scale:", "bool", "expected a number"]),
    (
        "integer q",
        lambda: attention(Q.astype(int), K, V),
        InputTypeError,
        ["q:", "int64", "expected a float16, float32 or float64"],
    ),
    ("integer v", lambda: attention(Q, K, V.astype(np.int32)), InputTypeError, ["v:", "int32", "expected a float"]),
    ("strings", lambda: attention(Q, K, [["a"]]), InputTypeError, ["v:", "<U1", "expected a float"]),
    ("complex k", lambda: attention(Q, K.astype(complex), V), InputTypeError, ["k:", "complex128", "expected a float"]),
    (
        "causal=True with L != S",
        lambda: attention(Q, K, V, causal=True),
        InputError,
        ["causal:", "L=4, S=5", "expected causal='top_left'", "'bottom_right'"],
    ),
    (
        "unknown causal",
        lambda: attention(Q, K, V, causal="diagonal"),
        InputError,
        ["causal:", "'diagonal'", "expected False, True, 'top_left' or 'bottom_right'"],
    ),
    (
        "dout shape",
        lambda: attention_backward(Q, K, V, np.ones((2, 4, 3))),
        InputError,
        ["dout:", "(2, 4, 3)", "expected the output's shape (2, 4, 2)"],
    ),
    (
        "dout integer",
        lambda: attention_backward(Q, K, V, np.ones((2, 4, 2), dtype=int)),
        InputTypeError,
        ["dout:", "int64", "expected a float"],
    ),
    (
        "backward checks its inputs too",
        lambda: attention_backward(Q, np.ones((2, 5, 4)), V, np.ones((2, 4, 2))),
        InputError,
        ["k:", "expected last dimension d_k = 3"],
    ),
]


@pytest.mark.parametrize("call, exc, words", [row[1:] for row in BAD_INPUTS], ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_raises_a_clear_error(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    err = info.value
    assert isinstance(err, AttnScaleError) and isinstance(err, (ValueError, TypeError))
    message = str(err)
    assert "\n" not in message, "one line, for the CLI"
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_builtin_exception_classes_catch_them():
    with pytest.raises(ValueError):
        attention(np.ones(3), K, V)
    with pytest.raises(TypeError):
        attention(Q.astype(int), K, V)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_check_finite_false_lets_nan_and_inf_through():
    """No scan, no refusal: NaN propagates to the rows it touches (never uninitialised memory or a
    silent 0), and other rows are unaffected."""
    q = with_value(Q, (0, 1, 2), np.nan)
    out = attention(q, K, V, check_finite=False)
    assert np.isnan(out[0, 1]).all() and np.isfinite(out[1]).all() and np.isfinite(out[0, 0]).all()
    bias = with_value(np.zeros((4, 5)), (2, 3), np.inf)
    out = attention(Q, K, V, bias=bias, check_finite=False)  # +inf logit: inf − inf in that row
    assert np.isnan(out[:, 2]).all() and np.isfinite(out[:, [0, 1, 3]]).all()
    g = attention_backward(Q, K, with_value(V, (0, 0, 0), np.inf), np.ones((2, 4, 2)), check_finite=False)
    assert np.isinf(g.dv).sum() == 0 and not np.isfinite(g.dq[0]).all()


def test_minus_inf_bias_is_legal_and_means_not_attended():
    bias = with_value(np.zeros((4, 5)), (slice(None), 0), -np.inf)
    v = np.arange(20.0).reshape(2, 5, 2)
    out = attention(Q, K, v, bias=bias)
    np.testing.assert_allclose(out, np.broadcast_to(v[:, 1:].mean(1, keepdims=True), out.shape), rtol=1e-14)


def test_finite_inputs_whose_logits_overflow_are_refused_not_nan():
    q = np.full((3, 4), 1e200)
    v = np.ones((3, 2))
    with pytest.raises(InputError, match=r"scale: the logits overflowed .* 3 row\(s\)"):
        attention(q, q, v, scale=1.0)
    with pytest.raises(InputError, match="overflowed"):
        attention_backward(q, q, v, np.ones((3, 2)), scale=1.0)
    assert np.isnan(attention(q, q, v, scale=1.0, check_finite=False)).all()  # the opt-out propagates


@pytest.mark.parametrize(
    "argv",
    [
        ["verify", "--quick", "--results", "{file}/sub"],
        ["report", "--quick", "--results", "{file}/sub"],
        ["train", "scale-vs-dk", "--quick", "--results", "{file}/sub"],
        ["train", "scale-vs-dk", "--quick", "--json", "{dir}/missing/x.json"],
    ],
)
def test_an_unusable_results_folder_or_json_target_is_one_line_and_exit_2_before_any_work(
    tmp_path, capsys, monkeypatch, argv
):
    import attnscale.claims
    from attnscale.cli import main

    monkeypatch.setattr(attnscale.claims, "run_claims", lambda *a, **k: pytest.fail("worked before checking"))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv = [a.format(file=blocker, dir=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("--results" in err or "--json" in err)
    assert not (tmp_path / "missing").exists()
