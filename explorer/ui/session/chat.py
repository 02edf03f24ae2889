"""``Conversation``: the conversation the window traces through the model's chat template (no widgets).

It holds the turns (``{"role", "content"[, "thinking"]}`` messages), the template's options
(``add_generation_prompt``, and what the template reads: ``enable_thinking``, ``reasoning_effort``, ...)
and the newest ``ChatEncoding`` (the rendered text, its ids, each token's turn, role and kind:
``explorer.core.chat``). Rendering runs the template in a sandboxed child process (~80 ms), so it runs
on a worker, newest wins; edits are debounced like the prompt's. Each encoding is traced through the
Session (``Session.trace_chat``: the ids pinned with their ``ChatSpans``), so the trace reaches the
presenter as a PROMPT source whose ``meta.chat`` carries the roles.

Signals (GUI thread)
--------------------
template_changed()
    A new model: ``template`` (None: it has none), ``problem`` (why it cannot be used) and ``option_names``.
changed()
    The turns or options were set from outside the editor (a kept reply, a session reopened).
encoded(ChatEncoding)
    The newest request rendered; its trace is asked for.
failed(str)
    It could not be rendered (one line; the raw prompt still works).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from explorer.core.chat.messages import ChatError, checked_messages
from explorer.ui.session import background
from explorer.ui.session.background import Failure, Newest

if TYPE_CHECKING:
    from explorer.core.chat.encode import ChatEncoding
    from explorer.core.chat.spans import ChatSpans
    from explorer.core.loaded import LoadedModel
    from explorer.ui.session.session import Session

NO_TEMPLATE = "This model has no chat template: write a raw prompt in the Prompt tab."
DEBOUNCE_MS = 250
STARTER = ({"role": "system", "content": "You are a helpful assistant. Answer briefly."},
           {"role": "user", "content": "What is the capital of France?"})
BROKEN_PREFIX = "Its chat template cannot be used"
# names a template reads from each message, not options the caller gives it
MESSAGE_FIELDS = frozenset({"content", "role", "thinking", "reasoning_content", "reasoning", "tool_calls", "name",
                            "add_generation_prompt"})


def _encode(loaded: LoadedModel, messages: list[dict[str, str]], add_generation_prompt: bool,
            options: dict[str, Any]) -> ChatEncoding:
    return loaded.encode_chat(messages, add_generation_prompt, **options)


def _template_options(template: Any) -> list[str]:
    return list(template.options())


def generated_kinds(encoding: ChatEncoding, tokenizer: Any, generated: Sequence[int]) -> list[str]:
    """Each generated token's kind (thinking, content, markup, a Harmony channel), read from the tokens' texts
    (``reply_kinds``); a control token (the end of the turn, say) is markup, as ``encode_chat`` counts it."""
    from explorer.core.chat.assistant import reply_kinds

    texts = [tokenizer.token_bytes(int(i)).decode("utf-8", errors="replace") for i in generated]
    control = getattr(tokenizer, "added_ids", frozenset()) | tokenizer.special_ids
    kinds = reply_kinds(texts, encoding.open_thinking)
    return ["markup" if int(i) in control else kind for i, kind in zip(generated, kinds)]


def reply_spans(encoding: ChatEncoding, tokenizer: Any, generated: Sequence[int]) -> ChatSpans:
    """The spans of the conversation's ids followed by ``generated`` ids of the assistant's reply."""
    return encoding.spans.extended(generated_kinds(encoding, tokenizer, generated))


class Conversation(QObject):
    """The Session's conversation (see the module docstring)."""

    template_changed = Signal()
    changed = Signal()
    encoded = Signal(object)
    failed = Signal(str)

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.session = session
        self.messages: list[dict[str, str]] = [dict(m) for m in STARTER]
        self.add_generation_prompt = True
        self.options: dict[str, Any] = {}
        self.template: Any = None
        self.problem: str | None = None
        self.option_names: list[str] = []
        self.encoding: ChatEncoding | None = None
        self.error: str | None = None
        self.active = False  # the conversation (not the raw prompt) is what the window traces
        self._requests = Newest()
        self._running = 0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self.encode)
        session.model_changed.connect(lambda result: self._model(result.model))
        session.trace_file_opened.connect(lambda _path: self._model(None))
        session.presenter.add_source(self)

    # --- what there is ---------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """Whether the model has a usable chat template."""
        return self.template is not None

    def status(self) -> str:
        """One line on the template: where it comes from, or why there is none."""
        if self.template is None:
            return self.problem or NO_TEMPLATE
        line = self.template.describe()
        return line[:1].upper() + line[1:]

    def is_idle(self) -> bool:
        return self._running == 0 and not self._timer.isActive()

    def end_ids(self) -> tuple[int, ...]:
        """The ids that end the assistant's turn for the model (``core.chat.assistant.end_of_turn_ids``)."""
        from explorer.core.chat.assistant import end_of_turn_ids

        loaded = self.session.loaded
        return end_of_turn_ids(loaded) if loaded is not None else ()

    def messages_now(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]

    def settings(self) -> dict[str, Any]:
        """The template's options as a session keeps them (plain values only)."""
        plain = {k: v for k, v in self.options.items() if isinstance(v, (bool, int, float, str))}
        return {"add_generation_prompt": self.add_generation_prompt, **plain}

    def restore(self, messages: Sequence[dict[str, str]], settings: dict[str, Any]) -> None:
        """A session's conversation and options, shown in the editor (``changed``), not traced yet (``encode``)."""
        self.messages = [dict(m) for m in messages]
        self.add_generation_prompt = bool(settings.get("add_generation_prompt", True))
        self.options = {k: v for k, v in settings.items() if k != "add_generation_prompt" and v is not None}
        self.active = self.template is not None
        self.changed.emit()
        self.template_changed.emit()  # the option controls show the options

    # --- verbs -------------------------------------------------------------------------------------
    def edit(self, messages: Sequence[dict[str, str]]) -> None:
        """The user changed the turns: render and trace them once the edits pause."""
        self.messages = [dict(m) for m in messages]
        self.active = True
        self._timer.start()

    def set_messages(self, messages: Sequence[dict[str, str]], trace: bool = True) -> None:
        """Replace the turns (a kept reply, a session): the editor follows (``changed``); traced at once."""
        self.messages = [dict(m) for m in messages]
        self.changed.emit()
        if trace:
            self.active = True
            self.encode()

    def set_option(self, name: str, value: Any) -> None:
        """A template option (``add_generation_prompt`` or one the template reads); traced again at once."""
        if name == "add_generation_prompt":
            self.add_generation_prompt = bool(value)
        elif value is None:
            self.options.pop(name, None)
        else:
            self.options[name] = value
        if self.active:
            self.encode()

    def use(self, on: bool) -> None:
        """The window traces the conversation (True) or the raw prompt (False)."""
        self.active = bool(on) and self.available
        if self.active:
            self.encode()

    def encode(self) -> int:
        """Render the turns now (on a worker) and trace them; the request id (0: nothing to render)."""
        self._timer.stop()
        loaded = self.session.loaded
        if loaded is None or self.template is None:
            return 0
        try:
            messages = checked_messages(self.messages)
        except ChatError as exc:
            self._failed(str(exc))
            return 0
        options = dict(self.options)  # (a name the template does not read is ignored by it)
        self._running += 1
        rid = self._requests.next()
        background.run(_encode, loaded, messages, self.add_generation_prompt, options, newest=self._requests,
                       request_id=rid, on_done=self._encoded, on_error=lambda failure: self._failed(failure.message),
                       on_finished=self._finished)
        return rid

    def _finished(self) -> None:
        self._running -= 1

    def _failed(self, message: str) -> None:
        self.error = message
        self.failed.emit(message)

    def _encoded(self, encoding: ChatEncoding) -> None:
        if self.session.closed or self.session.loaded is None:
            return
        self.encoding, self.error = encoding, None
        if self.active:  # asked for before ``encoded``: its listeners find the request (controller.latest_id)
            self.session.trace_chat(encoding)
        self.encoded.emit(encoding)

    # --- the model ---------------------------------------------------------------------------------
    def _model(self, loaded: LoadedModel | None) -> None:
        self._requests.drop()
        self._timer.stop()
        self.encoding, self.error = None, None
        self.template = getattr(loaded, "chat_template", None) if loaded is not None else None
        notes = getattr(loaded, "notes", []) if loaded is not None else []
        self.problem = next((n for n in notes if n.startswith(BROKEN_PREFIX)), None)
        self.option_names = []
        was_active, self.active = self.active, self.active and self.template is not None
        self.template_changed.emit()
        if self.template is None:
            return
        template = self.template
        self._running += 1
        background.run(_template_options, template, on_done=lambda names: self._options(template, names, was_active),
                       on_error=lambda failure: self._options(template, [], was_active, failure),
                       on_finished=self._finished)

    def _options(self, template: Any, names: list[str], was_active: bool, failure: Failure | None = None) -> None:
        if template is not self.template or self.session.closed:
            return
        self.option_names = [n for n in names if n not in MESSAGE_FIELDS]
        if failure is not None:
            self._failed(failure.message)
        self.template_changed.emit()
        if was_active and self.active:
            self.encode()


def turn_target(spans: ChatSpans | None, token: int | None, delta: int) -> int | None:
    """Where the selection goes turn by turn: the first token of the next turn (``delta`` > 0) or of the turn
    before the selected token (< 0: the start of its own turn first); None without turns or past the ends."""
    if spans is None or spans.n_tokens == 0:
        return None
    starts = spans.turn_starts()
    here = spans.n_tokens - 1 if token is None else min(max(int(token), 0), spans.n_tokens - 1)
    if delta > 0:
        return next((s for s in starts if s > here), None)
    before = [s for s in starts if s < here]
    return before[-1] if before else None


def jump_turn(session: Session, delta: int) -> int | None:
    """Select the first token of the next (``delta`` > 0) or previous turn of the conversation on screen."""
    trace = session.trace
    spans = getattr(trace.meta, "chat", None) if trace is not None else None
    target = turn_target(spans.cut(trace.n_tokens) if spans is not None else None, session.selection.token, delta)
    if target is not None:
        session.selection.set_token(target)
    return target
