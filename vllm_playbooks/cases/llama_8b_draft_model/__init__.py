"""The Llama-8B draft-model case: its grid only (``case.yaml``); its page computes with the shared analysis."""
