"""The records of text and JSONL files: the documents of a text file (per data.text_documents: each non-empty
line, each paragraph of lines up to a blank one, or the whole file), one per JSON object of a JSONL file, under
the configured text field. A file ending in .gz is read through gzip.

A record that is not UTF-8, not JSON, not an object, lacks the text field or
holds no text there (null, a number, a list), or a text line with NUL bytes (a
binary file given as text), is bad. data.bad_records says what happens:
`error` (the default) stops before training with the file and line of the
first one; `skip` leaves them out and says how many and where. Nothing is
skipped silently.
"""

import gzip
import json

from pretrain.system.console import log
from pretrain.system.errors import UserError

POLICIES = ("error", "skip")


MODES = ("line", "paragraph", "file")
BOM = "\ufeff"  # The byte order mark that some editors put at a UTF-8 file's start: not text.


def is_jsonl(path: str) -> bool:
  return path.removesuffix(".gz").endswith((".jsonl", ".json"))


def open_bytes(path: str):
  """The file's lines as bytes, decompressed where it ends in .gz."""
  return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def documents(path: str, text_key: str, mode: str):
  """The documents of one file, its bad records left out (records.check has named or counted them)."""
  current = []
  with open_bytes(path) as f:
    for raw in f:
      text, problem = text_of(raw, is_jsonl(path), text_key)
      if is_jsonl(path) or mode == "line":
        if text is not None:
          yield text
      elif text is not None:
        current.append(text)
      elif mode == "paragraph" and current and not raw.strip():  # A blank line ends a paragraph.
        yield "\n".join(current)
        current = []
      elif mode == "file" and not problem and current:  # A whole file keeps its blank lines (code's, prose's).
        current.append(raw.decode("utf-8").rstrip("\r\n"))
  while current and not current[-1].strip():  # Blank lines at the file's end (at its start none are kept).
    current.pop()
  if current:
    yield "\n".join(current)


def text_of(raw: bytes, jsonl: bool, text_key: str) -> tuple[str | None, str]:
  """(the document, "") of one line, or (None, what is wrong with it); blank lines are (None, "")."""
  try:
    line = raw.decode("utf-8").removeprefix(BOM)
  except UnicodeDecodeError as e:
    return None, f"is not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})"
  if not line.strip():
    return None, ""
  if not jsonl:
    return (None, "holds NUL bytes: a binary file given as text") if "\0" in line else (line.rstrip("\r\n"), "")
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    return None, f"is not JSON ({e.msg} at column {e.colno})"
  if not isinstance(record, dict):
    return None, f"is a JSON {type(record).__name__}, not an object with a {text_key!r} field"
  if text_key not in record:
    return None, f"has no field {text_key!r} (it has {sorted(record)})"
  text = record[text_key]
  if not isinstance(text, str):
    kind = "null" if text is None else type(text).__name__
    return None, f"holds {kind} in {text_key!r}, not text"
  return (text, "") if text.strip() else (None, "")


def unreadable(path: str, error: Exception) -> UserError:
  """The line for a file that open_bytes could not read to its end."""
  if path.endswith(".gz") and not isinstance(error, PermissionError):
    return UserError(f"{path} cannot be read as gzip-compressed text ({error}); give a whole .gz file, or the text "
                     "uncompressed")
  return UserError(f"{path} cannot be read ({error}); check that the file exists and is readable")


def check(files: list[str], text_key: str, policy: str, mode: str = "line") -> list[int]:
  """Reads every record once: raises naming the first bad one, or (policy skip) logs how many will be left out.
  Returns the length in characters of each document (per `mode` for text files)."""
  if policy not in POLICIES:
    raise UserError(f"data.bad_records={policy!r} is unknown; use one of {', '.join(POLICIES)}")
  bad, empty, lengths = [], [], []
  for path in files:
    try:
      with open_bytes(path) as f:
        for number, raw in enumerate(f, 1):
          text, problem = text_of(raw, is_jsonl(path), text_key)
          if not problem:
            if text is None and is_jsonl(path) and raw.strip():  # A record of no text: not bad, not a document.
              empty.append(f"{path}:{number}")
            continue
          if policy == "error":
            raise UserError(f"{path}:{number}: the record {problem}; fix it, or set --config.data.bad_records=skip "
                            "to leave such records out")
          bad.append(f"{path}:{number}")
    except (OSError, EOFError) as e:  # gzip's: not gzip, or cut short.
      raise unreadable(path, e) from None
    lengths.extend(len(text) for text in documents(path, text_key, mode))
  if bad:
    log(f"data.bad_records=skip: leaving out {len(bad)} bad records: {', '.join(bad[:5])}"
        + (f" and {len(bad) - 5} more" if len(bad) > 5 else ""))
  if empty:
    log(f"Leaving out {len(empty)} records whose {text_key!r} is empty or white space: {', '.join(empty[:5])}"
        + (f" and {len(empty) - 5} more" if len(empty) > 5 else ""))
  return lengths
