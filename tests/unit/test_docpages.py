"""The Markdown reader behind the executable-docs tests: blocks, labels, files, output."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docpages import Page, blocks, missing_lines, normalise

PAGE = """\
# A page

```python
# proj/celery.py
app = 1
```

<!-- block: beat -->
```
celery -A proj beat -l INFO   # a comment
```

1. A step:

    <!-- block: settings -->
    ```python
    INSTALLED_APPS = [...]
    ```

````
```
a fence inside a longer one
```
````
"""


def test_blocks_are_found_with_language_label_and_dedented_text() -> None:
    """Fenced blocks keep their language and label, and lose a list item's indent."""
    found = blocks(PAGE)
    assert [(b.language, b.label) for b in found] == [
        ("python", None),
        ("", "beat"),
        ("python", "settings"),
        ("", None),
    ]
    assert found[2].text == "INSTALLED_APPS = [...]\n"
    assert found[3].text == "```\na fence inside a longer one\n```\n"


def test_a_python_block_naming_a_path_is_that_file() -> None:
    """A Python block whose first line is `# path.py` is a file; other blocks are not."""
    found = blocks(PAGE)
    assert found[0].path == "proj/celery.py"
    assert [b.path for b in found[1:]] == [None, None, None]


def test_commands_leave_out_comment_lines_but_keep_the_line_as_written() -> None:
    """A shell block's commands are its non-blank lines that are not comments."""
    block = blocks("```\n# before\nsafebeat migrate\n\nsafebeat status\n```\n")[0]
    assert block.commands() == ["safebeat migrate", "safebeat status"]


def test_an_unclosed_block_is_an_error_naming_its_line() -> None:
    """A block that never closes is reported with the line it opens on."""
    with pytest.raises(ValueError, match="line 2"):
        blocks("text\n```\nnever closed\n")


def test_a_page_must_have_each_label_once_and_each_file_once(tmp_path: Path) -> None:
    """Asking for a missing label, or a page showing one file twice, fails with the name."""
    page_file = tmp_path / "page.md"
    page_file.write_text(PAGE + "\n```python\n# proj/celery.py\napp = 2\n```\n")
    page = Page(page_file)
    assert page.block("beat").label == "beat"
    with pytest.raises(AssertionError, match="block: worker"):
        page.block("worker")
    with pytest.raises(AssertionError, match=r"a second block is proj/celery\.py"):
        page.files()


def test_normalise_blanks_times_ids_hosts_and_urls_only() -> None:
    """Two runs' log lines compare equal; a changed word or number does not."""
    shown = (
        "[2026-12-01 15:38:55,746: INFO/MainProcess] safebeat: 3 entries, store "
        "postgresql://postgres:***@localhost:5432/postgres, namespace 'proj', "
        "replica vm:13018:422e1d"
    )
    real = (
        "[2027-01-02 01:02:03,004: INFO/MainProcess] safebeat: 3 entries, store "
        "postgresql://postgres@127.0.0.1:5432/safebeat_docs, namespace 'proj', "
        "replica ci-runner-7.example:1:0be2c4"
    )
    assert normalise(shown) == normalise(real)
    assert normalise(shown) != normalise(real.replace("3 entries", "4 entries"))
    assert normalise(shown) != normalise(real.replace("'proj'", "'default'"))


def test_missing_lines_reports_what_the_output_lacks() -> None:
    """Each shown line must be somewhere in the output; `...` stands for left-out lines."""
    output = (
        "postgresql://postgres@127.0.0.1:5432/x: schema at version 3\n"
        "[2026-12-01 15:39:16,064: INFO/ForkPoolWorker-2] Task t[f8b4a6ad-a683-5b0b-acee-"
        "9d844be3adfa] succeeded in 0.009119866999981241s: None\n"
    )
    shown_ok = (
        "[2026-03-02 09:42:10,042: INFO/ForkPoolWorker-1] Task t[1f4e6c52-9d0e-5b9a-8e0a-"
        "3c1d2b7f9a01] succeeded in 0.0123s: None\n...\n"
    )
    assert missing_lines(shown_ok, output) == []
    stale = "postgresql://postgres:***@localhost:5432/postgres: schema at version 1\n"
    assert missing_lines(stale, output) == [stale.strip()]
