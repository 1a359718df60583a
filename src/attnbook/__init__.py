"""attnbook: the companion package of *Attention, from scratch*.

Every chapter of the book imports what it needs from here. Importing the
package has no side effects: it plots nothing, trains nothing, downloads
nothing and seeds nothing.

Modules, named after the concept they hold (the chapter that introduces each
is in its docstring):

- :mod:`attnbook.runtime`: ``set_seed``, ``get_device``, ``set_print_options``
- :mod:`attnbook.scores`: dot products, cosine similarity, score matrices,
  additive (Bahdanau) scores
- :mod:`attnbook.softmax`: a numerically stable softmax and its derivative
- :mod:`attnbook.lookup`: attention as a soft dictionary lookup (hard vs soft)
- :mod:`attnbook.attention`: scaled dot-product attention, a single attention head
- :mod:`attnbook.masking`: causal, padding, sliding-window and strided masks
  (``True`` = may attend)
- :mod:`attnbook.positional`: sinusoidal encodings, rotary embeddings (RoPE), ALiBi biases
- :mod:`attnbook.multihead`: multi-head attention (``MultiHeadAttention``,
  ``split_heads``, ``merge_heads``, ``repeat_kv``)
- :mod:`attnbook.efficient`: attention that costs less: tiled (FlashAttention's
  online softmax) and low-rank (Linformer) attention
- :mod:`attnbook.block`: the transformer block (feed-forward networks: GELU and
  ``SwiGLU``; norms: LayerNorm and ``RMSNorm``; encoder and decoder blocks, pre-LN or post-LN)
- :mod:`attnbook.model`: the decoder-only model ``GPT`` (with GPT-2 and Llama presets)
- :mod:`attnbook.pretrained`: Hugging Face GPT-2 and Llama models copied into a ``GPT``
  (``GPT.from_hf``, ``GPT.from_pretrained``; imports ``transformers`` only when asked to download)
- :mod:`attnbook.generation`: ``KVCache``, sampling, prefill / decode / generate
- :mod:`attnbook.encoder_decoder`: ``EncoderDecoder``, the original architecture
  (greedy and beam-search ``generate``, ``attention_weights``)
- :mod:`attnbook.rnn`: GRU encoder-decoders without attention (the bottleneck) and
  with additive (Bahdanau) or dot-product (Luong) attention
- :mod:`attnbook.data`: generated training data: reverse, sort and associative-recall
  tasks with held-out splits; character-level text and the default grammar corpus;
  a translation task with true word alignments (``translation_task``)
- :mod:`attnbook.tokenizer`: byte-level byte-pair encoding (``BPETokenizer``: trained on
  a text, or GPT-2's own vocabulary loaded), chapter 11
- :mod:`attnbook.training`: the training loop (AdamW, warmup + cosine, evaluation);
  ``python -m attnbook train ...`` (:mod:`attnbook.__main__`, not imported here) runs it
  from the command line, also data-parallel under ``torchrun``
- :mod:`attnbook.checkpoint`: a trained GPT saved to a folder (safetensors + JSON config)
  and rebuilt from it
- :mod:`attnbook.interpret`: reading attention: bertviz's input, attention rollout,
  per-head statistics (entropy, weight on chosen keys, previous-token share)
- :mod:`attnbook.viz`: the course's figures (heatmaps, bar charts, training curves:
  ``plot_history``, also ``attnbook.plot_history``, imported on first use)
- :mod:`attnbook.interactive`: figures a reader plays with in the web page (a softmax
  temperature slider, a heatmap with hover values), with a static PNG for print; not
  imported here (it imports Plotly when a figure is drawn)
- :mod:`attnbook.exercises`: checkers for the chapters' code exercises;
  ``python -m attnbook.grade`` (:mod:`attnbook.exercises.grade`, not imported here) grades
  submitted notebooks with them
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from attnbook.attention import SingleHeadAttention, scaled_dot_product_attention
from attnbook.block import DecoderBlock, EncoderBlock, FeedForward, RMSNorm, SwiGLU
from attnbook.checkpoint import load_checkpoint, save_checkpoint
from attnbook.data import (
    CharTokenizer,
    SequenceTask,
    TextDataset,
    TranslationTask,
    associative_recall_task,
    grammar_corpus,
    load_text,
    reverse_task,
    sort_task,
    translation_task,
)
from attnbook.efficient import linformer_attention, tiled_attention
from attnbook.encoder_decoder import EncoderDecoder, EncoderDecoderConfig
from attnbook.generation import KVCache
from attnbook.interpret import (
    attention_rollout,
    attention_share,
    head_entropy,
    offset_share,
    to_bertviz,
)
from attnbook.lookup import hard_lookup, soft_lookup
from attnbook.masking import (
    apply_mask,
    causal_mask,
    combine_masks,
    mask_to_additive,
    masked_softmax,
    padding_mask,
    sliding_window_mask,
    strided_mask,
    to_mha_mask,
)
from attnbook.model import GPT, GPTConfig
from attnbook.multihead import MultiHeadAttention, merge_heads, repeat_kv, split_heads
from attnbook.positional import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_positional_encoding,
)
from attnbook.rnn import RNNConfig, RNNEncoderDecoder
from attnbook.runtime import get_device, set_print_options, set_seed
from attnbook.scores import (
    AdditiveScorer,
    additive_scores,
    cosine_similarity,
    dot_product,
    score_matrix,
)
from attnbook.softmax import log_softmax, softmax, softmax_jacobian
from attnbook.tokenizer import BPETokenizer
from attnbook.training import (
    History,
    TrainConfig,
    TrainingDiverged,
    exact_match,
    reverse_recipe,
    train,
)

try:
    __version__ = _version("attnbook")
except _PackageNotFoundError:  # run from a source tree (PYTHONPATH=src) without installing it
    __version__ = "0+unknown"


def __getattr__(name: str) -> object:
    """``attnbook.plot_history``, imported on first use: viz imports pyplot, which is slow."""
    if name == "plot_history":
        from attnbook.viz import plot_history

        return plot_history
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")


__all__ = [
    "GPT",
    "AdditiveScorer",
    "BPETokenizer",
    "CharTokenizer",
    "DecoderBlock",
    "EncoderBlock",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "FeedForward",
    "GPTConfig",
    "History",
    "KVCache",
    "MultiHeadAttention",
    "RMSNorm",
    "RNNConfig",
    "RNNEncoderDecoder",
    "SequenceTask",
    "SingleHeadAttention",
    "SwiGLU",
    "TextDataset",
    "TrainConfig",
    "TrainingDiverged",
    "TranslationTask",
    "additive_scores",
    "alibi_bias",
    "alibi_slopes",
    "apply_mask",
    "apply_rope",
    "associative_recall_task",
    "attention_rollout",
    "attention_share",
    "causal_mask",
    "combine_masks",
    "cosine_similarity",
    "dot_product",
    "exact_match",
    "get_device",
    "grammar_corpus",
    "hard_lookup",
    "head_entropy",
    "linformer_attention",
    "load_checkpoint",
    "load_text",
    "log_softmax",
    "mask_to_additive",
    "masked_softmax",
    "merge_heads",
    "offset_share",
    "padding_mask",
    "plot_history",
    "repeat_kv",
    "reverse_recipe",
    "reverse_task",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "score_matrix",
    "set_print_options",
    "set_seed",
    "sinusoidal_positional_encoding",
    "sliding_window_mask",
    "soft_lookup",
    "softmax",
    "softmax_jacobian",
    "sort_task",
    "split_heads",
    "strided_mask",
    "tiled_attention",
    "to_bertviz",
    "to_mha_mask",
    "train",
    "translation_task",
]
