"""A small stand-in for a llama.cpp source tree, built by real CMake and a real compiler in seconds: the same
target names and output layout (`bin/llama-server`, `bin/ggml-rpc-server`, `bin/libggml-base.so`, and
GGML_SCHED_MAX_COPIES compiled into ggml-base), and the files `--llama-cpp DIR` checks a tree for. Test support."""

from __future__ import annotations

from pathlib import Path

CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake_llama C)
if(NOT DEFINED GGML_SCHED_MAX_COPIES)
  set(GGML_SCHED_MAX_COPIES 4)
endif()
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(ggml-base SHARED base.c)
set_target_properties(ggml-base PROPERTIES VERSION 0.1.0 SOVERSION 0)
target_compile_definitions(ggml-base PRIVATE COPIES=${GGML_SCHED_MAX_COPIES})
foreach(t llama-server ggml-rpc-server llama-bench llama-fit-params llama-perplexity llama-gguf-split)
  add_executable(${t} main.c)
  target_link_libraries(${t} ggml-base)
endforeach()
"""
MAIN = '#include <stdio.h>\nint copies(void);\nint main(void) { printf("version: fake, copies=%d\\n", copies()); ' \
       'return 0; }\n'
BASE = "int copies(void) { return COPIES; }\n"


def make(src: Path) -> Path:
    src.mkdir(parents=True, exist_ok=True)
    (src / "CMakeLists.txt").write_text(CMAKE)
    (src / "main.c").write_text(MAIN)
    (src / "base.c").write_text(BASE)
    for f in ("include/llama.h", "ggml/include/ggml.h"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("")
    (src / "tools" / "server").mkdir(parents=True, exist_ok=True)
    return src
