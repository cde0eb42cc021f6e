"""`make bench`: run the benchmarks and print their results (copied into docs/benchmarks.md).

`python -m bench NAME…` runs a subset.
"""
from __future__ import annotations

import importlib
import json
import sys

from bench.common import machine, setup_django

BENCHMARKS = ["billing_debits", "ingestion", "chat_ws", "search_scale", "retrieval_eval", "answer_eval", "connections",
              "rls_context", "ocr", "chat_open_loop", "ingestion_fairness", "chat_turn_cpu",
              "ingestion_claim_scale", "sweeper_topup", "relevance_floor", "fusion_weight",
              "sources_sync"]


def main(names: list[str]) -> int:
    setup_django()
    print(f"# machine: {machine()}")
    # Flags and what follows them (`answer_eval --rescore FILE`) are the benchmark's, read from sys.argv.
    flags = [i for i, n in enumerate(names) if n.startswith("--")]
    for name in names[:flags[0] if flags else None] or BENCHMARKS:
        module = importlib.import_module(f"bench.{name}")
        print(f"## {name}", flush=True)
        print(json.dumps(module.run(), indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
