"""Which auto-checked exercises each chapter has: the grader's list of what to expect.

A submission is graded against this table, not against its own cells: an
exercise whose cell or ``check_*`` call a learner deleted is still expected,
and is reported ``missing`` (0 points) instead of silently vanishing. The
table is written from the chapters (each ``{exercise}`` block with its label
and the checker of the code cell after it); ``tests/exercises/test_grade_extract.py``
reads every chapter with :func:`attnbook.exercises.notebooks.exercises` and
fails when the two disagree, so it cannot drift from the book.

Only exercises with a checker are listed: pen-and-paper and open exercises
are not graded.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHAPTERS", "ChapterExercises", "chapter_for"]


@dataclass(frozen=True)
class ChapterExercises:
    """One chapter's auto-checked exercises."""

    stem: str  # the chapter's file name without suffix, e.g. "02_softmax"
    title: str  # its first "# " heading
    exercises: tuple[tuple[str, str], ...]  # (exercise name, its label), in reading order


CHAPTERS: tuple[ChapterExercises, ...] = (
    ChapterExercises(
        "01_scores",
        "Scores: measuring how well a query matches a key",
        (("score_matrix", "ex-ch01-score-matrix"), ("cosine_similarity", "ex-ch01-cosine")),
    ),
    ChapterExercises(
        "02_softmax",
        "Softmax: from scores to weights",
        (("softmax", "ex-ch02-stable-softmax"), ("softmax_temperature", "ex-ch02-temperature")),
    ),
    ChapterExercises(
        "03_soft_lookup",
        "Attention as a soft dictionary lookup",
        (("soft_lookup", "ex-ch03-soft-lookup"), ("hard_lookup", "ex-ch03-hard-lookup")),
    ),
    ChapterExercises(
        "04_scaled_dot_product_attention",
        "Scaled dot-product attention",
        (("scaled_dot_product_attention", "ex-ch04-sdpa"),),
    ),
    ChapterExercises(
        "05_qkv_projections",
        "Queries, keys and values as learned projections",
        (
            ("self_attention", "ex-ch05-self-attention"),
            ("cross_attention", "ex-ch05-cross-attention"),
        ),
    ),
    ChapterExercises(
        "06_masking",
        "Masking",
        (
            ("causal_mask", "ex-ch06-causal-mask"),
            ("padding_mask", "ex-ch06-padding-mask"),
            ("masked_attention", "ex-ch06-masked-attention"),
            ("masked_softmax", "ex-ch06-masked-softmax"),
        ),
    ),
    ChapterExercises(
        "07_multi_head_attention",
        "Multi-head attention",
        (
            ("split_heads", "ex-ch07-split-heads"),
            ("merge_heads", "ex-ch07-merge-heads"),
            ("multi_head_attention", "ex-ch07-mha"),
        ),
    ),
    ChapterExercises(
        "08_positional_encoding",
        "Positional encoding",
        (("sinusoidal_positional_encoding", "ex-ch08-sinusoidal"), ("apply_rope", "ex-ch08-rope")),
    ),
    ChapterExercises(
        "09_transformer_block",
        "The transformer block",
        (
            ("feed_forward", "ex-ch09-ffn"),
            ("pre_ln_block", "ex-ch09-pre-ln"),
            ("gpt_num_parameters", "ex-ch09-count"),
        ),
    ),
    ChapterExercises(
        "10_training",
        "Training a small transformer",
        (("lr_schedule", "ex-ch10-lr"), ("answer_loss", "ex-ch10-answer-loss")),
    ),
    ChapterExercises(
        "11_language_model",
        "A language model on real text",
        (("rms_norm", "ex-ch11-rmsnorm"), ("bpe_merge", "ex-ch11-bpe-merge")),
    ),
    ChapterExercises(
        "12_translation",
        "Translation: an encoder-decoder learns to align",
        (("additive_step", "ex-ch12-additive-step"), ("beam_step", "ex-ch12-beam-step")),
    ),
    ChapterExercises(
        "13_inside_attention",
        "Looking inside attention",
        (("head_entropy", "ex-ch13-entropy"), ("attention_rollout", "ex-ch13-rollout")),
    ),
    ChapterExercises(
        "14_efficient_attention",
        "Efficient attention, measured",
        (
            ("online_softmax_update", "ex-ch14-online-softmax"),
            ("sliding_window_mask", "ex-ch14-window"),
            ("kv_cache_bytes", "ex-ch14-kv-memory"),
        ),
    ),
)


def chapter_for(title: str, file_name: str, checked: set[str]) -> ChapterExercises | None:
    """The chapter a submission belongs to: by its title, else by its file name's ``NN_``
    prefix, else the chapter whose exercises it checks most (a renamed, retitled copy).

    Args:
        title: the notebook's first ``# `` heading ("" if none).
        file_name: the submitted file's name, e.g. ``"02_softmax.ipynb"``.
        checked: the exercise names its cells check.

    Returns:
        The chapter, or ``None`` when nothing points to one.
    """
    for chapter in CHAPTERS:
        if title and title == chapter.title:
            return chapter
    for chapter in CHAPTERS:
        if file_name.startswith(chapter.stem[:3]) and file_name[:2].isdigit():
            return chapter
    overlap = [(len(checked & {name for name, _ in c.exercises}), c) for c in CHAPTERS]
    best, chapter = max(overlap, key=lambda pair: pair[0])
    return chapter if best else None
