"""Raw model replies, one or two per output format, as llama.cpp's tests/test-chat.cpp writes them.

Shared by the parser unit tests (``tests/toolcalls``) and the end-to-end tests
(``tests/inference/test_formats.py``), whose script models answer with exactly
these texts.  The function names and arguments match ``helpers.TOOLS``.
"""

from __future__ import annotations

WEATHER_ARGS = {"location": "Paris", "unit": "celsius"}

HERMES_CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris", '
               '"unit": "celsius"}}\n</tool_call>')
THINK_ANSWER = "<think>plan</think>Answer."  # -> thinking "plan", content "Answer."

XML_CALL = ("<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
            "</function>\n</tool_call>")

LLAMA3_JSON = ('{"name": "get_weather", "parameters": {"location": "Paris", '
               '"unit": "celsius"}}')
LLAMA3_PYTHON_TAG = ('<|python_tag|>{"name": "a", "parameters": {"q": "x"}}; {"name": "b", '
                     '"parameters": {}}')

# Content, then two calls in the name[ARGS] form.
MISTRAL_CALLS = ('Sure. [TOOL_CALLS]get_weather[ARGS]{"location": "Paris", "unit": "celsius"}'
                 '[TOOL_CALLS]noop[ARGS]{}')
MISTRAL_THINK = "[THINK]step 1\nstep 2[/THINK]Result"
MISTRAL_NEMO_CALL = ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", '
                     '"unit": "celsius"}, "id": "abc123XYZ"}]')

HARMONY_THOUGHT = "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
HARMONY_CALL = (HARMONY_THOUGHT + "<|start|>assistant<|channel|>commentary "
                'to=functions.special_function <|constrain|>json<|message|>{"arg1": 1}<|call|>')
HARMONY_FINAL = HARMONY_THOUGHT + "<|start|>assistant<|channel|>final<|message|>Hello, world!"

DEEPSEEK_R1_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                    '```json\n{"city": "Tokyo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
# After "<think>" opened by the prompt: reasoning, content, two calls.
DEEPSEEK_V31_CALLS = ("REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                      'get_time<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
                      "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                      '{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')

GLM_46_CALL = ("<think>I'm\nthinking</think>\n<tool_call>special_function\n"
               "<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>")

KIMI_CALLS = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
              '<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|>'
              "<|tool_call_begin|>functions.special_function:1<|tool_call_argument_begin|>"
              '{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>')

GRANITE_CALLS = ('<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}, '
                 '{"name": "get_time", "arguments": {"city": "Paris"}}]')
GRANITE_RESPONSE = ("<think>I'm\nthinking</think><response>Hello, world!\nWhat's up?"
                    "</response>")

COMMAND_R_ACTION = ('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": '
                    '"special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>')
# Cohere2 MoE's prompt opens the thinking block.
COHERE2_TEXT = "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!<|END_TEXT|>"

FUNCTIONARY_CALLS = 'all\nLet me check.>>>get_time\n{"city": "Paris"}>>>python\nprint(1)'

SEED_OSS_CALL = ("<seed:think>I'm thinking</seed:think>\n<seed:tool_call>\n"
                 "<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n"
                 "</seed:tool_call>")
