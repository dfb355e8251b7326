"""Rebuild the packaged offline tokenizer: a byte-level BPE trained on text this project owns.

`vllm bench serve` needs a tokenizer directory even when the model is a config-only shape loaded with
``load_format=dummy``, and that tokenizer's vocabulary must not be larger than the model's ``vocab_size``
(the smallest shape here, ``tiny-llama``, has 32000). No tokenizer is downloaded: this script trains one
from local Markdown files and writes ``tokenizer.json``, ``tokenizer_config.json`` and
``special_tokens_map.json`` into this folder.

Run it in a throwaway environment that has the ``tokenizers`` package (the project's own environment does
not need it)::

    python -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python vllm_playbooks/tokenizer/build.py

The default corpus is ``shared/research/*.md`` plus ``shared/style/ARCHITECTURE.md``, looked up next to
the repository (``../shared``) or under ``$VLLM_PLAYBOOKS_SHARED_DIR``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

#: Special tokens, in id order: they take ids 0..3, before any learned token.
SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>", "<pad>")
UNK, BOS, EOS, PAD = SPECIAL_TOKENS

#: Vocabulary size the packaged tokenizer is built with (reached exactly on the default corpus).
DEFAULT_VOCAB_SIZE = 3072

#: Minimum pair frequency for a merge; 2 keeps one-off byte pairs out of the vocabulary.
MIN_FREQUENCY = 2

HERE = Path(__file__).resolve().parent


def default_corpus(shared_dir: Path | None = None) -> list[Path]:
    """The project-owned text the packaged tokenizer is trained on, sorted so the build is reproducible.

    ``shared_dir`` defaults to ``$VLLM_PLAYBOOKS_SHARED_DIR`` or ``<repo>/../shared``.
    """
    if shared_dir is None:
        env = os.environ.get("VLLM_PLAYBOOKS_SHARED_DIR")
        shared_dir = Path(env) if env else HERE.parents[2] / "shared"
    paths = sorted((shared_dir / "research").glob("*.md")) + [shared_dir / "style" / "ARCHITECTURE.md"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing or len(paths) < 2:
        raise FileNotFoundError(
            f"Corpus files not found under {shared_dir}: {missing or 'no research/*.md'}. "
            "Pass the files explicitly or set VLLM_PLAYBOOKS_SHARED_DIR."
        )
    return paths


def build_tokenizer(corpus_paths: Sequence[Path | str], out_dir: Path | str, vocab_size: int) -> int:
    """Train a byte-level BPE tokenizer on ``corpus_paths`` and save it in Hugging Face format in ``out_dir``.

    The vocabulary holds the 4 special tokens (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<pad>`` 3), the 256
    byte symbols, then learned merges up to ``vocab_size`` entries. Byte-level means every string
    round-trips, so any token id decodes to text that encodes again (what ``vllm bench serve --dataset-name
    random`` does with its random ids).

    Writes ``tokenizer.json``, ``tokenizer_config.json`` (``tokenizer_class`` PreTrainedTokenizerFast) and
    ``special_tokens_map.json``. Returns the real vocabulary size, which is smaller than ``vocab_size`` when
    the corpus runs out of pairs seen at least ``MIN_FREQUENCY`` times. Raises ``ValueError`` for a
    vocabulary too small to hold the byte alphabet.
    """
    # Imported here: the package itself never needs `tokenizers`, only this build does.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is below the 256 byte symbols + {len(SPECIAL_TOKENS)} specials")
    files = [str(Path(p)) for p in corpus_paths]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(files, trainer)
    tokenizer.save(str(out / "tokenizer.json"))

    real_size = tokenizer.get_vocab_size(with_added_tokens=True)
    special_map = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_map,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1_000_000,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", encoding="utf-8")
    return real_size
