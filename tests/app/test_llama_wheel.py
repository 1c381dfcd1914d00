"""The per-machine llama-cpp-python wheel cache (jxai_app/devtools/llama_wheel.py; README "What
`make run` does"): where a wheel is looked for, what makes another folder, and the progress
lines printed while the first build runs. The build and the install from the cache themselves
were measured on scratch clones (two `make .venv/.installed-local` runs; see the README figures).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from jxai_app.devtools import llama_wheel


def test_the_pin_of_the_local_extra_names_the_version(tmp_path: Path) -> None:
    assert llama_wheel.pinned_version() == "0.3.36"  # pyproject.toml's [local] extra
    unpinned = tmp_path / "pyproject.toml"
    unpinned.write_text('[project.optional-dependencies]\nlocal = ["llama-cpp-python[server]>=0.3.2"]\n')
    try:
        llama_wheel.pinned_version(unpinned)
    except SystemExit as exc:
        assert "must pin llama-cpp-python==<version>" in str(exc)
    else:
        raise AssertionError("an unpinned requirement was accepted")


def test_the_folder_is_keyed_by_version_and_build_flags_under_the_xdg_cache(tmp_path: Path) -> None:
    avx2 = {"XDG_CACHE_HOME": str(tmp_path), "CMAKE_ARGS": "-DGGML_NATIVE=OFF -DGGML_AVX2=ON"}
    folder = llama_wheel.wheel_dir("0.3.36", avx2)
    assert folder.parent == tmp_path / "jxai" / "wheels" and folder.name.startswith("0.3.36-")
    assert llama_wheel.wheel_dir("0.3.36", dict(avx2)) == folder  # stable: every clone finds it
    assert llama_wheel.wheel_dir("0.3.36", {**avx2, "CMAKE_ARGS": ""}) != folder  # a native build elsewhere
    assert llama_wheel.wheel_dir("0.3.37", avx2).name.startswith("0.3.37-")
    assert llama_wheel.wheel_dir("0.3.36", {"CMAKE_ARGS": ""}).parent == Path.home() / ".cache" / "jxai" / "wheels"


def test_only_a_wheel_of_that_version_counts(tmp_path: Path) -> None:
    assert llama_wheel.cached_wheel(tmp_path / "absent", "0.3.36") is None  # no cache yet: a build
    (tmp_path / "llama_cpp_python-0.3.35-py3-none-linux_x86_64.whl").write_bytes(b"")
    assert llama_wheel.cached_wheel(tmp_path, "0.3.36") is None
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"")
    assert llama_wheel.cached_wheel(tmp_path, "0.3.36") == wheel


def test_progress_is_a_line_per_tenth_of_the_steps_or_per_quiet_minute() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def output() -> Iterator[str | None]:
        yield "Building wheel for llama-cpp-python (pyproject.toml): started"
        for step in range(1, 101):
            now[0] += 3.0
            yield f"  [{step}/100] /usr/bin/g++ -O3 -c ggml.c"
            if step == 50:
                for _ in range(130):  # a long file: two quiet minutes
                    now[0] += 1.0
                    yield None

    lines = list(llama_wheel.progress_lines(output(), clock))
    steps = [line for line in lines if line.startswith("building llama.cpp: step")]
    assert steps[0] == "building llama.cpp: step 10/100 (0 min)" and steps[-1].startswith("building llama.cpp: step 100/100")
    assert len(steps) == 10
    assert [line for line in lines if line.startswith("still building")] == ["still building (3 min)", "still building (4 min)"]
