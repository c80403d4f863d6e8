"""Source digests (the versions in every cache key) remembered under the files' status."""

from __future__ import annotations

import pytest

from tecomp.codegen import disk_cache as dc
from tecomp.codegen.target import source_digest, source_status

digest = source_digest.__wrapped__  # without the per-process memo


@pytest.fixture
def store(tmp_path):
    old = dc.set_default_cache(tmp_path / "cache")
    yield dc.default_cache()
    dc.set_default_cache(old)


def test_a_changed_file_is_read_again(tmp_path, store):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("x = 1\n")
    (src / "sub" / "b.py").write_text("y = 2\n")
    first = digest(str(src))
    status = source_status([str(src)])
    assert store.get(status) == {"digest": first}                    # remembered
    assert digest(str(src)) == first
    (src / "a.py").write_text("x = 3\n")                             # same size, new content
    assert source_status([str(src)]) != status
    changed = digest(str(src))
    assert changed != first
    (src / "sub" / "c.py").write_text("")                            # a file added
    assert digest(str(src)) != changed
    dc.set_default_cache(None)                                       # TECOMP_CACHE=0
    assert digest(str(src)) == digest(str(src))


def test_remembered_digest_is_the_contents_digest(tmp_path, store):
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("def f():\n    return 1\n")
    remembered = digest(str(src))
    dc.set_default_cache(None)
    assert digest(str(src)) == remembered                             # read from the files
    dc.set_default_cache(store)
    store.put(source_status([str(src)]), {"digest": "not a digest"})  # a malformed entry
    assert digest(str(src)) == remembered
