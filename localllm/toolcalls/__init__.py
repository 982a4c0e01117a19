"""Tool calls and reasoning out of generated text, one small parser per output format.

The public contract: :func:`detect_format` reads a chat template and returns the
:class:`ChatFormat` it teaches; ``ChatFormat.parser(tools, think)`` gives a
streaming :class:`FormatParser` (``feed(text)`` then ``finish()``, each returning
:class:`Parsed` content, thinking and :class:`ToolCall` objects).  The formats live
in their own modules (``hermes``, ``xmlcall``, ``llama3``, ``mistral``,
``harmony``, ``deepseek``, ``glm``, ``kimi``, ``granite``, ``command_r``,
``functionary``) on the shared streaming machinery of ``stream`` and ``thinking``.
"""

from localllm.toolcalls.base import FormatParser, Parsed, ToolCall
from localllm.toolcalls.detect import FORMATS, ChatFormat, detect_format, format_named

Family = str  # a format's name (one of FORMATS), as the request plan carries it

__all__ = ["FORMATS", "ChatFormat", "Family", "FormatParser", "Parsed", "ToolCall",
           "detect_format", "format_named"]
