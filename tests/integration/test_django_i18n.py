# ruff: noqa: RUF001 - the Russian text is what these tests look for
"""The admin speaks the project's language: the shipped Russian and German catalogs, and
catalogs in step with the code (what `makemessages` and `compilemessages` would write)."""

from __future__ import annotations

import ast
import gettext
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.integration.test_django_admin import ENTRIES, REPLICA, settings_definition

pytestmark = pytest.mark.django

APP = Path(__file__).parents[2] / "safebeat" / "contrib" / "django"
LANGUAGES = ("ru", "de")
#: What `makemessages` is run with (docs/development.md).
MAKEMESSAGES = {"locale": list(LANGUAGES), "add_location": "file", "no_obsolete": True}


@pytest.mark.parametrize(
    ("language", "words"),
    [
        (
            "ru",
            [
                "<h1>Записи safebeat</h1>",
                "<th>Пространство имён</th>",
                "<th>Последнее окно</th>",
                "Дозапустить выбранную запись...",
                '<td class="paused">на паузе</td>',
                "приостановлена (пространство имён",
            ],
        ),
        (
            "de",
            [
                "<h1>safebeat-Einträge</h1>",
                "<th>Namensraum</th>",
                "<th>Letztes Fenster</th>",
                "Ausgewählten Eintrag nachholen...",
                '<td class="paused">pausiert</td>',
                "pausiert (Namensraum",
            ],
        ),
    ],
)
def test_entries_page_and_its_messages_render_in_the_project_language(
    client: Any, celery_app: Celery, namespace: str, language: str, words: list[str]
) -> None:
    """With LANGUAGE_CODE set, the entries page, its actions and their messages are translated."""
    from django.test import override_settings

    from safebeat.stores.django import DjangoStore

    DjangoStore("django://default").register(namespace, [settings_definition(celery_app)], REPLICA)
    with override_settings(LANGUAGE_CODE=language):
        response = client.post(
            ENTRIES,
            {"action": "pause", "entry": [json.dumps([namespace, "nightly-report"])]},
            follow=True,
        )
    assert response.status_code == 200
    text = response.content.decode()
    for word in words:
        assert word in text, word
    assert "Pause selected entries" not in text


def test_history_page_names_its_columns_in_russian(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """The dispatch history's column headers come from the models' translated verbose names."""
    from django.test import override_settings

    from safebeat.identity import task_id_for
    from safebeat.stores.django import DjangoStore
    from safebeat.stores.protocols import NewClaim

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    window = store.states(namespace)["nightly-report"].anchor
    task_id = task_id_for(namespace, "nightly-report", window)
    store.claim_extra(
        namespace,
        [NewClaim("nightly-report", window, task_id, "t")],
        replica=REPLICA,
        reason="trigger",
    )
    with override_settings(LANGUAGE_CODE="ru"):
        response = client.get(f"/admin/safebeat/dispatch/?namespace={namespace}")
    assert response.status_code == 200
    text = response.content.decode()
    assert "<title>Выберите запись об отправке для просмотра" in text
    for header in ("Окно (UTC)", "Окно (в зоне записи)", "Статус", "Занято в", "Дубликаты"):
        assert f">{header}</a></div>" in text, header


def read_po(path: Path) -> dict[str, list[str]]:
    """A .po file as msgid (with `|plural`) -> translations; the header left out."""
    catalog: dict[str, list[str]] = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        parts: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith("#") or not line:
                continue
            quoted = line
            if not line.startswith('"'):
                key, _, quoted = line.partition(" ")
                parts[key] = ""
            parts[key] += ast.literal_eval(quoted)
        if parts.get("msgid"):
            msgid = parts["msgid"] + "|" + parts.get("msgid_plural", "")
            catalog[msgid] = [v for k, v in sorted(parts.items()) if k.startswith("msgstr")]
    return catalog


@pytest.mark.skipif(shutil.which("xgettext") is None, reason="GNU gettext is not installed")
def test_catalogs_are_in_step_with_the_code(
    django_aliases: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`makemessages` over the app finds no new or removed message, and every one has its
    translation in each shipped language."""
    from django.core.management import call_command

    copy = tmp_path / "app"
    shutil.copytree(APP, copy, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    monkeypatch.chdir(copy)
    call_command("makemessages", verbosity=0, **MAKEMESSAGES)
    for language in LANGUAGES:
        po = Path("locale", language, "LC_MESSAGES", "django.po")
        shipped, fresh = read_po(APP / po), read_po(copy / po)
        assert shipped == fresh, f"run makemessages for {language} (docs/development.md)"
        assert all(all(forms) for forms in shipped.values()), f"untranslated in {language}"


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="GNU gettext is not installed")
@pytest.mark.parametrize("language", LANGUAGES)
def test_compiled_catalogs_are_those_of_the_po_files(tmp_path: Path, language: str) -> None:
    """Each shipped .mo holds what `msgfmt` makes of its .po: users need no gettext."""
    folder = APP / "locale" / language / "LC_MESSAGES"
    fresh = tmp_path / "django.mo"
    subprocess.run(
        ["msgfmt", "--check-format", "-o", str(fresh), str(folder / "django.po")], check=True
    )
    with (folder / "django.mo").open("rb") as shipped, fresh.open("rb") as compiled:
        catalog = gettext.GNUTranslations(shipped)._catalog  # type: ignore[attr-defined]
        assert catalog == gettext.GNUTranslations(compiled)._catalog  # type: ignore[attr-defined]
    assert len(catalog) > 90
