"""Auto-checkers for the chapters' code exercises.

Each ``check_<name>(your_function)`` runs hidden cases against the package's
reference implementation and returns a short :class:`Verdict`. Display it (make
it the last line of a cell) to read it; it is truthy when every case passes.

This subpackage imports the rest of ``attnbook``; nothing imports it back.
"""

from attnbook.exercises._framework import Verdict
from attnbook.exercises.attention import (
    check_cross_attention,
    check_scaled_dot_product_attention,
    check_self_attention,
)
from attnbook.exercises.block import (
    check_feed_forward,
    check_gpt_num_parameters,
    check_pre_ln_block,
)
from attnbook.exercises.efficient import (
    check_kv_cache_bytes,
    check_online_softmax_update,
    check_sliding_window_mask,
)
from attnbook.exercises.interpret import check_attention_rollout, check_head_entropy
from attnbook.exercises.language_model import check_bpe_merge, check_rms_norm
from attnbook.exercises.lookup import check_hard_lookup, check_soft_lookup
from attnbook.exercises.masking import (
    check_causal_mask,
    check_masked_attention,
    check_masked_softmax,
    check_padding_mask,
)
from attnbook.exercises.multihead import (
    check_merge_heads,
    check_multi_head_attention,
    check_split_heads,
)
from attnbook.exercises.positional import check_apply_rope, check_sinusoidal_positional_encoding
from attnbook.exercises.scores import check_cosine_similarity, check_score_matrix
from attnbook.exercises.softmax import check_softmax, check_softmax_temperature
from attnbook.exercises.training import check_answer_loss, check_lr_schedule
from attnbook.exercises.translation import check_additive_step, check_beam_step

__all__ = [
    "Verdict",
    "check_additive_step",
    "check_answer_loss",
    "check_apply_rope",
    "check_attention_rollout",
    "check_beam_step",
    "check_bpe_merge",
    "check_causal_mask",
    "check_cosine_similarity",
    "check_cross_attention",
    "check_feed_forward",
    "check_gpt_num_parameters",
    "check_hard_lookup",
    "check_head_entropy",
    "check_kv_cache_bytes",
    "check_lr_schedule",
    "check_masked_attention",
    "check_masked_softmax",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_online_softmax_update",
    "check_padding_mask",
    "check_pre_ln_block",
    "check_rms_norm",
    "check_scaled_dot_product_attention",
    "check_score_matrix",
    "check_self_attention",
    "check_sinusoidal_positional_encoding",
    "check_sliding_window_mask",
    "check_soft_lookup",
    "check_softmax",
    "check_softmax_temperature",
    "check_split_heads",
]
