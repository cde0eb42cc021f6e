"""Turn a stored upload into text sections.

- sandbox: `parse_in_sandbox`, the pipeline's entry point (a resource-limited child
  process running `python -m documents.parsing`, see __main__),
- dispatch: `parse_file`, the same parse in this process, with the parser that the kind
  registry (documents.kinds) names,
- sections: Section, ParsedDocument and the helpers every parser shares,
- archives: the zip-bomb guard (shared with upload validation),
- one module per format: pdf, docx, text, markdown, csv_format, html_format.

No Django anywhere in this package: the child process imports it without settings.
"""

from documents.parsing.dispatch import PARSERS, parse_file
from documents.parsing.sandbox import parse_in_sandbox
from documents.parsing.sections import ParsedDocument, Section

__all__ = ["PARSERS", "ParsedDocument", "Section", "parse_file", "parse_in_sandbox"]
