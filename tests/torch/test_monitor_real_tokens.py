"""attnscale.torch.monitor's figures are of real tokens: padding keys and queries out of every figure,
each row's weight on its first real key, each key of a KV cache counted once, grouped-query heads
packed by transformers' decoding unpacked back into the model's heads. Each case against the same
prompts run alone (no padding, no cache), on tiny random-weight Llamas."""

import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

from attnscale.torch import Monitor  # noqa: E402
from attnscale.torch.monitor.records import pooled_figures  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

# Per head: what is compared with the prompts alone (counts exactly, means within rounding).
COUNTS = ("rows", "rows_single", "keys")
MEANS = ("entropy_mean", "max_logit", "first_key_weight", "q_norm_mean", "k_norm_mean")
LENGTHS = (9, 5, 7)


def llama(impl="sdpa", heads=6, kv_heads=2, seed=0):
    """A tiny random Llama: 2 layers, 6 query heads on 2 KV heads (groups of 3), head size 8."""
    torch.manual_seed(seed)
    config = llama_config(
        hidden_size=8 * heads,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        attn_implementation=impl,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


def prompts():
    return [torch.randint(3, 50, (n,), generator=torch.Generator().manual_seed(n)) for n in LENGTHS]


def padded(seqs, side):
    """The sequences as one batch padded on ``side``, with its attention_mask."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        where = slice(0, len(s)) if side == "right" else slice(width - len(s), None)
        ids[i, where], mask[i, where] = s, 1
    return {"input_ids": ids, "attention_mask": mask}


def alone(s):
    return {"input_ids": s[None], "attention_mask": torch.ones(1, len(s), dtype=torch.long)}


def summary(net, mode, run):
    """{(layer, head): HeadFigures} of ``run(net)`` under a monitor, and the model-wide pooled figures."""
    with Monitor(net, mode=mode) as mon, torch.no_grad():
        run(net)
    heads = mon.summary()
    return {(f.layer, f.head): f for f in heads}, pooled_figures(heads)


def assert_same_figures(got, want, what):
    """Head for head, the counts equal and the means within rounding; the pooled figures too."""
    (got, got_pooled), (want, want_pooled) = got, want
    assert got.keys() == want.keys(), what
    for key, f in got.items():
        w = want[key]
        assert [getattr(f, c) for c in COUNTS] == [getattr(w, c) for c in COUNTS], (what, key)
        for m in MEANS:
            assert getattr(f, m) == pytest.approx(getattr(w, m), rel=2e-5, abs=1e-6), (what, key, m)
        assert f.sink_head == w.sink_head, (what, key)
    assert got_pooled == pytest.approx(want_pooled, rel=2e-5, abs=1e-6), what


def forwards(batches):
    def run(net):
        for b in batches:
            net(**b)

    return run


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_padded_batches_give_the_figures_of_the_prompts_one_at_a_time(impl, mode):
    """Right and left padding: the padding keys are in no ‖k‖ figure, the first key a row weighs is
    its sequence's first real one (left padding puts a pad at position 0), so every figure, key
    counts and sink heads included, is the prompts' run one at a time."""
    net, seqs = llama(impl), prompts()
    one_by_one = summary(net, mode, forwards([alone(s) for s in seqs]))
    figures = one_by_one[0].values()
    assert {f.keys for f in figures} == {sum(LENGTHS)}  # the real keys, each once per KV head
    assert {f.rows + f.rows_single for f in figures} == {sum(LENGTHS)}
    for side in ("right", "left"):
        assert_same_figures(summary(net, mode, forwards([padded(seqs, side)])), one_by_one, side)


def generate(batch, new=4):
    def run(net):
        out = net.generate(**batch, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        run.tokens = out

    return run


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_generation_with_a_cache_counts_each_key_once(mode):
    """Prefill then decoding steps on a KV cache: each decoding call reads every cached key, but
    counts only its new one, so the figures are those of one forward over the whole sequence (the
    prompt and the tokens fed back: all but the last generated)."""
    net, s = llama(), prompts()[0]
    gen = generate(alone(s))
    cached = summary(net, mode, gen)
    whole = gen.tokens[:, :-1]
    one_forward = summary(net, mode, forwards([alone(whole[0])]))
    assert {f.keys for f in one_forward[0].values()} == {whole.shape[1]}
    assert_same_figures(cached, one_forward, "prefill + decode")


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_batched_decoding_of_a_grouped_query_model_gives_its_own_heads(mode):
    """Left-padded prompts generated in one batch: transformers' SDPA path packs the 6 query heads'
    single decoding rows into 2 KV heads × 3 rows (a mask is given); the figures are per the model's
    6 heads (no layer of pseudo-heads), and equal to each prompt generated alone (no mask: no packing)."""
    net, seqs = llama(), prompts()
    runs = [generate(alone(s)) for s in seqs]

    def each_alone(net):
        for run in runs:
            run(net)

    one_by_one = summary(net, mode, each_alone)
    batch = generate(padded(seqs, "left"))
    batched = summary(net, mode, batch)
    width = max(LENGTHS)
    for i, run in enumerate(runs):  # the same tokens came out
        assert torch.equal(batch.tokens[i, width - LENGTHS[i] :], run.tokens[0])
    layers = {layer for layer, _ in batched[0]}
    assert layers == {f"model.layers.{i}.self_attn" for i in range(2)}
    assert len(batched[0]) == 2 * 6
    assert_same_figures(batched, one_by_one, "batched decoding")


def bart():
    """A tiny random Bart: one encoder and one decoder layer of 2 heads, head size 8."""
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=50,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        attn_implementation="sdpa",
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,
    )
    return transformers.BartForConditionalGeneration(config).eval()


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_cross_attention_reads_the_encoders_keys_once_per_sequence(mode):
    """An encoder-decoder generating with a cache: the cross-attention's keys (the encoder's real
    states, padding out) are made at the first decoding call and read again from the cache at every
    later one, and count once, as in one forward of the decoder over the tokens it was fed; a
    padded batch of sources gives each source's figures."""
    net = bart()
    sources = [torch.randint(3, 50, (n,), generator=torch.Generator().manual_seed(n)) for n in (7, 4)]
    runs = [generate(alone(s)) for s in sources]

    def each_alone(net):
        for run in runs:
            run(net)

    one_by_one = summary(net, mode, each_alone)
    cross = {k: f for k, f in one_by_one[0].items() if "encoder_attn" in k[0]}
    assert {f.keys for f in cross.values()} == {7 + 4}  # each source's keys once, not once per step

    def one_forward(net):
        for s, run in zip(sources, runs):
            net(**alone(s), decoder_input_ids=run.tokens[:, :-1], use_cache=False)

    assert_same_figures(one_by_one, summary(net, mode, one_forward), "one forward")
    right = {"input_ids": torch.ones(2, 7, dtype=torch.long), "attention_mask": torch.zeros(2, 7, dtype=torch.long)}
    for i, s in enumerate(sources):
        right["input_ids"][i, : len(s)], right["attention_mask"][i, : len(s)] = s, 1
    assert_same_figures(summary(net, mode, generate(right)), one_by_one, "padded sources")


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_a_sliding_window_with_a_soft_cap_keeps_the_same_figures(mode):
    """A tiny Gemma 2 (eager: logits soft-capped at 5; every other layer a sliding window of 4 keys):
    padding right and left, generation on its cache (whose sliding layers drop the keys past the
    window, so that the call's key 0 is no longer the sequence's first) and a left-padded batch
    generated at once all give the figures of the same prompts alone."""
    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        attn_implementation="eager",
        sliding_window=4,
        attn_logit_softcapping=5.0,
        query_pre_attn_scalar=8,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    net, seqs = transformers.Gemma2ForCausalLM(config).eval(), prompts()
    one_by_one = summary(net, mode, forwards([alone(s) for s in seqs]))
    for side in ("right", "left"):
        assert_same_figures(summary(net, mode, forwards([padded(seqs, side)])), one_by_one, side)
    runs = [generate(alone(s)) for s in seqs]

    def each_alone(net):
        for run in runs:
            run(net)

    cached = summary(net, mode, each_alone)
    whole = forwards([alone(run.tokens[0, :-1]) for run in runs])
    assert_same_figures(cached, summary(net, mode, whole), "cache")
    assert_same_figures(summary(net, mode, generate(padded(seqs, "left"))), cached, "batched")
