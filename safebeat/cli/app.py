"""Finding the Celery app `-A` names, as `celery -A` does, with a one-line error if it can't.

`-A proj`, `-A proj.celery` or `-A proj.celery:app`: the module is imported from the
current directory or the Python path, then the app is looked up in it the way Celery
looks (an `app` or `celery` attribute, `proj.celery`, or the module's only Celery app).
"""

from __future__ import annotations

import os
from typing import Any

from safebeat.errors import SafebeatError


class AppNotFound(SafebeatError):
    """`-A` names no Celery app: the module or the attribute is missing, or its import failed.

    `usage` is True when the value of `-A` is wrong (exit status 2, as for `celery -A`),
    False when the app's own code failed while importing (exit status 1).
    """

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage


def _missing_module(spec: str, module: str) -> AppNotFound:
    return AppNotFound(
        f"-A {spec}: no module named {module!r} in the current directory ({os.getcwd()}) "
        "or on the Python path; run from the folder that holds it (where you run "
        "`celery -A`), or set PYTHONPATH",
        usage=True,
    )


def _import_failed(spec: str, exc: BaseException) -> AppNotFound:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return AppNotFound(
        f"-A {spec}: importing the app failed: {type(exc).__name__}: {detail} "
        f"(current directory {os.getcwd()}; run with --traceback to see where)",
        usage=False,
    )


def load_app(spec: str) -> Any:
    """Return the Celery app `spec` names, or raise AppNotFound saying what is missing."""
    from celery import Celery  # noqa: PLC0415 - only with -A
    from celery.app.utils import find_app  # noqa: PLC0415
    from celery.utils.imports import import_from_cwd  # noqa: PLC0415

    module_name, _, attribute = spec.partition(":")
    try:
        module = import_from_cwd(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
            raise _missing_module(spec, module_name) from exc
        raise _import_failed(spec, exc) from exc
    except Exception as exc:
        raise _import_failed(spec, exc) from exc
    if attribute and not hasattr(module, attribute):
        raise AppNotFound(
            f"-A {spec}: module {module_name!r} has no attribute {attribute!r} "
            f"(current directory {os.getcwd()})",
            usage=True,
        )
    try:
        app = find_app(spec, imp=import_from_cwd)
    except (AttributeError, ImportError) as exc:
        raise AppNotFound(
            f"-A {spec}: module {module_name!r} has no Celery app (no `app` or `celery` "
            f"attribute, no {module_name}.celery module); name it as -A {module_name}:<app>",
            usage=True,
        ) from exc
    except Exception as exc:
        raise _import_failed(spec, exc) from exc
    if not isinstance(app, Celery):
        raise AppNotFound(
            f"-A {spec}: that is a {type(app).__name__}, not a Celery app", usage=True
        )
    return app
