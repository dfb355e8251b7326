"""``vllm-playbooks build-tokenizer``: rebuild the bundled tokenizer the load generator uses (for maintainers)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from vllm_playbooks.tokenizer.build import DEFAULT_VOCAB_SIZE, HERE, build_tokenizer, default_corpus


@dataclass(frozen=True)
class Args:
    """The corpus (empty: the default one), the output folder and the vocabulary size."""

    corpus: tuple[Path, ...] = ()
    out: Path = HERE
    vocab_size: int = DEFAULT_VOCAB_SIZE

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> None:
        """The corpus, the output folder and the vocabulary size."""
        parser.add_argument(
            "corpus", nargs="*", type=Path, help="text files (default: shared/research/*.md + ARCHITECTURE.md)"
        )
        parser.add_argument("--out", type=Path, default=HERE, help=f"output folder (default: {HERE})")
        parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)

    @classmethod
    def from_cli_args(cls, namespace: argparse.Namespace) -> Self:
        """The parsed arguments as typed values."""
        return cls(corpus=tuple(namespace.corpus), out=namespace.out, vocab_size=int(namespace.vocab_size))


def run(args: Args) -> int:
    """Rebuild the packaged tokenizer (defaults) or another one; exit 1 where the vocabulary came out smaller."""
    corpus = list(args.corpus) or default_corpus()
    size = build_tokenizer(corpus, args.out, args.vocab_size)
    print(f"vocab size {size} (asked {args.vocab_size}) from {len(corpus)} files -> {args.out}")
    for path in corpus:
        print(f"  {path}")
    return 0 if size == args.vocab_size else 1
