"""`make bench`: run the benchmarks and print their results (copied into docs/benchmarks.md).

`python -m bench NAME…` runs a subset.
"""

from __future__ import annotations

import importlib
import json
import sys

from bench.common import machine, setup_django

BENCHMARKS = [
    "billing_debits",
    "ingestion",
    "embedding_engines",
    "chat_while_indexing",
    "chat_ws",
    "search_scale",
    "retrieval_eval",
    "answer_eval",
    "connections",
    "rls_context",
    "ocr",
    "chat_open_loop",
    "ingestion_fairness",
    "chat_turn_cpu",
    "ingestion_claim_scale",
    "sweeper_topup",
    "relevance_floor",
    "fusion_weight",
    "sources_sync",
    "soak",
]


def main(names: list[str]) -> int:
    setup_django()
    print(f"# machine: {machine()}")
    # Flags and what follows them (`answer_eval --rescore FILE`) are the benchmark's, read from sys.argv.
    flags = [i for i, n in enumerate(names) if n.startswith("--")]
    failed = False
    for name in names[: flags[0] if flags else None] or BENCHMARKS:
        module = importlib.import_module(f"bench.{name}")
        print(f"## {name}", flush=True)
        result = module.run()
        print(json.dumps(result, indent=2), flush=True)
        # A benchmark that checks what it did (the soak's reconciliation) fails the run.
        failed = failed or (isinstance(result, dict) and result.get("result") == "reconciliation failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
