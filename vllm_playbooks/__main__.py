"""``python -m vllm_playbooks``: the ``vllm-playbooks`` command line."""

import sys

from vllm_playbooks.cli import main

sys.exit(main())
