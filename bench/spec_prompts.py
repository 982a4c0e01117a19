"""The prompts bench/spec_bench.py sends: what speculation should speed up, and what not.

``COPY`` makes a base model copy a block it has seen (the case prompt lookup is
for), ``FREE`` gives it nothing to copy, ``COUNT`` offers matches that are
always wrong, ``STREAMS`` are four sampled requests' prompts, and ``AGREE`` ten
varied prompts for comparing tokens with and without speculation.
"""

from __future__ import annotations

CODE = '''def parse_line(line):
    """Split a CSV line into fields, honouring double quotes."""
    fields, current, quoted = [], [], False
    for ch in line:
        if ch == '"':
            quoted = not quoted
        elif ch == ',' and not quoted:
            fields.append(''.join(current))
            current = []
        else:
            current.append(ch)
    fields.append(''.join(current))
    return fields


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\\n")
            if not line or line.startswith("#"):
                continue
            rows.append((number, parse_line(line)))
    return rows
'''
COPY = CODE + "\n\n# The same module again, unchanged:\n\ndef parse_line(line):\n"
FREE = "Once upon a time, in a small fishing village on a windy northern coast, there lived"
# Continuations that never repeat a stretch but keep repeating ", ": drafts mostly wrong.
COUNT = "Counting in words: one, two, three, four, five, six, seven,"

STREAMS = [
    FREE,
    "The three most important things to know about volcanoes are",
    "Dear hiring manager, I am writing to apply for the position of",
    COPY,
]

QUOTE = (
    'The report said: "Revenue grew by 12 percent in the third quarter, driven by '
    'strong demand in Europe and a recovery in Asian markets, while costs stayed flat." '
    "Quote the report's sentence exactly, then explain it.\nQuote: \""
)
EDIT = (
    "Rename the variable total to subtotal in this function.\n\n"
    "def price(items):\n    total = 0\n    for item in items:\n"
    "        total += item.cost * item.count\n    return total\n\nAnswer:\n\n"
    "def price(items):\n"
)
AGREE = [
    "The quick brown fox jumps over the lazy",
    FREE,
    COUNT,
    COPY,
    QUOTE,
    EDIT,
    "Question: What is the capital of France?\nAnswer:",
    "A list of fruits:\n1. apple\n2. banana\n3.",
    "In 1969, the first humans landed on the Moon. The mission was called",
    "<b>Note:</b> the meeting moves to Tuesday. <b>Reminder:</b>",
]
