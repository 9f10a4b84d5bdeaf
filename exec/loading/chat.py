"""Chat templates: render a conversation into a prompt with the model's Jinja template
(from tokenizer_config.json or the GGUF metadata), as Hugging Face does."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

Message = dict[str, str]


def load_chat_template(folder: str | Path) -> str | None:
    """`chat_template` from tokenizer_config.json (or chat_template.jinja), if any."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text()
    config = folder / "tokenizer_config.json"
    if not config.exists():
        return None
    template = json.loads(config.read_text()).get("chat_template")
    return template if isinstance(template, str) else None


def as_messages(prompt: str | Sequence[Message]) -> list[Message]:
    """A bare string is one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in prompt):
        raise ValueError("a chat prompt is a string or a list of {'role': ..., 'content': ...} messages")
    return [dict(m) for m in prompt]


def render_chat(template: str | None, messages: Sequence[Message], **special: Any) -> str:
    """The prompt text for `messages`, ending with the assistant's turn opener.
    `special` holds bos_token / eos_token for templates that use them."""
    if template is None:
        raise ValueError("chat=True but the model has no chat template "
                         "(tokenizer_config.json or GGUF tokenizer.chat_template)")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    try:
        return env.from_string(template).render(messages=list(messages),
                                                add_generation_prompt=True, **special)
    except TemplateError as e:
        raise ValueError(f"chat template failed to render: {e}") from None


def _raise(message: str) -> None:
    raise TemplateError(message)
