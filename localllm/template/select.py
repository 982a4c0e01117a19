"""Pick how a prompt is rendered: a model's TEMPLATE layer (Go or Jinja) or the GGUF's Jinja.

As in Ollama, a template stored with the model (a Modelfile ``TEMPLATE``, or
the ``template`` file of a pulled repo) wins over ``tokenizer.chat_template``
inside the GGUF.  The layer's syntax is detected, because people paste Hugging
Face Jinja templates into Modelfiles as often as Go ones: Jinja has ``{%``
statements or bare variable names, Go names fields with a leading dot.
With no template at all the model is a base model and gets the plain text
(``render_plain``).  ``think`` is Ollama's value (a bool or a level); each
renderer passes it the way its templates read it.  ``check_gguf_template`` is
how ``/api/create`` refuses a GGUF whose own template is hostile.
"""

from __future__ import annotations

import re

from localllm.api.wire import JSONObject

_JINJA_HINTS = re.compile(
    r"\{%|\{\{-?\s*(messages|message|bos_token|eos_token|add_generation_prompt|tools)\b"
)


def is_jinja(template: str) -> bool:
    """Whether ``template`` is Jinja (Hugging Face) rather than Go text/template."""
    return bool(_JINJA_HINTS.search(template))


def render_prompt(
    go_template: str | None,
    jinja_template: str | None,
    messages: list[JSONObject],
    *,
    tools: list[JSONObject] | None = None,
    think: bool | str | None = None,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    """The prompt for ``messages``.

    ``go_template`` is the model's template layer (despite the name it may be
    Jinja: its syntax decides), ``jinja_template`` the GGUF's chat template;
    with neither, the plain text.  A leading BOS is left to the caller
    (``strip_leading_bos``), which knows whether the tokenizer adds its own.
    A system message after the first turn is rendered in place where the
    template allows, else folded into a user turn (template/systemturns.py).
    """
    from localllm.template.chat import render_chat
    from localllm.template.levels import parse_think
    from localllm.template.systemturns import render_placed

    think = parse_think(think)
    if go_template and go_template.strip() and not is_jinja(go_template):
        from localllm.template.goprompt import render_go

        level = think if isinstance(think, str) else ""
        go = go_template
        return render_placed(
            lambda msgs: render_go(
                go,
                msgs,
                tools=tools,
                think=None if think is None else think is not False,
                think_level=level,
            ),
            messages,
        )
    jinja = go_template if go_template and go_template.strip() else jinja_template
    return render_placed(
        lambda msgs: render_chat(
            jinja, msgs, tools=tools, think=think, bos_token=bos_token, eos_token=eos_token
        ),
        messages,
    )


def check_gguf_template(template: str | None) -> None:
    """A 400 if a GGUF's own chat template is hostile: a sample chat rendered with it
    breaks a limit of the sandbox, or tries what the sandbox forbids.  A template that
    merely refuses the sample (``raise_exception``, a syntax it cannot parse) passes:
    such a model fails its chats with that message, as transformers would."""
    if not template or not template.strip():
        return
    from localllm.errors import InvalidRequest
    from localllm.template.chat import render_chat
    from localllm.template.jinja import TemplateError, TemplateLimitError

    try:
        render_chat(template, [{"role": "user", "content": "Hello"}])
    except TemplateLimitError as exc:
        raise InvalidRequest(
            f"the GGUF's chat template (tokenizer.chat_template) cannot be used: {exc.message}"
        ) from None
    except TemplateError:
        pass
