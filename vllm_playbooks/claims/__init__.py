"""Claims and verdicts: the vocabulary, the ledger and its registry of checks, published numbers."""
