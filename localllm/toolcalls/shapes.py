"""The dedicated formats that are a tagged or JSON shape with their own markup.

Each is written out as llama.cpp's tests (``tests/test-chat.cpp``) show it:

- MiniMax-M2: ``<minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>
  </invoke></minimax:tool_call>``, reasoning in ``<think>``;
- DeepSeek V3.2 (and V4, whose block is ``tool_calls``): the same in DSML,
  ``<｜DSML｜function_calls><｜DSML｜invoke name="f"><｜DSML｜parameter name="k"
  string="true">v</｜DSML｜parameter>..``;
- Kimi K3: ``<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument
  key="k" type="string"<|sep|>v<|close|>argument<|sep|><|close|>call<|sep|>..``, the
  answer wrapped in ``<|open|>response<|sep|>`` .. ``<|close|>response<|sep|>``;
- MiniCPM5: ``<function name="f"><param name="k">v</param></function>``;
- Functionary v3.1: ``<function=f>{..}</function>``, or ``<|python_tag|>`` then code;
- Nemotron Nano v2: ``<TOOLCALL>[{"name": .., "arguments": ..}]</TOOLCALL>``;
- Apriel 1.5/1.6: ``<tool_calls>[..]</tool_calls>``, 1.6 reasoning until
  ``[BEGIN FINAL RESPONSE]``.
"""

from __future__ import annotations

from localllm.toolcalls.base import Attempt, RawCall, ToolSet
from localllm.toolcalls.jsonlist import JsonAfterMarker
from localllm.toolcalls.jsonscan import loads
from localllm.toolcalls.tagged import WILD, Shape, Tagged, invoke_shape

MINIMAX_M2 = invoke_shape("", "minimax:tool_call")
_DSML = "｜DSML｜"
DEEPSEEK_V3_2 = invoke_shape(_DSML, "function_calls", key_end=f'" string="{WILD}">')
DEEPSEEK_V4 = invoke_shape(_DSML, "tool_calls", key_end=f'" string="{WILD}">')

KIMI_K3_THINK = ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
KIMI_K3 = Shape(
    section_open="<|open|>tools<|sep|>",
    section_close="<|close|>tools<|sep|>",
    call_open='<|open|>call tool="',
    name_end=f'" index="{WILD}"<|sep|>',
    call_close="<|close|>call<|sep|>",
    json_args=False,
    param_open='<|open|>argument key="',
    key_end=f'" type="{WILD}"<|sep|>',
    param_close="<|close|>argument<|sep|>",
    extra_markers=(
        "<|open|>response<|sep|>",
        "<|close|>response<|sep|>",
        "<|close|>message<|sep|>",
        "<|open|>",
        "<|close|>",
        "<|sep|>",
    ),
)

MINICPM5 = Shape(
    call_open='<function name="',
    name_end='">',
    call_close="</function>",
    json_args=False,
    param_open='<param name="',
    key_end='">',
    param_close="</param>",
)

FUNCTIONARY_V3_1 = Shape(
    call_open="<function=",
    name_end=">",
    call_close="</function>",
    extra_markers=("<|python_tag|>",),
)
PYTHON_TAG = "<|python_tag|>"

APRIEL_THINK = ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]")


class FunctionaryV31(Tagged):
    """Functionary v3.1: tagged JSON calls, and ``<|python_tag|>`` with the code of a
    call to its built-in ``python`` tool (to the end of the reply)."""

    def __init__(self) -> None:
        super().__init__(FUNCTIONARY_V3_1)
        self.starts = (*self.starts, PYTHON_TAG)

    def parse(self, text: str, tools: ToolSet | None, final: bool) -> Attempt | None:
        if not text.startswith(PYTHON_TAG):
            return super().parse(text, tools, final)
        if not final:
            return None  # the code runs to the end of the reply
        code = text[len(PYTHON_TAG) :].strip()
        data = loads(code) if code[:1] in '{"' else None
        if isinstance(data, dict):
            return Attempt(len(text), [RawCall("python", data)])
        return Attempt(
            len(text), [RawCall("python", {"code": data if isinstance(data, str) else code})]
        )


def nemotron_v2() -> JsonAfterMarker:
    return JsonAfterMarker("<TOOLCALL>", "</TOOLCALL>")


def apriel() -> JsonAfterMarker:
    return JsonAfterMarker("<tool_calls>", "</tool_calls>", strip=("[END FINAL RESPONSE]",))
