"""Find the ``App`` named by ``MODULE:APP`` on the command line, the way uvicorn does."""

from __future__ import annotations

import importlib
import os
import sys

from workers.app import App


class AppNotFound(ValueError):
    """``MODULE:APP`` does not name an importable ``workers.App``; the message says why."""


def load_app(spec: str) -> App:
    """Import ``MODULE`` (the current directory first) and return its ``APP`` attribute.

    ``APP`` may be dotted (``module:holder.app``).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppNotFound(f"expected MODULE:APP (for example 'myjobs.worker:app'), got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise AppNotFound(
                f"cannot find module {module_name!r} (looked in {cwd} and sys.path)"
            ) from exc
        raise AppNotFound(f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise AppNotFound(
            f"importing {module_name!r} failed: {type(exc).__qualname__}: {exc}"
        ) from exc
    found: object = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise AppNotFound(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(found, App):
        raise AppNotFound(f"{spec!r} is a {type(found).__qualname__}, not a workers.App")
    return found
