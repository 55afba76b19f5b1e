"""Contexts: each one Jupyter kernel with its own state, language and working directory.

A ``Context`` owns one ``KernelManager`` (the kernel process) and one blocking client (its
channels). ``Context.lock`` serializes executions in it, as a notebook does: a second request
waits for the first. ``ContextTable`` maps ids to contexts and keeps one default context per
language, made on first use (the Python one at start, so a warm template holds a ready kernel).

Languages are the installed kernelspecs' ``language`` fields (``python``, ``bash``, ...), plus
the aliases in ``_ALIASES``; an unknown one is refused with the list of those that exist.
"""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

__all__ = ["Context", "ContextTable", "UnknownContext", "UnknownLanguage"]

_ALIASES = {"py": "python", "python3": "python", "sh": "bash", "js": "javascript"}
READY_TIMEOUT = 120.0  # a cold kernel start in gVisor with numpy and pandas installed: ~5 s
MAX_CONTEXTS = 64  # kernels are processes of ~50 MiB each; the sandbox's memory is the real bound


class UnknownLanguage(ValueError):
    """No installed kernel runs this language."""


class UnknownContext(KeyError):
    """No context has this id."""


def _kernel_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of kernels: the server's, without the path that finds this package."""
    clean = dict(env)
    if clean.get("PYTHONPATH") == os.environ.get("CORRAL_INTERPRETER_PATH", "/opt/corral"):
        del clean["PYTHONPATH"]
    clean.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return clean


class Context:
    """One kernel. ``lock`` is held for the whole of an execution, a restart or a removal."""

    def __init__(self, context_id: str, language: str, kernel_name: str, cwd: str) -> None:
        self.id = context_id
        self.language = language
        self.kernel_name = kernel_name
        self.cwd = cwd
        self.lock = threading.Lock()
        self.manager = KernelManager(kernel_name=kernel_name)
        self.client: Any = None

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self) -> None:
        """Start the kernel and wait until it answers (raises RuntimeError if it never does)."""
        self.manager.start_kernel(cwd=self.cwd, env=_kernel_env(dict(os.environ)))
        self._connect()

    def _connect(self) -> None:
        client = self.manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=READY_TIMEOUT)
        except RuntimeError as exc:
            client.stop_channels()
            raise RuntimeError(
                f"the {self.language} kernel of context {self.id} did not start: {exc}"
            ) from exc
        self.client = client

    def restart(self) -> None:
        """A fresh kernel in the same context: variables and imports are gone."""
        if self.client is not None:
            self.client.stop_channels()
            self.client = None
        self.manager.restart_kernel(now=True)
        self._connect()

    def interrupt(self) -> None:
        self.manager.interrupt_kernel()

    def alive(self) -> bool:
        return bool(self.manager.is_alive())

    def shutdown(self) -> None:
        if self.client is not None:
            self.client.stop_channels()
            self.client = None
        if self.manager.has_kernel:
            self.manager.shutdown_kernel(now=True)


class ContextTable:
    """All contexts of this server, by id, plus the default context of each language.

    ``_lock`` guards ``_contexts`` and ``_defaults`` only; kernels start outside it (a start takes
    seconds), and a default context is made once: concurrent first uses wait on ``_starting``."""

    def __init__(self, default_cwd: str) -> None:
        self.default_cwd = default_cwd
        self._lock = threading.Lock()
        self._contexts: dict[str, Context] = {}
        self._defaults: dict[str, str] = {}
        self._starting: dict[str, threading.Event] = {}
        self._specs: dict[str, str] = {}  # language -> kernel name

    def languages(self) -> dict[str, str]:
        """Installed languages and the kernel that runs each (read once, cached)."""
        with self._lock:
            if self._specs:
                return dict(self._specs)
        specs = KernelSpecManager().get_all_specs()
        found: dict[str, str] = {}
        for name, entry in sorted(specs.items()):
            language = str(entry.get("spec", {}).get("language", "")).lower()
            if language and (language not in found or name == "python3"):
                found[language] = name
        with self._lock:
            self._specs = found
        return dict(found)

    def resolve_language(self, language: str | None) -> tuple[str, str]:
        """``(language, kernel name)`` for a requested language (None: Python)."""
        wanted = (language or "python").strip().lower()
        wanted = _ALIASES.get(wanted, wanted)
        specs = self.languages()
        if wanted not in specs:
            have = ", ".join(sorted(specs)) or "none"
            raise UnknownLanguage(
                f"no kernel for language {language!r} in this sandbox (installed: {have})"
            )
        return wanted, specs[wanted]

    def create(self, language: str | None, cwd: str | None) -> Context:
        """A new context with its kernel started."""
        name, kernel = self.resolve_language(language)
        directory = cwd or self.default_cwd
        if not os.path.isdir(directory):
            raise ValueError(f"cwd {directory!r} is not a directory in this sandbox")
        with self._lock:
            if len(self._contexts) >= MAX_CONTEXTS:
                raise OverflowError(
                    f"this sandbox already has {MAX_CONTEXTS} contexts: remove some first"
                )
        context = Context(uuid.uuid4().hex, name, kernel, directory)
        try:
            context.start()
        except BaseException:
            context.shutdown()
            raise
        with self._lock:
            self._contexts[context.id] = context
        return context

    def get(self, context_id: str) -> Context:
        with self._lock:
            context = self._contexts.get(context_id)
        if context is None:
            raise UnknownContext(f"no context {context_id!r} in this sandbox")
        return context

    def default(self, language: str | None) -> Context:
        """The language's default context, made on first use (once, whoever asks first)."""
        name, _ = self.resolve_language(language)
        while True:
            with self._lock:
                existing = self._defaults.get(name)
                if existing in self._contexts:
                    return self._contexts[existing]
                starting = self._starting.get(name)
                if starting is None:
                    starting = self._starting[name] = threading.Event()
                    mine = True
                else:
                    mine = False
            if not mine:
                starting.wait()
                continue
            try:
                context = self.create(name, None)
                with self._lock:
                    self._defaults[name] = context.id
                return context
            finally:
                with self._lock:
                    del self._starting[name]
                starting.set()

    def all(self) -> list[Context]:
        with self._lock:
            return list(self._contexts.values())

    def remove(self, context_id: str) -> None:
        context = self.get(context_id)
        with context.lock:
            with self._lock:
                self._contexts.pop(context_id, None)
            context.shutdown()

    def shutdown(self) -> None:
        for context in self.all():
            context.shutdown()
