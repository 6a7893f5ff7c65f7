"""Crafted log lines that make a backtracking regex take quadratic or cubic time (issue 17 item 4).

Every parser of llama.cpp output (ledger, plan's dry run, device listings, failure reasons) must read each of these
in well under a second. A line is a long run of one character (or a short group) next to the words the parsers
look for: a pattern that backtracks over the run once per start position shows up as seconds or minutes.
"""

from __future__ import annotations

# what the parsers key on: every regex of ledger.py, plan.py, budget.py and remote.py has its words here
MARKERS = [
    "memory breakdown [MiB]", "| - ", "|  - x |", "|   - Host | 1 = 1 + 1 + 1 |", "buffer size = 1 MiB",
    "CUDA0 model buffer size = 1 MiB", "common_param: - ", "common_param:   - CPU : ", "MiB free)",
    "(1 MiB, 1 MiB free)", "CPU: ", "- x : ", "x: ", "size = 1 MiB (", "KV self size = 1 MiB, ", "), K (f16): 1 MiB",
    " cells", " layers", " seqs", "graph: nodes = ", "graph (", "graph splits = 1 (with bs=1), ", "graph nodes = 1",
    "llama_context: n_ctx = ", "print_info: n_embd = ", "build 1 (", "kv_size = 1", "type_k = '",
    "memory_breakdown_print: | - x (", "memory_breakdown_print: |   - x ", "sched_reserve: ", "compute buffer size =",
    "llama_kv_cache: size = ", "llama_kv_cache: layer 1: dev = ", "failed to fit params to free device memory: ",
    "encountered an error while trying to fit params", "loading model tensors", "using device x (", "RPC0[",
    "cudaMalloc", "ggml_backend_", "ggml_gallocr", "rpc", "GGML_ASSERT", "gguf_init_from_", "error: invalid argument",
    "unknown argument", "failed to allocate x buffer of size 1", "sched copies = ", "pipeline parallelism enabled (",
    "offloaded 1/", "context size reduced from 1 to ", "draft", "VRAM used:", "mem required =", "\x1b[", "[1;",
    '{"msg":"', "Devices:", "printing fitted CLI arguments", "0.00.000.001 I ",
    # issue 18: -sm tensor's Meta device, input buffers, the retry without pipeline parallelism, ollama's records
    "creating a Meta device for tensor parallelism from 2 devices:", "creating a Meta device with 1 devices",
    "- device 0: ", "- device 0: RPC0 (", "Meta() model buffer size = 1 MiB", "Meta(", "input buffer size = 1 MiB",
    "compute buffer allocation failed, retrying without pipeline parallelism",
    'time=2025-09-02T14:46:54.275+08:00 level=INFO source=backend.go:315 msg="', ' msg="model weights" device=',
    ' size="1.0 GiB"', 'msg="compute graph" backend=CUDA0 buffer_type=', "ollama-record: model | ",
    "Jan 30 09:12:13 host ollama[5307]: ", "9月 02 14:46:54 host ollama[1]: ", "]: ", '="', '\\"',
]
# runs of these, 100 KB long, next to the markers
RUNS = [" ", ":", "|", "-", "0", "(", ")", "[", "]", "=", ".", "a", "\t", ",", "_", "'", "1.", "- ", "| ", ": ",
        "0 ", "(a", "a(", "[0;", "1 (", " MiB", "-a ", "\x1b"]
LONG = 100_000


def line_forms(run: str, marker: str, n: int = LONG) -> list[str]:
    body = run * max(1, n // len(run))
    return [marker + body, body + marker, marker + body + marker, marker * max(1, n // max(1, len(marker)))]


def prefixes() -> list[str]:
    """Every marker and each start of it that ends before a blank (`graph splits = 1 (…` → `graph`, `graph splits`,
    `graph splits =` …), plus the two lines issue 26 found: a pattern that backtracks once its keyword has matched
    shows up on a keyword cut short and followed by a long run."""
    out = dict.fromkeys(["graph splits", "llama_kv_cache: size = 1 MiB"])
    for m in MARKERS:
        for i, ch in enumerate(m):
            if ch == " " and i:
                out.setdefault(m[:i])
        out.setdefault(m)
    return list(out)


def under_the_cap(run: str, cap: int) -> list[str]:
    """Lines just shorter than the ledger's cap (which keeps a longer line's two ends with ` … ` between: the run
    is then cut in two): each keyword prefix, a run of `run` filling the line, and an `x`; the run then the keyword;
    the keyword on both sides. The issue's reproduction is `graph splits` + 8,150 blanks + `x`."""
    out = []
    for m in prefixes():
        body = run * max(1, (cap - 2 * len(m) - 2) // len(run))
        out += [m + body + "x", body + m, m + body + m]
    return out


def hostile_log(run: str, n: int = LONG) -> list[str]:
    """One crafted log: every marker with a long run of `run` before, after and around it, and repeated."""
    out = []
    for marker in MARKERS:
        out += line_forms(run, marker, n)
    return out


def issue_cases() -> dict[str, list[str]]:
    """The crafted inputs the issue reported, as log lines."""
    return {
        # `printf 'memory breakdown [MiB]\n| - %*sx\n' 10000 ''`: the row pattern was cubic (296 s)
        "breakdown row of 10,000 spaces": ["memory breakdown [MiB]", "| - " + " " * 10_000 + "x"],
        # 100 KB of `:` before a buffer line: the buffer pattern was quadratic (109 s)
        "100 KB of ':' before buffer size": [":" * 100_000 + " buffer size = 1 MiB"],
        # the model's general.name echoed by llama-server, 4 KB of spaces in it
        "general.name with 4 KB of spaces": [
            "print_info: general.name     = x" + " " * 4096 + "y",
            "llama_model_loader: - kv   2: general.name str = x" + " " * 4096 + "y",
            "load_tensors:   CPU_Mapped model buffer size =   " + " " * 4096 + "1.00 MiB",
        ],
    }
