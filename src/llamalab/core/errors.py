"""One small exception family. Each error carries a message and a tip; the CLI prints them once."""

from __future__ import annotations


class LlamalabError(Exception):
    """Base of every error llamalab raises on purpose. `tip` says what to try next."""

    exit_code = 1

    def __init__(self, message: str, tip: str | None = None):
        super().__init__(message)
        self.message = message
        self.tip = tip

    def __str__(self) -> str:
        return self.message if not self.tip else f"{self.message}\nTip: {self.tip}"


class ConfigError(LlamalabError):
    """A study file, preset, flag or other user input is wrong."""

    exit_code = 2


class SourceError(LlamalabError):
    """llama.cpp source could not be fetched, verified or found."""


class BuildError(LlamalabError):
    """A CMake configure or build failed."""


class LaunchError(LlamalabError):
    """A llama-server or rpc-server did not start or died."""


class WorkloadError(LlamalabError):
    """A request to a running server failed."""


class ModelError(LlamalabError):
    """A model file is missing, not GGUF, or damaged."""

    exit_code = 2


class StoreError(LlamalabError):
    """The results database cannot be used."""


class OutputError(LlamalabError):
    """A report or export file cannot be written where asked (a directory, a device, a read-only folder …)."""

    exit_code = 2


class Interrupted(LlamalabError):
    """The user or the system asked llamalab to stop (SIGINT/SIGTERM)."""

    exit_code = 130
