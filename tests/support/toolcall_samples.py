"""Raw model replies, one or two per output format, as llama.cpp's tests/test-chat.cpp writes them.

Shared by the parser unit tests (``tests/toolcalls``) and the end-to-end tests
(``tests/inference/test_formats.py``), whose script models answer with exactly
these texts.  The function names and arguments match ``helpers.TOOLS``.
"""

from __future__ import annotations

WEATHER_ARGS = {"location": "Paris", "unit": "celsius"}

HERMES_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", '
    '"unit": "celsius"}}\n</tool_call>'
)
THINK_ANSWER = "<think>plan</think>Answer."  # -> thinking "plan", content "Answer."

XML_CALL = (
    "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
    "</function>\n</tool_call>"
)

LLAMA3_JSON = '{"name": "get_weather", "parameters": {"location": "Paris", "unit": "celsius"}}'
LLAMA3_PYTHON_TAG = (
    '<|python_tag|>{"name": "a", "parameters": {"q": "x"}}; {"name": "b", "parameters": {}}'
)

# Content, then two calls in the name[ARGS] form.
MISTRAL_CALLS = (
    'Sure. [TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "unit": "celsius"}'
    "[TOOL_CALLS]noop[ARGS]{}"
)
MISTRAL_THINK = "[THINK]step 1\nstep 2[/THINK]Result"
MISTRAL_NEMO_CALL = (
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", '
    '"unit": "celsius"}, "id": "abc123XYZ"}]'
)

HARMONY_THOUGHT = "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
HARMONY_CALL = (
    HARMONY_THOUGHT + "<|start|>assistant<|channel|>commentary "
    'to=functions.special_function <|constrain|>json<|message|>{"arg1": 1}<|call|>'
)
HARMONY_FINAL = HARMONY_THOUGHT + "<|start|>assistant<|channel|>final<|message|>Hello, world!"

DEEPSEEK_R1_CALL = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
    '```json\n{"city": "Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
# After "<think>" opened by the prompt: reasoning, content, two calls.
DEEPSEEK_V31_CALLS = (
    "REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
    'get_time<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
    "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    '{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)

GLM_46_CALL = (
    "<think>I'm\nthinking</think>\n<tool_call>special_function\n"
    "<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"
)

KIMI_CALLS = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|>'
    "<|tool_call_begin|>functions.special_function:1<|tool_call_argument_begin|>"
    '{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>'
)

GRANITE_CALLS = (
    '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}, '
    '{"name": "get_time", "arguments": {"city": "Paris"}}]'
)
GRANITE_RESPONSE = "<think>I'm\nthinking</think><response>Hello, world!\nWhat's up?</response>"

COMMAND_R_ACTION = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": '
    '"special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>'
)
# Cohere2 MoE's prompt opens the thinking block.
COHERE2_TEXT = "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!<|END_TEXT|>"

FUNCTIONARY_CALLS = 'all\nLet me check.>>>get_time\n{"city": "Paris"}>>>python\nprint(1)'

SEED_OSS_CALL = (
    "<seed:think>I'm thinking</seed:think>\n<seed:tool_call>\n"
    "<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n"
    "</seed:tool_call>"
)

# -- issue 31: the families the pinned llama.cpp knows that had no parser of ours ------

GEMMA4_CALL = '<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>'
GEMMA4_THINK = "<|channel>thought\nI'm\nthinking<channel|>Hello, world!"

LFM2_CALLS = (
    '<|tool_call_start|>[special_function(arg1=1), get_time(city="Paris")]<|tool_call_end|>'
)

MINIMAX_M2_CALL = (
    '<minimax:tool_call>\n<invoke name="special_function">\n'
    '<parameter name="arg1">1</parameter>\n</invoke>\n</minimax:tool_call>'
)

NS = "]<]minimax[>["
MINIMAX_M3_CALL = (
    f'{NS}<tool_call>\n{NS}<invoke name="get_time">{NS}<city>Tokyo{NS}</city>'
    f"{NS}</invoke>\n{NS}</tool_call>"
)

NEMOTRON_V2_CALL = '<TOOLCALL>[{"name": "special_function", "arguments": {"arg1": 1}}]</TOOLCALL>'
APRIEL_CALL = '<tool_calls>[{"name": "special_function", "arguments": {"arg1": 1}}]</tool_calls>'
FUNCTIONARY_V31_CALL = '<function=special_function>{"arg1": 1}</function>'

_D = "｜DSML｜"
DSML_CALL = (
    f'<{_D}function_calls>\n<{_D}invoke name="get_time">\n'
    f'<{_D}parameter name="city" string="true">Tokyo</{_D}parameter>\n'
    f"</{_D}invoke>\n</{_D}function_calls>"
)
DSML_V4_CALL = DSML_CALL.replace("function_calls", "tool_calls")

KIMI_K3_CALL = (
    "<|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
    '<|open|>call tool="special_function" index="1"<|sep|>'
    '<|open|>argument key="arg1" type="number"<|sep|>1<|close|>argument<|sep|>'
    "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
)
KIMI_K3_ANSWER = (
    "I'm thinking<|close|>think<|sep|><|open|>response<|sep|>Hello, world!"
    "<|close|>response<|sep|><|close|>message<|sep|>"
)

MINICPM5_CALL = '<function name="python"><param name="code">print(\'hey\')</param></function>'

MUSE_CALL = (
    " to=special_function<|message|><atem:function_calls>\n"
    '<atem:invoke name="special_function">\n'
    '<atem:parameter name="arg1">1</atem:parameter>\n'
    "</atem:invoke>\n</atem:function_calls>"
)
MUSE_ANSWER = (
    " to=self<|message|>I'm\nthinking<|eom|><|start|>assistant to=user<|message|>"
    "Hello, world!<|eot|>"
)

# Families whose format is derived from their template (no dedicated parser).
APERTUS_CALL = '<|tools_prefix|>[{"special_function": {"arg1": 1}}]<|tools_suffix|>'
SOLAR_CALL = (
    "<|tool_calls|><|tool_call:begin|>a1b2c3d4e<|tool_call:name|>get_time"
    '<|tool_call:args|>{"city": "Paris"}<|tool_call:end|><|calls|>'
)
HY3_CALL = (
    "<tool_calls:opensource>\n<tool_call:opensource>get_time<tool_sep:opensource>\n"
    "<arg_key:opensource>city</arg_key:opensource>\n"
    "<arg_value:opensource>Paris</arg_value:opensource>\n"
    "</tool_call:opensource>\n</tool_calls:opensource>"
)
GIGACHAT3_CALL = (
    '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "special_function", '
    '"arguments": {"arg1": 1}}'
)
GIGACHAT31_CALL = '<|function_call|>{"name": "special_function", "arguments": {"arg1": 1}}'
MINIMAX_M1_CALL = (
    '<tool_calls>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
    '{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_calls>'
)
COMMAND_R_PLUS_CALL = (
    'Action:\n```json\n[{"tool_name": "special_function", "parameters": {"arg1": 1}}]\n```'
)
