"""Tool calls and reasoning out of generated text, one small parser per output format.

The public contract: :func:`detect_format` reads a chat template and returns the
:class:`ChatFormat` it teaches; ``ChatFormat.parser(tools, think)`` gives a
streaming :class:`FormatParser` (``feed(text)`` then ``finish()``, each returning
:class:`Parsed` content, thinking and :class:`ToolCall` objects).  The formats live
in their own modules (``hermes``, ``xmlcall``, ``llama3``, ``mistral``,
``harmony``, ``muse``, ``deepseek``, ``glm``, ``kimi``, ``granite``, ``command_r``,
``functionary``, ``gemma4``, ``pythonic``, ``minimax``, and the tagged and JSON
shapes of ``shapes``) on the shared streaming machinery of ``stream``,
``thinking``, ``tagged`` and ``jsonlist``.  A template no dedicated format
claims gets a format derived from the template itself (``derive``, reading the
call's shape with ``callshape`` and the string helpers of ``diff``).  Reading
JSON, and where a value ends as it streams in, is ``jsonscan``'s.
"""

from localllm.toolcalls.base import FormatParser, Parsed, ToolCall
from localllm.toolcalls.detect import FORMATS, ChatFormat, detect_format, format_named

Family = str  # a format's name (one of FORMATS), as the request plan carries it

__all__ = [
    "FORMATS",
    "ChatFormat",
    "Family",
    "FormatParser",
    "Parsed",
    "ToolCall",
    "detect_format",
    "format_named",
]
