"""Real checkpoints in the book's code: a Hugging Face GPT-2 or Llama copied into an ``attnbook.GPT``.

Introduced in chapter 11, "a language model on real text". The book's
:class:`~attnbook.model.GPT` is the same computation as these published
models; only the names and the layout of the weights differ, so loading one
is a table of copies and three conversions:

- **GPT-2** keeps its linear maps as ``Conv1D`` modules, whose weight is
  ``(in, out)`` (``x @ W``), the transpose of ``nn.Linear``'s ``(out, in)``;
  its queries, keys and values come from one fused ``c_attn`` map, which is
  the book's stacked ``in_proj`` (rows ``q_proj``, ``k_proj``, ``v_proj``)
  transposed. Its GELU is the tanh
  approximation (``gelu_new``: ``ffn="gelu_tanh"``).
- **Llama** in ``transformers`` rotates the queries and keys with RoPE pairing
  feature ``i`` with feature ``i + Dh/2`` of each head (``rotate_half``; the
  script that converted Meta's checkpoints permuted their query and key rows,
  since Meta's own code pairs adjacent features, as the book does). The book
  pairs ``2i`` with ``2i + 1`` (:func:`attnbook.apply_rope`). Both rotate pair ``i``
  by ``position * base^(-2i/Dh)``; so reordering the rows of each head of
  ``q_proj`` and ``k_proj`` as ``0, Dh/2, 1, Dh/2 + 1, ...`` makes the book's
  rotation see exactly Llama's pairs. Queries and keys are permuted alike, so
  their dot products (the scores) do not change; values are left alone.
- Llama's ``rope_theta`` is the book's ``rope_base``, its ``rms_norm_eps``
  the ``norm_eps`` of :class:`~attnbook.block.RMSNorm`; GPT-2's
  ``layer_norm_epsilon`` the ``norm_eps`` of its LayerNorms.

Settings that change the computation in ways the book's model does not
have (RoPE scaling, attention biases in Llama, GPT-2's per-layer attention
scaling, ...) raise ``ValueError`` naming the setting, instead of loading a
model that would compute something else. ``transformers`` is imported only
by :func:`from_pretrained`; :func:`from_hf` reads the model it is given.

Shape legend used in this module:
    ``D`` = ``d_model``, ``H`` heads, ``H_kv`` key/value heads, ``Dh`` head
    width, ``F`` feed-forward width, ``V`` vocabulary size, ``T_max`` context length.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from attnbook._validation import check_int
from attnbook.model import GPT, GPTConfig

__all__ = ["from_hf", "from_pretrained", "interleave_rope_rows"]

SUPPORTED = ("GPT2LMHeadModel", "LlamaForCausalLM")
"""The Hugging Face model classes :func:`from_hf` converts."""

GPT2_SIZES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
"""GPT-2's model ids on the Hugging Face Hub, small to XL (124M to 1.5B parameters)."""


def interleave_rope_rows(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reorder each head's rows of a query/key weight from half-split RoPE pairs to interleaved ones.

    The rotary code of ``transformers``' Llama rotates feature ``i`` of a head together with feature
    ``i + Dh/2``; :func:`attnbook.apply_rope` rotates ``2i`` with ``2i + 1``.
    Output row ``2i`` of each head is input row ``i``, row ``2i + 1`` is
    input row ``i + Dh/2``, so the book's pair ``i`` is Llama's pair ``i``.

    Args:
        weight: an ``nn.Linear`` weight ``(n_heads * Dh, D)`` (or a bias ``(n_heads * Dh,)``).
        n_heads: the heads its rows make (``H`` for queries, ``H_kv`` for keys).

    Returns:
        A new tensor of the same shape with every head's rows permuted.
    """
    if not isinstance(weight, torch.Tensor) or weight.ndim not in (1, 2):
        raise ValueError(
            f"weight must be a tensor of shape (n_heads * Dh, D) or (n_heads * Dh,), got "
            f"{weight!r:.80}"
        )
    n_heads = check_int(n_heads, "n_heads")
    rows = weight.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(
            f"weight must have n_heads * Dh rows with Dh even, got {rows} rows for "
            f"n_heads = {n_heads}"
        )
    d_head = rows // n_heads
    order = torch.arange(d_head).view(2, d_head // 2).t().reshape(-1)  # 0, Dh/2, 1, Dh/2 + 1, ...
    per_head = weight.reshape(n_heads, d_head, *weight.shape[1:])  # (H, Dh, ...)
    return per_head[:, order].reshape(weight.shape).clone()


def _unsupported(field: str, value: object, needed: str) -> ValueError:
    return ValueError(f"{field} = {value!r} is not supported: attnbook.GPT needs {needed}")


def _rope_base(config: Any) -> float:
    """Llama's ``rope_theta``, refusing any RoPE scaling (transformers 4 and 5 spell it apart)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    params = dict(params or {})
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    theta = params.pop("rope_theta", getattr(config, "rope_theta", 10000.0))
    if rope_type != "default" or params:
        raise _unsupported("rope_scaling", {"rope_type": rope_type, **params}, "plain RoPE")
    return float(theta)


def _gpt2_config(config: Any) -> GPTConfig:
    activations = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
    if config.activation_function not in activations:
        raise _unsupported(
            "activation_function", config.activation_function, f"one of {tuple(activations)}"
        )
    checks = (
        ("scale_attn_weights", True, "scores divided by sqrt(d_head)"),
        ("scale_attn_by_inverse_layer_idx", False, "the same score scale in every layer"),
        ("reorder_and_upcast_attn", False, "attention computed in the model's dtype"),
        ("add_cross_attention", False, "a decoder-only model"),
    )
    for field, needed, why in checks:
        if bool(getattr(config, field, needed)) != needed:
            raise _unsupported(field, getattr(config, field), f"{field} = {needed} ({why})")
    return GPTConfig.gpt2(
        config.vocab_size,
        config.n_positions,
        config.n_embd,
        config.n_head,
        config.n_layer,
        d_ff=config.n_inner,  # None -> 4 * d_model, as GPT-2
        ffn=activations[config.activation_function],
        norm_eps=float(config.layer_norm_epsilon),
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
    )


def _llama_config(config: Any) -> GPTConfig:
    d_model, n_heads = config.hidden_size, config.num_attention_heads
    n_kv_heads = getattr(config, "num_key_value_heads", None) or n_heads
    head_dim = getattr(config, "head_dim", None) or d_model // n_heads
    checks = (
        ("hidden_act", config.hidden_act, "silu", "SwiGLU's SiLU gate"),
        ("attention_bias", bool(getattr(config, "attention_bias", False)), False, "no biases"),
        ("mlp_bias", bool(getattr(config, "mlp_bias", False)), False, "no biases"),
        ("head_dim", head_dim, d_model // n_heads, "head_dim = hidden_size // num_heads"),
    )
    for field, value, needed, why in checks:
        if value != needed:
            raise _unsupported(field, value, f"{field} = {needed!r} ({why})")
    return GPTConfig.llama(
        config.vocab_size,
        config.max_position_embeddings,
        d_model,
        n_heads,
        config.num_hidden_layers,
        n_kv_heads=None if n_kv_heads == n_heads else n_kv_heads,
        d_ff=config.intermediate_size,
        norm_eps=float(config.rms_norm_eps),
        rope_base=_rope_base(config),
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
    )


def _gpt2_weights(hf: Any, config: GPTConfig) -> dict[str, torch.Tensor]:
    """GPT-2's weights under the book's names (``Conv1D`` weights transposed)."""
    t = hf.transformer
    state = {"tok_emb.weight": t.wte.weight, "pos_emb.weight": t.wpe.weight}
    for i, layer in enumerate(t.h):
        ours = f"blocks.{i}."
        copies = {
            "self_attn.in_proj": layer.attn.c_attn,  # Conv1D (D, 3D): q, k, v columns
            "self_attn.out_proj": layer.attn.c_proj,
            "ffn.linear1": layer.mlp.c_fc,  # Conv1D (D, F)
            "ffn.linear2": layer.mlp.c_proj,  # Conv1D (F, D)
        }
        for name, conv in copies.items():
            state[f"{ours}{name}.weight"] = conv.weight.t()  # (in, out) -> (out, in)
            state[f"{ours}{name}.bias"] = conv.bias
        for name, norm in (("norm1", layer.ln_1), ("norm2", layer.ln_2)):
            state[f"{ours}{name}.weight"], state[f"{ours}{name}.bias"] = norm.weight, norm.bias
    state["norm.weight"], state["norm.bias"] = t.ln_f.weight, t.ln_f.bias
    state["lm_head.weight"] = hf.lm_head.weight  # (V, D), the embedding itself if tied
    return state


def _llama_weights(hf: Any, config: GPTConfig) -> dict[str, torch.Tensor]:
    """Llama's weights under the book's names (query/key rows interleaved for the book's RoPE)."""
    m = hf.model
    n_kv_heads = config.n_kv_heads or config.n_heads
    state = {"tok_emb.weight": m.embed_tokens.weight}
    for i, layer in enumerate(m.layers):
        ours, attn, mlp = f"blocks.{i}.", layer.self_attn, layer.mlp
        state[f"{ours}self_attn.in_proj.weight"] = torch.cat(
            [
                interleave_rope_rows(attn.q_proj.weight, config.n_heads),  # (H Dh, D) reordered
                interleave_rope_rows(attn.k_proj.weight, n_kv_heads),  # (H_kv Dh, D)
                attn.v_proj.weight,  # (H_kv Dh, D), values are not rotated
            ]
        )  # (H Dh + 2 H_kv Dh, D): the stacked rows of q_proj, k_proj, v_proj
        state[f"{ours}self_attn.out_proj.weight"] = attn.o_proj.weight  # (D, D)
        state[f"{ours}norm1.weight"] = layer.input_layernorm.weight  # (D,)
        state[f"{ours}norm2.weight"] = layer.post_attention_layernorm.weight  # (D,)
        state[f"{ours}ffn.gate.weight"] = mlp.gate_proj.weight  # (F, D)
        state[f"{ours}ffn.up.weight"] = mlp.up_proj.weight  # (F, D)
        state[f"{ours}ffn.down.weight"] = mlp.down_proj.weight  # (D, F)
    state["norm.weight"] = m.norm.weight
    state["lm_head.weight"] = hf.lm_head.weight  # (V, D)
    return state


def from_hf(model: Any) -> GPT:
    """Build an :class:`~attnbook.GPT` equal to a Hugging Face GPT-2 or Llama model.

    Reads the model's config into a :class:`~attnbook.GPTConfig`
    (:meth:`~attnbook.GPTConfig.gpt2` or :meth:`~attnbook.GPTConfig.llama`
    with the model's sizes, eps, RoPE base, tying and key/value heads),
    builds the ``GPT`` and copies every weight (see the module docstring for
    the conversions). Dropout is 0: the copy is for inference (give a new
    config with ``dataclasses.replace`` to fine-tune with dropout).

    Args:
        model: a ``transformers`` ``GPT2LMHeadModel`` or ``LlamaForCausalLM``
            instance, any size, on any device, in any floating dtype.

    Returns:
        The ``GPT``, on ``model``'s device and in its dtype, in ``eval()`` mode;
        its logits equal ``model(idx).logits`` up to rounding.

    Raises:
        ValueError: naming ``model`` if it is of another class, or naming the
            config field whose setting the book's model does not have.
    """
    kind = type(model).__name__
    if kind not in SUPPORTED or not hasattr(model, "config"):
        raise ValueError(
            f"model must be a transformers model of class {' or '.join(SUPPORTED)}, got {kind}"
        )
    if kind == "GPT2LMHeadModel":
        config = _gpt2_config(model.config)
        weights = _gpt2_weights(model, config)
    else:
        config = _llama_config(model.config)
        weights = _llama_weights(model, config)
    reference = model.lm_head.weight
    ours = GPT(config)
    expected = dict(ours.state_dict())
    if config.tie_embeddings:
        del weights["lm_head.weight"], expected["lm_head.weight"]  # the same tensor as tok_emb
    if set(weights) != set(expected):  # a layout this module does not know
        raise ValueError(
            f"model's weights do not map onto GPT's: missing {sorted(set(expected) - set(weights))},"
            f" unexpected {sorted(set(weights) - set(expected))}"
        )
    with torch.no_grad():
        for name, tensor in weights.items():
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise ValueError(
                    f"model's weight for {name} has shape {tuple(tensor.shape)}, "
                    f"GPT needs {tuple(expected[name].shape)}"
                )
            expected[name].copy_(tensor.detach().to(torch.float32))
    return ours.to(device=reference.device, dtype=reference.dtype).eval()


def from_pretrained(name: str, **kwargs: Any) -> GPT:
    """Download a GPT-2 or Llama checkpoint with ``transformers`` and convert it with :func:`from_hf`.

    For readers online: ``GPT.from_pretrained("gpt2")`` fetches GPT-2 small
    (about 550 MB) into the Hugging Face cache on first use, then loads
    from there. Not run by the tests (they build small models offline).

    Args:
        name: a model id on the Hugging Face Hub or a local folder of one.
        **kwargs: passed to ``AutoModelForCausalLM.from_pretrained`` (e.g. ``revision``).

    Returns:
        The :class:`~attnbook.GPT`, in float32 unless ``kwargs`` choose a dtype, in ``eval()`` mode.

    Raises:
        ValueError: for a name that is no model id, a local folder that is not there, or
            a GPT-2 that is none of its sizes (:data:`GPT2_SIZES`; ``'gpt2-small'``), before
            anything is downloaded.
        OSError: where ``transformers`` cannot load the model (its error is the cause): no
            such model on the Hub, no network, or offline (``HF_HUB_OFFLINE=1``) without
            the model in the Hugging Face cache; it cannot tell these apart.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a model id such as 'gpt2', got {name!r}")
    local = os.path.isdir(os.path.expanduser(name))  # transformers reads a folder first
    looks_local = name.startswith(("/", "./", "../", "~"))  # a Hub id is "name" or "org/name"
    if looks_local and not local:
        raise ValueError(
            f"name {name!r} looks like a local folder, but there is no such folder; give a "
            "folder saved with save_pretrained, or a model id on the Hub such as 'gpt2'"
        )
    if not local and name not in GPT2_SIZES and name.startswith(("gpt2", "gpt-2")):
        raise ValueError(
            f"name {name!r} is none of GPT-2's sizes on the Hub: {_quoted(GPT2_SIZES)} "
            "(small, 124M parameters, to XL, 1.5B)"
        )
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as error:
        raise ImportError(
            "GPT.from_pretrained needs the transformers package: pip install transformers"
        ) from error
    try:
        model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    except OSError as error:
        raise OSError(_not_loaded(name, local)) from error
    return from_hf(model)


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(repr(n) for n in names)


def _not_loaded(name: str, local: bool) -> str:
    """What to tell a reader whose model transformers could not load (its error, the cause)."""
    if local:
        return (
            f"name {name!r} is a folder, but transformers could not load a model from it (its "
            "error is above): give a folder saved with save_pretrained (config.json and the "
            "weights)"
        )
    return (
        f"name {name!r}: transformers could not load this model (its error is above): the "
        "Hub may have no model of that id, or it could not be reached. The course loads "
        f"'gpt2' (GPT-2 small; its sizes: {_quoted(GPT2_SIZES)}); any GPT-2 or Llama model id "
        "on the Hub, or a folder saved with save_pretrained, loads too. Offline (no network, "
        "or HF_HUB_OFFLINE=1) the model must already be in the Hugging Face cache: load it "
        "once online"
    )
