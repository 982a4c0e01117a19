"""The shapes of Ollama's responses, as ``TypedDict``s: what the daemon sends and clients read.

Requests are pydantic models (``api/schemas*.py``) because the daemon must
check them; responses are built by the daemon itself, so they only need names
that mypy can check at both ends: the producers (``inference/generation.py``,
``inference/fold.py``, ``inference/ps.py``, ``models/service.py``,
``models/remote.py``) return these, and the consumers (the compat stream
classes, ``api/client.py`` and through it the CLI and ``tui/reply.py``,
``cli/chatstream.py``, ``loadtest/protocols.py``) take them.  They are plain
dicts at run time: this module imports nothing but ``typing``, so a client
that only lists models pays nothing for it.

Field names are Ollama's (``/api/chat``, ``/api/generate``, ``/api/tags``,
``/api/ps``, ``/api/show``, ``/api/pull``; ``/api/search`` is ours); a key
Ollama leaves out when empty is ``NotRequired``.  Keys that are ours, not
Ollama's, say so: clients ignore fields they do not know.  ``details`` is
built in one place, :func:`localllm.models.details.model_details`.
"""

from __future__ import annotations

# typing's own Mapping and Sequence: this module imports nothing but typing
# (tests/test_import_boundary.py), and they are only read by the type checker.
from typing import Literal, Mapping, NotRequired, Sequence, TypeAlias, TypedDict, final  # noqa: UP035

# Arbitrary JSON, where the data really is free-form: tool arguments, a JSON schema,
# a GGUF header's key/values, sampling options passed through.  The containers are
# read-only views so that a ``list[str]`` or a ``dict[str, int]`` is JSON too.
JSONValue: TypeAlias = (
    "bool | int | float | str | Sequence[JSONValue] | Mapping[str, JSONValue] | None"
)
JSONObject: TypeAlias = "dict[str, JSONValue]"

# -- generation: /api/chat and /api/generate ---------------------------------------------


class ToolCallFunction(TypedDict):
    index: NotRequired[int]  # the call's position in the reply
    name: str
    arguments: JSONObject  # an object, not a JSON string (unlike OpenAI's)


class ToolCall(TypedDict):
    """One entry of ``message.tool_calls``."""

    id: NotRequired[str]
    function: ToolCallFunction


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: NotRequired[list[int]]


class Logprob(TypedDict):
    """One generated token's log probability, with the ``top_logprobs`` alternatives."""

    token: str
    logprob: float
    bytes: NotRequired[list[int]]
    top_logprobs: NotRequired[list[TopLogprob]]


class Message(TypedDict):
    """The assistant's ``message`` in a ``/api/chat`` chunk (a delta while streaming)."""

    role: str
    content: str
    thinking: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]


class Metrics(TypedDict, total=False):
    """What the last chunk (``done: true``) adds: why it ended, and times in nanoseconds."""

    done_reason: str  # stop | length | load | unload
    total_duration: int
    load_duration: int
    prompt_eval_count: int
    prompt_cached_count: int  # ours: of prompt_eval_count, those reused from the prompt cache
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int
    draft_count: int  # ours: tokens a draft model proposed (speculation on)
    draft_accepted_count: int  # ours: how many of them were kept


@final
class ChatChunk(Metrics):
    """One ``/api/chat`` stream line, or the folded ``stream: false`` answer."""

    model: str
    created_at: str
    message: Message
    done: bool
    logprobs: NotRequired[list[Logprob]]
    stop_sequence: NotRequired[str]  # ours: the stop string that ended the reply


@final
class GenerateChunk(Metrics):
    """One ``/api/generate`` stream line, or the folded ``stream: false`` answer."""

    model: str
    created_at: str
    response: str
    thinking: NotRequired[str]
    done: bool
    logprobs: NotRequired[list[Logprob]]
    context: NotRequired[list[int]]  # the conversation's tokens (legacy; not in raw mode)
    stop_sequence: NotRequired[str]  # ours, as in ChatChunk


Chunk = ChatChunk | GenerateChunk


@final
class StreamError(TypedDict):
    """A failure after a stream began: one last line, under HTTP 200."""

    error: str


class EmbedResponse(TypedDict):
    """``/api/embed``'s answer: one L2-normalised vector per input."""

    model: str
    embeddings: list[tuple[float, ...]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


# -- rerank: /api/rerank, /v1/rerank (Jina/Cohere), /rerank (llama-server, TEI) -----------


class RerankDocument(TypedDict):
    text: str


class RerankResult(TypedDict):
    """One document's place: its index in the request and its score, highest first."""

    index: int
    relevance_score: float
    document: NotRequired[RerankDocument]  # with return_documents


class RerankUsage(TypedDict):
    prompt_tokens: int  # every query-document pair, as the model read it
    total_tokens: int


class RerankResponse(TypedDict):
    """``/v1/rerank``'s answer: Jina's and Cohere's shape, with llama-server's and vLLM's
    ``id``, ``object`` and ``usage``."""

    id: str
    object: str  # "list"
    model: str
    results: list[RerankResult]
    usage: RerankUsage


class RerankNative(TypedDict):
    """``/api/rerank``'s answer: the same results, Ollama's timings (as ``/api/embed``)."""

    model: str
    results: list[RerankResult]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class TeiRank(TypedDict):
    """One item of Text Embeddings Inference's answer (a body with ``texts``)."""

    index: int
    score: float
    text: NotRequired[str]  # with return_text


# -- models: /api/tags, /api/ps, /api/show ------------------------------------------------


class Details(TypedDict):
    """A model's ``details``.  ``parent_model`` and ``families`` are absent from the
    shorter form that describes a draft model or a Hub file (ours)."""

    parent_model: NotRequired[str]
    format: str
    family: str
    families: NotRequired[list[str] | None]
    parameter_size: str
    quantization_level: str


class TagsEntry(TypedDict):
    """One model of ``/api/tags``."""

    name: str
    model: str
    modified_at: str
    size: int
    digest: str  # sha256 hex of the manifest, without the ``sha256:`` prefix
    details: Details


class WouldMove(TypedDict):
    """Ours: where a reload would place a loaded model whose devices changed since it
    loaded (a plugin installed, a worker come up: ``scheduler/moves.py``)."""

    devices: dict[str, int]  # layers per GPU (RPC workers by endpoint); {}: the CPU alone
    reason: str  # the planner's


class PsEntry(TypedDict):
    """One loaded model of ``/api/ps``."""

    name: str
    model: str
    size: int  # bytes in RAM and VRAM
    size_vram: int
    digest: str
    details: Details
    expires_at: str
    context_length: int
    num_parallel: NotRequired[int]  # ours: requests served at once, each with context_length
    devices: NotRequired[dict[str, int]]  # ours: bytes per place (a GPU, "CPU", an RPC worker)
    would_move: NotRequired[WouldMove]  # ours: only when a reload would place it elsewhere


class Draft(TypedDict):
    """Ours: the draft model of ``/api/show`` (Modelfile ``DRAFT``)."""

    digest: str
    size: int
    details: Details


class ShowResponse(TypedDict):
    """``/api/show``'s answer."""

    modelfile: str
    parameters: str
    template: str
    system: str
    license: str
    details: Details
    model_info: JSONObject  # the GGUF header's key/values
    capabilities: list[str]
    modified_at: str
    projector_info: NotRequired[JSONObject]
    origin: NotRequired[JSONObject]  # ours: where a pulled model came from
    draft: NotRequired[Draft]
    fit: NotRequired[list[ContextFit]]  # ours: the verdicts ``fit_contexts`` asked for


class ContextFit(TypedDict):
    """Ours: whether the model would load with one context (``/api/show``'s
    ``fit_contexts``), planned on the daemon's machine as the scheduler would."""

    context: int
    fits: bool
    on_gpu: bool  # every layer on the GPUs, or the machine has none to use
    reason: str  # the planner's one line


# -- progress: /api/pull and /api/create ---------------------------------------------------


class Progress(TypedDict):
    """One progress line of a pull or a create."""

    status: str
    digest: NotRequired[str]
    total: NotRequired[int]
    completed: NotRequired[int]


class FitResult(TypedDict):
    """Ours: how a model would load on the daemon's machine (``scheduler/fit.py``'s
    ``Fit.to_json``): in a dry-run pull and in each quant of a search."""

    status: Literal["gpu", "partial", "cpu", "too_big", "unknown"]
    summary: str  # "all 29 layers on GPU", "22/29 layers on GPU", "CPU only", "too big"
    layers_on_gpu: int
    layers: int  # repeating layers + the output layer, as llama.cpp counts them
    memory: dict[str, int]  # device -> bytes ("CPU": RAM); empty when unknown or too big
    context: int  # the context the load would get
    max_context: int  # the largest that keeps as many layers on GPUs (0: none fits)
    reason: str  # the planner's one line


class FileSize(TypedDict):
    file: str
    size: int


class DryRun(TypedDict):
    """Ours: the last line of a dry-run pull (``"dry_run": true``): the files, the model
    and how it would load on the daemon's machine (``fit``: ``scheduler/fit.py``)."""

    status: Literal["success"]
    dry_run: Literal[True]
    model: str
    source: str
    files: list[FileSize]
    projector: FileSize | None
    size: int
    details: Details
    model_info: JSONObject
    context_length: int
    capabilities: list[str]
    fit: FitResult
    header_bytes: int


ProgressEvent = Progress | DryRun


# -- search: /api/search (ours) ------------------------------------------------------------


class SearchQuant(TypedDict):
    """One quant of a search result: ``hf.co/{repo}:{tag}`` pulls ``files``."""

    tag: str
    files: list[str]
    size: int
    fit: FitResult  # as DryRun's


class SearchModel(TypedDict):
    """One Hugging Face repo of ``/api/search``'s answer (docs/api.md)."""

    name: str  # hf.co/{repo}
    repo: str
    catalog: list[str]  # catalogue names that pull from this repo
    # The repos the Hub names as this one's base (its ``base_model:`` tags): whose
    # model this is, which ``pull`` of an unknown name weighs (cli/pullsearch.py)
    base_models: list[str]
    downloads: int
    likes: int
    updated: str
    capabilities: list[str]
    context_length: int | None
    quants: list[SearchQuant]
    error: str | None


class SearchResponse(TypedDict):
    models: list[SearchModel]


# -- tokens: /api/tokenize, /api/detokenize (Ollama style), llama-server's /tokenize,
# /detokenize, /apply-template, and the input_tokens counts ---------------------------


class TokenizeResponse(TypedDict):
    """``/api/tokenize``: the text's ids, as the model's tokenizer reads it."""

    model: str
    tokens: list[int]


class DetokenizeResponse(TypedDict):
    """``/api/detokenize``: the ids' text, control tokens written out."""

    model: str
    text: str


class ServerTokenizeResponse(TypedDict):
    """llama-server's ``/tokenize``."""

    tokens: list[int]


class ServerDetokenizeResponse(TypedDict):
    """llama-server's ``/detokenize``."""

    content: str


class ApplyTemplateResponse(TypedDict):
    """llama-server's ``/apply-template``: the prompt a chat request renders to."""

    prompt: str


class InputTokensResponse(TypedDict):
    """OpenAI's ``/v1/responses/input_tokens`` (and llama-server's Chat Completions one)."""

    object: Literal["response.input_tokens"]
    input_tokens: int
