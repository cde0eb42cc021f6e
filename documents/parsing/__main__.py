"""`python -m documents.parsing --child ...`: the sandboxed parse that parse_in_sandbox starts."""

import sys

from documents.parsing.sandbox import child_main

sys.exit(child_main(sys.argv[1:]))
